"""What a run carries besides its numbers: its options, where it starts, its progress, and the
signal that stops it between two steps. `trainer.train` runs with them, `trainer.pod.lifecycle` and
the command line make them.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    """Where a run trains and what it does around the numbers (none of it changes the results)."""

    run_dir: Path
    backend: str
    timeout: int
    checkpoint_keep: int
    target_accuracy: float
    on_complete: str  # exit, wait, or release (wait after rank 0 has scaled its StatefulSet to zero)
    ready_file: Path | None = None  # the readiness signal, given once this rank has trained a step
    fresh: bool = False  # start again at epoch 1 (only in the first torchrun round)
    epoch_eval: bool = True  # evaluate after every epoch (off: only the final evaluation)
    compile: bool = False  # run the net through torch.compile
    metrics_port: int | None = None  # where this rank serves its live figures (trainer.pod.telemetry)
    metrics_linger: int = 0  # seconds a finished rank may wait for its final scrapes (trainer.pod.telemetry)


class Stopped(Exception):
    """SIGTERM arrived; the emergency checkpoint is written."""


class StopSignal:
    """Remembers a SIGTERM so the step loop can stop between steps, never inside one.

    Until `arm` a SIGTERM ends the process at once: before training (loading data, waiting at
    the rendezvous) there is nothing to save, and torchrun stops the peers of a failed rank so.
    """

    def __init__(self) -> None:
        self.event = threading.Event()

    def arm(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.event.set())

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def wait(self) -> None:
        while not self.event.wait(1.0):
            pass


@dataclass(frozen=True)
class Start:
    """Where rank 0 found the run before the rendezvous: the checkpoint to resume and its state."""

    path: Path | None = None
    state: dict[str, Any] | None = None


@dataclass
class Progress:
    """Everything besides weights that a resumed run needs to continue exactly where it stopped."""

    epoch: int = 0  # the epoch in progress (== epochs when training is done)
    step_in_epoch: int = 0
    step: int = 0
    sums: list[float] = field(
        default_factory=lambda: [0.0, 0.0, 0.0]
    )  # loss, correct, seen: this rank's, or all ranks' in a checkpoint
    history: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    train_seconds: float = 0.0  # the step loops' alone
    eval_seconds: float = 0.0  # per-epoch evaluations and the final one
    whiten_seconds: float = 0.0  # fitting the whitening stem on the device, before the first step
    seconds_to_target: float | None = None
    epochs_to_target: int | None = None
