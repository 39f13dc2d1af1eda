"""Helpers of single `labctl` commands: init's stack file, status' live figures
and the try's Prometheus."""
