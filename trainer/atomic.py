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


def to_json(content: Any, indent: int | None = None) -> str:
    """Strict JSON: NaN or infinity raise instead of writing tokens that JSON parsers refuse."""
    return json.dumps(content, indent=indent, sort_keys=True, allow_nan=False)


def write_json(path: Path, content: Any) -> None:
    write_bytes(path, (to_json(content, indent=2) + "\n").encode())
