"""Reaching the lab's nodes: commands over SSH with the stack's key and host-key policy, what the
server's cluster says about itself (whether it runs, its training pods, its GPU nodes), and what
its Prometheus says of the ranks."""
