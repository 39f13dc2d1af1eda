"""The readiness signal: a file a rank writes once it has joined the process group and trained a step.

A pod's readiness probe (`python -m trainer probe --ready FILE`) passes while that file names a
live process. A rank whose worker crashed, or that torchrun is restarting, is not Ready until the
new worker has joined its peers and stepped again; a finished rank that waits for its pod's end
stays Ready.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trainer.records import atomic, runfolders

# The fix for a signal that is not one: the rank that trains writes it again each step.
REWRITTEN = "delete it, and the rank that trains writes it anew"


def mark(path: Path, rank: int) -> None:
    """Say "this process has joined the group and trains"."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, {"pid": os.getpid(), "rank": rank, "since": time.time()})


def clear(path: Path) -> None:
    """Take the signal back when the process that gave it leaves."""
    try:
        if _signal(path).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError, runfolders.Unfit):
        pass


def check(path: Path) -> str | None:
    """None when the signal stands, else why not (one line)."""
    try:
        signal = _signal(path)
        pid = int(signal["pid"])
    except FileNotFoundError:
        return f"{path}: no rank has joined the process group and trained a step yet"
    except runfolders.Unfit as err:
        return f"{err}; {REWRITTEN}"
    except (ValueError, KeyError, TypeError, RecursionError):
        return f"{path}: is not a rank's signal (a JSON object in UTF-8 with its pid); {REWRITTEN}"
    except OSError as err:
        return f"{path}: unreadable signal ({str(err)[:200]})"
    try:
        os.kill(pid, 0)  # the probe runs in the container's own PID namespace
    except ProcessLookupError:
        return f"{path}: the rank that gave the signal (pid {pid}) has exited"
    except PermissionError:
        pass  # alive, under another uid
    return None


def _signal(path: Path) -> Any:
    # The signal lies on a volume other processes write: read as a run's files are.
    return json.loads(runfolders.read_named(str(path), runfolders.MAX_JSON_BYTES).decode("utf-8"))
