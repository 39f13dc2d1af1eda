"""Debian's Prometheus and node exporter, for the tests that run them for real; each is skipped
where its package is missing (scripts/apt-packages.txt installs both). Registered as a plugin by
tests/conftest.py."""

from __future__ import annotations

import shutil

import pytest

from lab.cli.try_local.local_prometheus import PROMETHEUS
from lab.cli.try_local.node_exporter import NODE_EXPORTER
from tests.support.tiers import costly

INSTALL = "install Debian's prometheus and prometheus-node-exporter (scripts/apt-packages.txt)"


@pytest.fixture
@costly("a real Prometheus server")
def prometheus() -> str:
    """The Prometheus binary `labctl try` runs."""
    if shutil.which(PROMETHEUS) is None:
        pytest.skip(f"{PROMETHEUS} is missing: {INSTALL}")
    return PROMETHEUS


@pytest.fixture
@costly("a real node exporter")
def node_exporter() -> str:
    """The node exporter binary `labctl try` runs on each machine."""
    if shutil.which(NODE_EXPORTER) is None:
        pytest.skip(f"{NODE_EXPORTER} is missing: {INSTALL}")
    return NODE_EXPORTER
