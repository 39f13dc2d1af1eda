"""Helpers of single `labctl` commands: status' live figures, and the Prometheus client."""
