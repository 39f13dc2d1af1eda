"""Helpers of single `labctl` commands: doctor's checks, init's stack file, status' live figures
and the try's Prometheus."""
