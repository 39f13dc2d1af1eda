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


def _record(machine: Machine) -> Path:
    """Where `create` notes the cgroups it made, beside the machine's tree: `down` may run in a
    process whose own cgroups (and so `machine_paths`) differ from those of the one that booted."""
    return machine.root.with_name(f"{machine.root.name}.cgroups")


def _made_here(machine: Machine) -> list[Path]:
    """The machine's cgroups as this process makes them: one below its own in every hierarchy."""
    return [path / machine.netns for path in _own_paths()]


def machine_paths(machine: Machine) -> list[Path]:
    """The machine's cgroups, as this process would make them and as `create` recorded them."""
    own = _made_here(machine)
    try:
        recorded = [Path(line) for line in _record(machine).read_text().splitlines() if line]
    except FileNotFoundError:
        recorded = []
    return list(dict.fromkeys(own + recorded))


def create(machine: Machine) -> list[Path]:
    """Make the machine's cgroups (a stale tree of an earlier machine is removed first)."""
    remove(machine)
    made = _made_here(machine)
    record = _record(machine)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("".join(f"{path}\n" for path in made))
    for path in made:
        path.mkdir()
        for name in CPUSET_INHERITED:
            if (path / name).exists():
                (path / name).write_text((path.parent / name).read_text())
    return made


# A shell that writes its own pid into each cgroup of $1 (colon-separated), then becomes the
# command: Python's preexec_fn would do the same in the child, but is unsafe in a process with
# threads (the subprocess documentation: it may deadlock).
_JOIN_THEN_EXEC = 'IFS=:; for p in $1; do echo $$ > "$p/cgroup.procs" || exit 1; done; shift; exec "$@"'


def joined(paths: list[Path], argv: list[str]) -> list[str]:
    """`argv` run inside the cgroups `paths` from its first instruction on."""
    return ["sh", "-c", _JOIN_THEN_EXEC, "sh", ":".join(map(str, paths)), *argv]


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
            _record(machine).unlink(missing_ok=True)
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
