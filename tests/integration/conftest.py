"""Integration fixtures: two real test machines for the whole session, removed whatever happens.

These tests need root (namespaces, links, mounts); CI runs as root, so there they always run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lab import testbed
from lab.config import LabConfig, load_stack
from tests.support.machine_state import STACK


@pytest.fixture(scope="session")
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces, links and mounts for the test machines")


@pytest.fixture(scope="session")
def lab() -> LabConfig:
    return load_stack(STACK)


@pytest.fixture(scope="session")
def machines(root: None, lab: LabConfig) -> Iterator[testbed.Testbed]:
    """The machines stacks/Pulumi.testbed.yaml describes; `down` runs even when a test fails.

    Test runs on one machine take turns: the addresses are fixed by the stack file. Whatever
    holds those addresses while no run holds the lock is a leftover of a killed run: removed.
    """
    layout = testbed.Layout(count=len(lab.nodes))
    with testbed.exclusive():
        left = testbed.leftovers(layout)
        if left:
            print(f"removing the leftovers of an earlier run: {'; '.join(left)}")
            testbed.down(layout)
        try:
            yield testbed.up(layout)
        finally:
            testbed.down(layout)
