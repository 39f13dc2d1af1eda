"""A training pod's life around one run: rank 0 checks the run folder before the rendezvous, the
ranks join, train (or find the run complete), then exit, wait for SIGTERM, or hand their GPUs back.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
from typing import Any

import torch

from trainer import data, distributed
from trainer.config import TrainConfig
from trainer.loader import few_steps_warning
from trainer.pod import handoff, readiness
from trainer.pod.run_state import RunOptions, Start, Stopped, StopSignal
from trainer.records import checkpoint
from trainer.records.metrics import RunFolder
from trainer.train import Run

SIGTERM_EXIT = 128 + signal.SIGTERM


def release_gpus(where: RunOptions, place: distributed.Topology) -> None:
    """Rank 0 scales the run's StatefulSet to zero; a refusal leaves the pods waiting, GPUs held."""
    if where.on_complete != "release" or place.rank != 0:
        return
    try:
        print(handoff.release(), flush=True)
    except handoff.HandOffError as err:
        print(f"warning: {err}; the ranks keep their GPUs until the StatefulSet is scaled down", flush=True)


def complete_and_wait(folder: RunFolder, best: float, stop: StopSignal) -> int:
    """Say the run is complete and sleep until SIGTERM, so a pod neither exits nor crash-loops."""
    stop.arm()
    print(
        f"run {folder.path} is complete (best test accuracy {100 * best:.2f}%); waiting for SIGTERM",
        flush=True,
    )
    stop.wait()
    return 0


def prepare(folder: RunFolder, config: TrainConfig, fresh: bool) -> Start:
    """Rank 0, before the rendezvous: a writable folder and the checkpoint to resume, loaded.

    A refusal here is one line from one rank while the others still wait at the rendezvous
    (torchrun then stops them), never a failed collective on every rank.
    """
    folder.prepare(fresh)
    chosen = checkpoint.latest_verified(folder.checkpoints)
    if chosen is None:
        if checkpoint.written(folder.checkpoints) or folder.has_metrics():
            raise checkpoint.CheckpointError(
                f"{folder.path} holds epochs of an earlier start but no checkpoint that verifies, so"
                " it cannot resume; start it again from epoch 1 with --fresh (which replaces its"
                " checkpoints and metrics), or use another --run-name"
            )
        return Start()
    return Start(chosen, checkpoint.load(chosen, config.hash(), torch.device("cpu")))


def _fresh(where: RunOptions) -> bool:
    # A round torchrun starts after a failure must resume what the first round wrote, not wipe it.
    return where.fresh and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def main(
    config: TrainConfig,
    where: RunOptions,
    place: distributed.Topology,
    splits: tuple[data.Split, data.Split],
    stop: StopSignal,
) -> int:
    """Train (or find the run already complete), then exit or wait as `where.on_complete` says."""
    folder = RunFolder(where.run_dir)
    fresh = _fresh(where)
    waits = where.on_complete != "exit"
    # Checked before joining: the other ranks of a finished job are asleep, not at the rendezvous.
    best = _best(folder.completed(config.hash())) if waits and not fresh else None
    if best is None:
        # Rank 0 alone reads the folder (on several machines only its own has one) and refuses bad
        # state before the rendezvous; the others learn whether it found the run complete.
        start, run = Start(), None
        if place.rank == 0:
            best = None if fresh else _best(folder.completed(config.hash()))
            if best is None:
                start = prepare(folder, config, fresh)
                if warning := few_steps_warning(config.train_images, config.batch_size):
                    print(f"warning: {warning}", file=sys.stderr, flush=True)
                # Built before the rendezvous, so that a checkpoint that does not fit the run is
                # refused while the other ranks still wait there.
                run = Run(config, where, place, splits)
                run.check(start)
        distributed.join(place, where.backend, where.timeout)
        best = distributed.share_number(best)
        if best is None:
            run = run or Run(config, where, place, splits)
            summary = _train(run, stop, start)
            if summary is None:
                return SIGTERM_EXIT
            run.metrics.linger(where.metrics_linger)
            best = summary["best_test_acc"]
        else:
            distributed.leave(finished=True)
            if place.rank == 0 and not waits:
                print(
                    f"run {folder.path} is already complete (best test accuracy {100 * best:.2f}%);"
                    " nothing to do (--fresh trains it again)",
                    flush=True,
                )
    if waits:
        if where.ready_file:
            readiness.mark(where.ready_file, place.rank)
        release_gpus(where, place)
        return complete_and_wait(folder, best, stop)
    return 0


def _best(summary: dict[str, Any] | None) -> float | None:
    """A completed run's best test accuracy; None when there is no such run (or its figure is not a
    number, so the run finishes again from its checkpoint)."""
    best = summary.get("best_test_acc") if summary else None
    if isinstance(best, int | float) and not isinstance(best, bool) and math.isfinite(best):
        return float(best)
    return None


def _train(run: Run, stop: StopSignal, start: Start) -> dict[str, Any] | None:
    """The run's summary, or None when SIGTERM stopped it; a failure is recorded in its status."""
    done = None
    try:
        done = run.fit(stop, start)
    except Stopped:
        print(f"SIGTERM: emergency checkpoint written at step {run.progress.step}; exiting", flush=True)
    except BaseException as err:
        _record_failure(run, err)
        raise
    finally:
        distributed.leave(finished=done is not None)
        if run.where.ready_file and done is None:
            readiness.clear(run.where.ready_file)
    if done is not None:
        # Only once the group is left: the peers wait at the final barrier no longer than the
        # collective timeout, and rank 0's first plot can take longer (matplotlib builds its font
        # cache on a new machine).
        try:
            run.publish(done)
        except BaseException as err:
            _record_failure(run, err)
            raise
    return done


def _record_failure(run: Run, err: BaseException) -> None:
    # The status must not hide the error: a folder that failed before fails this write too.
    with contextlib.suppress(OSError):
        run.report_status("failed", error=f"{type(err).__name__}: {err}")
