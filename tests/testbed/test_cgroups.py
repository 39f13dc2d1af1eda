"""A machine's own cgroups: what nspawn joins before it execs, and their removal after a stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from lab.testbed import cgroups
from lab.testbed.layout import Layout, Machine


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root (CI runs as root)")
    machine = replace(Layout(f"t{os.getpid() % 100000}", 1).machine(1), root=tmp_path / "machines" / "node1")
    yield machine
    cgroups.remove(machine)


def test_a_process_started_in_the_machines_cgroups_is_in_every_hierarchy(machine: Machine) -> None:
    paths = cgroups.create(machine)
    assert paths, "no cgroup hierarchy found"
    program = "import time; print('up', flush=True); time.sleep(60)"
    child = subprocess.Popen(cgroups.joined(paths, [sys.executable, "-c", program]), stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"up\n"  # joined, then exec'ed
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


def test_down_from_another_process_finds_the_cgroups_up_made(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m lab.testbed down` may run where the process's own cgroups differ from those of
    the one that ran `up` (another session's memory cgroup): the record beside the machine's tree
    names what `create` made."""
    made = cgroups.create(machine)
    elsewhere = [path.parent / "elsewhere" for path in made]
    monkeypatch.setattr(cgroups, "_own_paths", lambda: elsewhere)
    cgroups.remove(machine)
    assert not any(p.exists() for p in made)
    assert not machine.root.with_name(f"{machine.root.name}.cgroups").exists()
