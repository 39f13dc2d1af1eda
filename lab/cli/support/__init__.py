"""Helpers of single `labctl` commands: status' live figures."""
