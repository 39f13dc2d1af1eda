"""Crash-safe file writes: a reader sees the old content or the new, never a partial file."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, fsync and rename, then fsync the folder."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        # A full disk leaves the old file, never a half-written temporary one; the error names
        # the file (a failed write alone names none).
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # The rename is durable only once the directory entry is on disk too.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def append_line(path: Path, line: str) -> None:
    """Append `line` to `path` whole or not at all: a failed write is cut back off, so a full disk
    never leaves half a line for the next one to follow."""
    data = line.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise OSError(err.errno, err.strerror, str(path)) from None
    finally:
        os.close(fd)


def to_json(content: Any, indent: int | None = None) -> str:
    """Strict JSON: NaN or infinity raise instead of writing tokens that JSON parsers refuse."""
    return json.dumps(content, indent=indent, sort_keys=True, allow_nan=False)


def write_json(path: Path, content: Any) -> None:
    write_bytes(path, (to_json(content, indent=2) + "\n").encode())
