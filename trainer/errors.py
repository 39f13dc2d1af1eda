"""The base of every error whose message is complete for a person: printed without a traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from pathlib import Path

# torchrun tells each worker where to leave its failure; the agent's summary shows the file's
# "py_callstack" as the rank's root cause. The layout is the one torch's own ErrorHandler writes
# (torch/distributed/elastic/multiprocessing/errors/error_handler.py, record_exception, in
# pytorch/pytorch); its plain-string form makes the agent log two warnings.
ELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"


class TrainerError(Exception):
    """Bad input (flags, environment, dataset, sweep file, checkpoint) named with its fix."""

    exit_code = 2
    # Set where every rank raises the same error from numbers they share: rank 0 alone prints it.
    echo = False


class RunFailed(TrainerError):
    """The input was good but the run could not go on (it diverged); the message says why."""

    exit_code = 1


def report(err: TrainerError) -> int:
    """Print `err` as one line (unless rank 0 prints it), leave it where torchrun looks for a
    worker's failure, and return the exit code."""
    line = f"error: {err}"
    if not err.echo:
        print(line, file=sys.stderr, flush=True)
    path = os.environ.get(ELASTIC_ERROR_FILE)
    if path:
        # Without this file the agent's summary says only "To enable traceback see: <url>"; a file
        # that cannot be written costs that summary line, never the error itself.
        with contextlib.suppress(OSError), open(path, "w") as handle:
            extra = {"py_callstack": line, "timestamp": str(int(time.time()))}
            json.dump({"message": {"message": line, "extraInfo": extra}}, handle)
    return err.exit_code


class MachineError(TrainerError):
    """What the machine cannot do (a full or read-only disk, a file where a folder must be),
    named with its path and the fix."""


# What to do about the failures a machine, not the program, causes.
_MACHINE_FIXES = {
    errno.ENOSPC: "the disk is full; free space on it (`df -h` shows which) and run it again",
    errno.EDQUOT: "the disk quota is used up; free space or raise the quota, then run it again",
    errno.EROFS: "the file system is read-only; remount it read-write, or use a folder on another disk",
    errno.EACCES: "this user may not change it; fix its owner or mode, or use another folder",
    errno.EPERM: "this user may not change it; fix its owner or mode, or use another folder",
    errno.EISDIR: "a folder stands where a file must be; move the folder away",
    errno.EIO: "the disk reports an I/O error; check it (`dmesg`) before using it again",
    errno.EMFILE: "this process has too many files open; raise `ulimit -n`",
    errno.ENAMETOOLONG: "the path is too long; use a shorter one",
}


def _file_in_the_way(path: str) -> Path | None:
    """The first component of `path` that exists and is not a folder, when a later one follows."""
    target = Path(path)
    for part in [*reversed(target.parents), target][1:]:
        if part.exists() and not part.is_dir():
            return part if part != target else None
        if not part.exists():
            return None
    return None


def machine_problem(err: OSError) -> str:
    """One line for an OSError the machine caused: the path, what the system said and the fix."""
    where = str(err.filename) if err.filename is not None else "a file"
    said = err.strerror or str(err)
    if err.errno in (errno.ENOTDIR, errno.EEXIST) and err.filename is not None:
        blocking = _file_in_the_way(str(err.filename))
        target = Path(str(err.filename))
        if blocking is None and err.errno == errno.EEXIST and target.exists() and not target.is_dir():
            blocking = target
        if blocking is not None:
            return (
                f"{blocking} is a file where a folder must be ({said}); move it away or choose another folder"
            )
    if err.errno == errno.ENOENT:
        return f"{where}: {said}; create it, or point at one that exists"
    return f"{where}: {said}; {_MACHINE_FIXES.get(err.errno or 0, 'check the disk and the path')}"
