"""The base of every error whose message is complete for a person: printed without a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

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
