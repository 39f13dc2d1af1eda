"""The base of every error whose message is complete for a person: printed without a traceback."""

from __future__ import annotations

import json
import os
import sys
import time

# torchrun tells each worker where to leave its failure (the agent's summary shows it as the
# rank's root cause): torch/distributed/elastic/multiprocessing/errors/__init__.py in
# pytorch/pytorch, whose ProcessFailure reads {"message": str, "timestamp": int}.
ELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"


class TrainerError(Exception):
    """Bad input (flags, environment, dataset, sweep file, checkpoint) named with its fix."""

    exit_code = 2


class RunFailed(TrainerError):
    """The input was good but the run could not go on (it diverged); the message says why."""

    exit_code = 1


def report(err: TrainerError) -> int:
    """Print `err` as one line, leave it where torchrun looks for a worker's failure, return the exit code."""
    line = f"error: {err}"
    print(line, file=sys.stderr, flush=True)
    path = os.environ.get(ELASTIC_ERROR_FILE)
    if path:
        # Without this file the agent's summary says only "To enable traceback see: <url>".
        with open(path, "w") as handle:
            json.dump({"message": line, "timestamp": int(time.time())}, handle)
    return err.exit_code
