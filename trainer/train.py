"""One training run: data onto the device, the network, DDP, the step loop, evaluation, outputs.

Rank 0 alone writes the run folder and prints progress. Every rank stops at the same step on
SIGTERM (they agree each step), rank 0 writes an emergency checkpoint, and the process exits so
whatever restarts it (torchrun, the StatefulSet) resumes from that checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer import checkpoint, data, distributed, handoff, plots, readiness, telemetry
from trainer.config import ConfigurationError, TrainConfig, code_hash
from trainer.contract import CURVES_FILE, TRAINED_ON
from trainer.errors import RunFailed
from trainer.loader import PAD, Shard, TrainLoader, few_steps_warning, normalise, to_device, translate
from trainer.metrics import RunFolder, progress_line
from trainer.model import RECIPES, build, param_groups

SIGTERM_EXIT = 128 + signal.SIGTERM
STATUS_EVERY_SECONDS = 15.0
WHITENING_IMAGES = 5000
# The cross-entropy of a uniform guess over the classes (ln 10): what an untrained net scores,
# with or without label smoothing. An epoch whose mean train loss is DIVERGENCE_FACTOR times that
# has diverged (docs/trainer.md, "Divergence").
CHANCE_LOSS = math.log(len(data.CLASSES))
DIVERGENCE_FACTOR = 10
DIVERGED_LOSS = DIVERGENCE_FACTOR * CHANCE_LOSS
# A device's name as ranks exchange it, printable ASCII: "NVIDIA H100 80GB HBM3", "cpu (x86_64, 4 threads)".
DEVICE_NAME = re.compile(r"[ -~]{1,255}")
# What the trainer reads back from a resumed run's metrics history (status, summary, curves).
HISTORY_KEYS = ("epoch", "step", "train_loss", "train_acc", "test_loss", "test_acc", "images_per_second")


@dataclass(frozen=True)
class Placement:
    """Where a run trains and what it does around the numbers (none of it changes the results)."""

    run_dir: Path
    backend: str
    timeout: int
    checkpoint_keep: int
    target_accuracy: float
    on_complete: str  # exit, wait, or release (wait after rank 0 has scaled its StatefulSet to zero)
    ready_file: Path | None = None  # the readiness signal, given once this rank has trained a step
    fresh: bool = False  # start again at epoch 1 (only in the first torchrun round)
    metrics_port: int | None = None  # where this rank serves its live figures (trainer.telemetry)


class Stopped(Exception):
    """SIGTERM arrived; the emergency checkpoint is written."""


class Diverged(RunFailed):
    """The loss stopped being a number, or grew far past a uniform guess's; the run is marked failed."""


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


class Lookahead:
    """airbench's lookahead: every few steps the weights move to an average that trails them."""

    every = 5

    def __init__(self, net: nn.Module) -> None:
        self.fast = [p for p in net.parameters() if p.requires_grad]
        self.slow = [p.detach().clone() for p in self.fast]

    @torch.no_grad()
    def after_step(self, step: int, total: int) -> None:
        if step == total:
            decay = 1.0  # the last step hands the averaged weights to the net
        elif step % self.every == 0:
            decay = 0.95**self.every * (step / total) ** 3
        else:
            return
        for slow, fast in zip(self.slow, self.fast, strict=True):
            slow.lerp_(fast, 1 - decay)
            fast.copy_(slow)


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
    train_seconds: float = 0.0
    seconds_to_target: float | None = None
    epochs_to_target: int | None = None


def schedule(progress: float, shape: tuple[float, float, float]) -> float:
    """Piecewise-linear learning-rate multiplier: `start` -> 1 at `peak` -> `end` at progress 1."""
    start, peak, end = shape
    if progress < peak:
        return start + (1 - start) * progress / peak
    return 1 + (end - 1) * (progress - peak) / (1 - peak)


