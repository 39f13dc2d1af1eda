"""Finding and ending the processes a testbed command started, including those in new sessions."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc: each process names its parent)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, whatever session or group it moved to."""
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and everything below it, leaves first so nothing is re-parented and missed."""
    for child in [*reversed(descendants(pid)), pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
