"""Reaching the lab's nodes: commands over SSH with the stack's key and host-key policy, and what
the server's cluster says about itself (whether it runs, its training pods, its GPU nodes)."""