class Run:
    def __init__(
        self,
        config: TrainConfig,
        where: Placement,
        place: distributed.Topology,
        splits: tuple[data.Split, data.Split],
    ) -> None:
        self.config = config
        self.where = where
        self.folder = RunFolder(where.run_dir)
        self.place = place
        self.devices: list[str] = []
        self.device = distributed.device_for(self.place, where.backend)
        self.recipe = RECIPES[config.model]
        self.is_rank0 = self.place.rank == 0
        train_split, test_split = splits
        local = config.batch_size // self.place.world_size
        if local % config.accumulate:
            raise ConfigurationError(
                f"each rank's batch of {local} must split into {config.accumulate} equal parts"
            )
        torch.manual_seed(config.seed)
        self.loader = TrainLoader(
            train_split,
            self.device,
            config.batch_size,
            Shard(self.place.rank, self.place.world_size),
            config.seed,
            config.cutout,
        )
        test_images, test_labels = to_device(test_split, self.device)
        self.test = (
            test_images[self.place.rank :: self.place.world_size],
            test_labels[self.place.rank :: self.place.world_size],
        )
        whitening = normalise(torch.from_numpy(train_split.images[:WHITENING_IMAGES]))
        self.net = build(config.model, config.width, whitening).to(self.device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        if self.device.type == "cuda":
            self.net = self.net.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(
            param_groups(self.net, self.recipe, config.lr, config.weight_decay),
            lr=config.lr,
            momentum=config.momentum,
            nesterov=True,
        )
        self.lookahead = Lookahead(self.net) if self.recipe.lookahead else None
        self.progress = Progress()
        self.total_steps = config.epochs * self.loader.steps_per_epoch
        self.model = self.net  # replaced by the DDP wrapper once the state is final
        self.ready = False
        self.metrics = telemetry.RankMetrics(where.run_dir.name, config.model, self.place.rank)
        self.metrics.serve(where.metrics_port, os.environ)

    # -- state ---------------------------------------------------------------------------------

    def state(self, emergency: bool) -> dict[str, Any]:
        p = self.progress
        return {
            "config_hash": self.config.hash(),
            "hyperparameters": self.config.hyperparameters(),
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lookahead": self.lookahead.slow if self.lookahead else None,
            "progress": {**p.__dict__, "sums": list(p.sums), "history": list(p.history)},
            "rng": torch.get_rng_state(),
            "world_size": self.place.world_size,
            "emergency": emergency,
        }

    def layout(self) -> checkpoint.Layout:
        """What a checkpoint must hold to resume this run."""
        return checkpoint.Layout(
            template=self.state(emergency=False),
            parameters=tuple(p for group in self.optimizer.param_groups for p in group["params"]),
            epochs=self.config.epochs,
            steps_per_epoch=self.loader.steps_per_epoch,
            line_keys=HISTORY_KEYS,
        )

    def check(self, start: Start) -> None:
        """Refuse the checkpoint rank 0 chose if its content does not fit this run."""
        if start.path is not None and start.state is not None:
            checkpoint.check(start.path, start.state, self.layout())

    def resume(self, start: Start) -> None:
        """Continue from the checkpoint rank 0 chose, loaded and checked (the others load and check
        it now); a restart."""
        # Its file name only: each rank reads its own run folder, wherever a peer would point.
        name = distributed.share_text(
            start.path.name if start.path else None, checkpoint.PATTERN, "a checkpoint's file name"
        )
        if name is None:
            return
        chosen = self.folder.checkpoints / name
        if start.state is None:
            start = Start(chosen, checkpoint.load(chosen, self.config.hash(), self.device))
            self.check(start)
        state = start.state
        assert state is not None
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lookahead:
            for slow, saved in zip(self.lookahead.slow, state["lookahead"], strict=True):
                slow.copy_(saved)
        torch.set_rng_state(state["rng"].cpu())
        self.progress = Progress(**state["progress"])
        self.progress.restarts += 1
        if not self.is_rank0:
            self.progress.sums = [0.0, 0.0, 0.0]
        else:
            self.folder.rewrite_metrics(self.progress.history)
            print(
                f"resumed from {chosen} at epoch {self.progress.epoch + 1}, step {self.progress.step}"
                f" (restart {self.progress.restarts})",
                flush=True,
            )

    def save(self, emergency: bool = False) -> None:
        self.metrics.checkpointed()
        if self.is_rank0:
            checkpoint.save(
                self.folder.checkpoints, self.progress.step, self.state(emergency), self.where.checkpoint_keep
            )

    # -- training ------------------------------------------------------------------------------

    def fit(self, stop: StopSignal, start: Start) -> dict[str, Any]:
        self.resume(start)
        stop.arm()
        self.model = distributed.wrap(self.net, self.device, self.config.compression)
        self.devices = distributed.gather_text(_device_name(self.device), DEVICE_NAME, "a device name")
        self.report_status("running")
        p = self.progress
        self.metrics.started(p.step, p.epoch, p.restarts, self.total_steps, self.config.epochs)
        for epoch in range(self.progress.epoch, self.config.epochs):
            self.train_epoch(epoch, stop)
        began = time.monotonic()
        final_loss, final_acc = self.evaluate(self.config.tta)
        _finite("the final evaluation", self.config.lr, self.place.rank, test=final_loss)
        self.progress.train_seconds += time.monotonic() - began
        return self.finish(final_loss, final_acc)

    def train_epoch(self, epoch: int, stop: StopSignal) -> None:
        p = self.progress
        begun, begun_step, last_status = time.monotonic(), p.step_in_epoch, time.monotonic()
        sums = torch.tensor(p.sums, dtype=torch.float64, device=self.device)
        for images, labels in self.loader.batches(epoch, p.step_in_epoch):
            if self.metrics.timed_wait(distributed.any_rank, stop.requested):
                # The checkpoint holds the epoch's totals over all ranks; rank 0 resumes with them.
                p.sums = distributed.sum_all(sums.tolist())
                p.train_seconds += time.monotonic() - begun
                self.save(emergency=True)
                raise Stopped
            self.set_learning_rates(epoch)
            sums += self.train_step(images, labels)
            if self.where.ready_file and not self.ready:
                readiness.mark(self.where.ready_file, self.place.rank)
                self.ready = True
            p.step += 1
            p.step_in_epoch += 1
            self.metrics.stepped(p.step)
            if self.lookahead:
                self.lookahead.after_step(p.step, self.total_steps)
            if self.is_rank0 and time.monotonic() - last_status > STATUS_EVERY_SECONDS:
                last_status = time.monotonic()
                self.report_status("running", eta_seconds=self.eta(begun, begun_step))
        loss_sum, correct, seen = distributed.sum_all(sums.tolist())
        test_loss, test_acc = self.evaluate(tta=0)
        train_loss, where = loss_sum / seen, f"epoch {epoch + 1} (step {p.step})"
        # Before the checkpoint: the last one on disk is always of an epoch that had not diverged.
        _finite(where, self.config.lr, self.place.rank, train=train_loss, test=test_loss)
        _below_divergence(where, self.config.lr, self.place.rank, train_loss)
        seconds = time.monotonic() - begun
        p.train_seconds += seconds
        line = {
            "epoch": epoch + 1,
            "step": p.step,
            "train_loss": train_loss,
            "train_acc": correct / seen,
            "test_loss": test_loss,
            "test_acc": test_acc,
            "lr": self.optimizer.param_groups[0]["lr"],
            "epoch_seconds": seconds,
            "images_per_second": (p.step_in_epoch - begun_step) * self.config.batch_size / seconds,
            "restarts": p.restarts,
            TRAINED_ON: self.config.trained_on,
        }
        if p.seconds_to_target is None and test_acc >= self.where.target_accuracy:
            p.seconds_to_target, p.epochs_to_target = p.train_seconds, epoch + 1
        p.history.append(line)
        p.epoch, p.step_in_epoch, p.sums = epoch + 1, 0, [0.0, 0.0, 0.0]
        # Checkpoint before the metrics line: a line on disk always has its checkpoint.
        self.save()
        if self.is_rank0:
            self.folder.append_metrics(line)
            eta = (self.config.epochs - p.epoch) * seconds
            self.report_status("running", eta_seconds=eta, **_latest(line))
            print(progress_line(line, self.config.epochs, eta), flush=True)
        self.metrics.epoch_done(line)

    def set_learning_rates(self, epoch: int) -> None:
        multiplier = schedule(self.progress.step / self.total_steps, self.recipe.schedule)
        for group in self.optimizer.param_groups:
            frozen = group["name"] == "whiten_bias" and epoch >= self.recipe.whiten_bias_epochs
            group["lr"] = 0.0 if frozen else group["base_lr"] * multiplier

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step over this rank's share of the global batch; returns loss, correct, seen."""
        parts = self.config.accumulate
        # The loss is the mean over the global batch: DDP averages gradients over ranks.
        scale = self.place.world_size / self.config.batch_size
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        for index, (x, y) in enumerate(zip(images.chunk(parts), labels.chunk(parts), strict=True)):
            syncing = index == parts - 1 or self.model is self.net
            context = contextlib.nullcontext() if syncing else self.model.no_sync()
            with context, self.autocast():
                logits = self.model(self.prepare(x)).float()
                losses = F.cross_entropy(
                    logits, y, label_smoothing=self.config.label_smoothing, reduction="none"
                )
                (losses.sum() * scale).backward()
            sums += torch.stack(
                [
                    losses.sum().double(),
                    (logits.argmax(1) == y).sum().double(),
                    torch.tensor(len(y), dtype=torch.float64, device=self.device),
                ]
            ).detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        x = normalise(images, self.dtype)
        return x.contiguous(memory_format=torch.channels_last) if self.device.type == "cuda" else x

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def evaluate(self, tta: int) -> tuple[float, float]:
        """Test loss and accuracy over every rank's shard of the test set, with `tta` augmentation."""
        distributed.broadcast_buffers(self.net)
        self.net.eval()
        images, labels = self.test
        loss, correct = 0.0, 0.0
        for x, y in zip(images.split(1000), labels.split(1000), strict=True):
            with self.autocast():
                logits = self.tta_logits(self.prepare(x), tta).float()
            loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
        self.net.train()
        loss, correct, seen = distributed.sum_all([loss, correct, float(len(labels))])
        return loss / seen, correct / seen

    def tta_logits(self, x: torch.Tensor, level: int) -> torch.Tensor:
        """Level 0: the image; 1: averaged with its mirror; 2: also with one-pixel shifts of both."""

        def mirrored(batch: torch.Tensor) -> torch.Tensor:
            return self.net(batch) if level == 0 else 0.5 * (self.net(batch) + self.net(batch.flip(3)))

        logits = mirrored(x)
        if level < 2:
            return logits
        shifts = [torch.full((len(x), 2), PAD + d, device=x.device) for d in (-1, 1)]
        return 0.5 * logits + 0.25 * sum(mirrored(translate(x, s)) for s in shifts)

    def eta(self, begun: float, begun_step: int) -> float:
        done = self.progress.step_in_epoch - begun_step
        remaining = self.total_steps - self.progress.step
        return remaining * (time.monotonic() - begun) / max(done, 1)

    # -- outputs -------------------------------------------------------------------------------

    def report_status(self, state: str, **fields: Any) -> None:
        if not self.is_rank0:
            return
        p = self.progress
        last = _latest(p.history[-1]) if p.history else {}
        self.folder.write_status(
            state,
            **{
                **last,
                "epoch": p.epoch,
                "epochs": self.config.epochs,
                "step": p.step,
                "world_size": self.place.world_size,
                "rank_count": len(self.devices),
                "restarts": p.restarts,
                "config_hash": self.config.hash(),
                TRAINED_ON: self.config.trained_on,
                **fields,
            },
        )

    def finish(self, final_loss: float, final_acc: float) -> dict[str, Any]:
        p = self.progress
        accuracies = [line["test_acc"] for line in p.history] + [final_acc]
        if p.seconds_to_target is None and final_acc >= self.where.target_accuracy:
            p.seconds_to_target, p.epochs_to_target = p.train_seconds, self.config.epochs
        summary = {
            TRAINED_ON: self.config.trained_on,
            "final_test_acc": final_acc,
            "final_test_loss": final_loss,
            "best_test_acc": max(accuracies),
            "epochs": self.config.epochs,
            "steps": p.step,
            "world_size": self.place.world_size,
            "backend": self.where.backend,
            "devices": self.devices,
            "wall_seconds": p.train_seconds,
            "target_accuracy": self.where.target_accuracy,
            "seconds_to_target": p.seconds_to_target,
            "epochs_to_target": p.epochs_to_target,
            "hyperparameters": self.config.hyperparameters(),
            "config_hash": self.config.hash(),
            "code_hash": code_hash(),
            "torch_version": torch.__version__,
            "restarts": p.restarts,
        }
        if self.is_rank0:
            self.folder.write_summary(summary)
            labels = plots.RunLabels(
                self.folder.path.name,
                self.config.model,
                self.place.world_size,
                self.where.target_accuracy,
                self.config.label_smoothing,
                self.config.trained_on,
            )
            plots.curves(p.history, self.folder.path / CURVES_FILE, labels)
            self.report_status("complete", best_test_acc=summary["best_test_acc"], final_test_acc=final_acc)
            print(
                f"done: test accuracy {100 * final_acc:.2f}% (best {100 * summary['best_test_acc']:.2f}%)"
                f" on {self.config.trained_on},"
                f" loss {final_loss:.4f}, {p.train_seconds:.1f} s on {self.place.world_size} rank(s)",
                flush=True,
            )
        return summary


def _finite(where: str, lr: float, rank: int, **losses: float) -> None:
    """Raise on every rank alike when a loss (summed over the ranks) is not a number."""
    if not all(math.isfinite(value) for value in losses.values()):
        _diverged(where, ", ".join(f"{name} loss {value}" for name, value in losses.items()), lr, rank)


def _below_divergence(where: str, lr: float, rank: int, train_loss: float) -> None:
    """Raise on every rank alike when an epoch's mean train loss (the same sum on every rank) is
    DIVERGENCE_FACTOR times a uniform guess's or more."""
    if train_loss >= DIVERGED_LOSS:
        reason = (
            f"train loss {train_loss:.4g} is at least {DIVERGED_LOSS:.1f}, {DIVERGENCE_FACTOR} times a"
            f" uniform guess's (ln {len(data.CLASSES)})"
        )
        _diverged(where, reason, lr, rank)


def _diverged(where: str, reason: str, lr: float, rank: int) -> None:
    error = Diverged(
        f"training diverged in {where}: {reason}; lower --lr (it is {lr:g}) or check the data, then"
        " start again with --fresh (the checkpoints hold only the epochs before)"
    )
    error.echo = rank != 0
    raise error


def _latest(line: dict[str, Any]) -> dict[str, Any]:
    return {k: line[k] for k in ("test_acc", "train_loss", "images_per_second")}


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def release_gpus(where: Placement, place: distributed.Topology) -> None:
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


def _fresh(where: Placement) -> bool:
    # A round torchrun starts after a failure must resume what the first round wrote, not wipe it.
    return where.fresh and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def main(
    config: TrainConfig,
    where: Placement,
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
            summary = _train(run or Run(config, where, place, splits), stop, start)
            if summary is None:
                return SIGTERM_EXIT
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
    valid = isinstance(best, int | float) and not isinstance(best, bool) and math.isfinite(best)
    return float(best) if valid else None


def _train(run: Run, stop: StopSignal, start: Start) -> dict[str, Any] | None:
    """The run's summary, or None when SIGTERM stopped it; a failure is recorded in its status."""
    done = None
    try:
        done = run.fit(stop, start)
    except Stopped:
        print(f"SIGTERM: emergency checkpoint written at step {run.progress.step}; exiting", flush=True)
    except BaseException as err:
        # The status must not hide the error: a folder that failed before fails this write too.
        with contextlib.suppress(OSError):
            run.report_status("failed", error=f"{type(err).__name__}: {err}")
        raise
    finally:
        distributed.leave(finished=done is not None)
        if run.where.ready_file and done is None:
            readiness.clear(run.where.ready_file)
    return done
