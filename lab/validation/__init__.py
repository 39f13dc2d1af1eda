"""Validating a lab: the testinfra suite (`suite/`) and the runner behind `labctl validate`."""
