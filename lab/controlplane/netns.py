"""The control plane's private network namespace: loopback only, so nothing it runs can send a
packet off the machine, and its ports are free whatever the host listens on."""

from __future__ import annotations

import contextlib
import os
import signal

from lab.controlplane.layout import Layout
from lab.testbed.commands import run
from lab.testbed.network import namespace_pids
from lab.testbed.processes import kill_tree


def create(layout: Layout) -> None:
    run(["ip", "netns", "add", layout.netns])
    run(["ip", "-n", layout.netns, "link", "set", "lo", "up"])


def inside(layout: Layout) -> list[str]:
    """The prefix that runs a command inside the namespace."""
    return ["ip", "netns", "exec", layout.netns]


def remove(layout: Layout) -> None:
    """Kill whatever still runs in the namespace, then delete it (and its /run/netns mount)."""
    if not layout.netns_path.exists():
        return
    for pid in namespace_pids(layout.netns):
        kill_tree(pid)
    for pid in namespace_pids(layout.netns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    run(["ip", "netns", "delete", layout.netns])
