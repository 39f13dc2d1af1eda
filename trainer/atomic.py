"""Crash-safe file writes: a reader sees the old content or the new, never a partial file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, fsync and rename, then fsync the folder."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    # The rename is durable only once the directory entry is on disk too.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_json(path: Path, content: Any) -> None:
    write_bytes(path, (json.dumps(content, indent=2, sort_keys=True) + "\n").encode())
