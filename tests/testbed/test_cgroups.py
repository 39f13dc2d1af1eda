"""A machine's own cgroups: what nspawn joins before it execs, and their removal after a stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.testbed import cgroups
from lab.testbed.layout import Layout, Machine


@pytest.fixture
def machine() -> Iterator[Machine]:
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root (CI runs as root)")
    machine = Layout(f"t{os.getpid() % 100000}", 1).machine(1)
    yield machine
    cgroups.remove(machine)


def test_a_process_started_in_the_machines_cgroups_is_in_every_hierarchy(machine: Machine) -> None:
    paths = cgroups.create(machine)
    assert paths, "no cgroup hierarchy found"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=cgroups.joiner(paths)
    )
    try:
        own = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert own.count(f"/{machine.netns}\n") == len(paths), own
        # A grandchild's nested cgroup, as a kubelet's /kubepods/... would leave it.
        nested = paths[0] / "kubepods" / "pod1"
        nested.mkdir(parents=True)
        (nested / "cgroup.procs").write_text(str(child.pid))
        cgroups.remove(machine)
        assert child.wait(timeout=10) == -9  # killed: nothing of the machine runs on
        assert not any(p.exists() for p in paths)
    finally:
        child.kill()
        child.wait()


def test_a_stale_tree_of_an_earlier_machine_is_replaced(machine: Machine) -> None:
    first = cgroups.create(machine)
    (first[0] / "kubepods").mkdir()
    again = cgroups.create(machine)
    assert again == first
    assert not (again[0] / "kubepods").exists()
