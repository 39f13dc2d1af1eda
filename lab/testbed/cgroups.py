"""A cgroup of each machine's own in every hierarchy, so a kubelet inside sees only its machine.

systemd-nspawn gives the machine a cgroup namespace rooted where nspawn itself runs. Started
in the host's cgroup, every machine's `/kubepods` is the host's, shared by both machines and
left behind after a stop (a stale empty tree slows the next pod start from 2 s to about 25 s:
docs/kubelets.md). So nspawn joins `<this process's cgroup>/<machine's namespace name>` in every
hierarchy before it execs, and `remove` kills what is left there and deletes the tree bottom-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from lab.testbed.commands import TestbedError
from lab.testbed.layout import Machine

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cpuset refuses a task in a new cgroup until its cpus and memory nodes are set (cgroup v1:
# Documentation/admin-guide/cgroup-v1/cpusets.rst, "a cpuset must have cpus and mems assigned").
CPUSET_INHERITED = ("cpuset.cpus", "cpuset.mems")
REMOVE_TIMEOUT_S = 10


def _own_paths() -> list[Path]:
    """The folders of this process's cgroup, one per mounted hierarchy (v1 controllers, v2)."""
    mounted = {p.name: p for p in CGROUP_ROOT.iterdir() if p.is_dir()} if CGROUP_ROOT.is_dir() else {}
    paths = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        mount = mounted.get(controllers) or mounted.get(controllers.removeprefix("name="))
        if controllers == "":  # the v2 hierarchy: beside v1 (hybrid) or alone
            unified = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.procs").exists() else None
            mount = mounted.get("unified") or unified
        if mount is not None:
            paths.append(mount / path.lstrip("/"))
    return paths


def machine_paths(machine: Machine) -> list[Path]:
    return [own / machine.netns for own in _own_paths()]


def create(machine: Machine) -> list[Path]:
    """Make the machine's cgroups (a stale tree of an earlier machine is removed first)."""
    remove(machine)
    made = []
    for path in machine_paths(machine):
        path.mkdir()
        made.append(path)
        for name in CPUSET_INHERITED:
            if (path / name).exists():
                (path / name).write_text((path.parent / name).read_text())
    return made


def joiner(paths: list[Path]) -> Callable[[], None]:
    """A function for Popen's preexec_fn: the child moves itself into `paths` before it execs."""

    def join() -> None:
        for path in paths:
            (path / "cgroup.procs").write_text("0")  # 0: the writing process itself

    return join


def remove(machine: Machine) -> None:
    """Kill whatever still runs in the machine's cgroups, then delete them, deepest first."""
    trees = [p for p in machine_paths(machine) if p.is_dir()]
    deadline = time.monotonic() + REMOVE_TIMEOUT_S
    while True:
        pids = {pid for tree in trees for pid in _pids(tree)}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left = [d for tree in trees for d in _bottom_up(tree) if not _rmdir(d)]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TestbedError(f"{machine.name}: cgroups not removed: {', '.join(map(str, left[:3]))}")
        time.sleep(0.2)


def _pids(tree: Path) -> set[int]:
    pids: set[int] = set()
    for procs in tree.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in procs.read_text().split())
    return pids


def _bottom_up(tree: Path) -> list[Path]:
    if not tree.is_dir():
        return []
    inner = sorted((d for d in tree.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
    return [*inner, tree]


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
