"""The real control plane, started once for the session: every test here reads the live cluster.

These tests need root (a network namespace); CI runs as root, so there they always run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lab import controlplane
from lab.config import LabConfig, load_stack
from lab.controlplane.layout import checkout_name
from tests.support.tiers import costly

# The stack whose machines become the kwok nodes, and which the program tests derive theirs from.
BASE_STACK = "example-cpu"


@pytest.fixture(scope="session")
def base_stack() -> str:
    return BASE_STACK


@pytest.fixture(scope="session")
def base_lab() -> LabConfig:
    return load_stack(BASE_STACK)


@pytest.fixture(scope="session")
@costly(
    "a real control plane: etcd, the API server, its controllers, the scheduler, kwok and Kueue",
    shares="controlplane",
)
def plane(base_lab: LabConfig) -> Iterator[controlplane.ControlPlane]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create the control plane's network namespace")
    # Kueue beside it, configured as the lab installs it: the tests that use no gang scheduler
    # meet its webhooks too, as a cluster with Kueue would make them.
    with controlplane.running(checkout_name(), base_lab.nodes, BASE_STACK, kueue_for=base_lab) as started:
        yield started
