"""One training run: data onto the device, the network and DDP, the epochs, checkpoints, outputs.

The numbers (step, schedule, lookahead, evaluation) are `trainer.numerics`; the pod's life
around the run (rendezvous, completion, waiting, releasing GPUs) is `trainer.pod.lifecycle`.
Rank 0 alone writes the run folder and prints progress. Every rank stops at the same step on
SIGTERM (they agree every step, or every few on NCCL), rank 0 writes an emergency checkpoint,
and the process exits so whatever restarts it (torchrun, the StatefulSet) resumes from it.
"""

from __future__ import annotations

import os
import platform
import re
import time
from typing import Any

import torch

from trainer import data, distributed, precision
from trainer.batchnorm import globalise
from trainer.config import ConfigurationError, TrainConfig, code_hash
from trainer.contract import CURVES_FILE, TRAINED_ON
from trainer.hyperparameters import GLOBAL_BATCHNORM
from trainer.loader import Shard, TrainLoader, to_device
from trainer.model import RECIPES, build, fit_to_data, param_groups
from trainer.numerics import Numerics, check_below_divergence, check_finite
from trainer.pod import readiness, telemetry
from trainer.pod.run_state import Progress, RunOptions, Start, Stopped, StopSignal
from trainer.records import checkpoint, plots
from trainer.records.metrics import RunFolder, progress_line

STATUS_EVERY_SECONDS = 15.0
# A device's name as ranks exchange it, printable ASCII: "NVIDIA H100 80GB HBM3", "cpu (x86_64, 4 threads)".
DEVICE_NAME = re.compile(r"[ -~]{1,255}")
# What the trainer reads back from a resumed run's metrics history (status, summary, curves);
# the test figures only where every epoch is evaluated.
HISTORY_KEYS = ("epoch", "step", "train_loss", "train_acc", "images_per_second")
TEST_KEYS = ("test_loss", "test_acc")


class Run:
    def __init__(
        self,
        config: TrainConfig,
        where: RunOptions,
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
            self.recipe.translate,
        )
        test_images, test_labels = to_device(test_split, self.device)
        self.test = (
            test_images[self.place.rank :: self.place.world_size],
            test_labels[self.place.rank :: self.place.world_size],
        )
        # On the device before the run is timed, as airbench94's loader holds its images there.
        fitting = torch.from_numpy(train_split.images[: self.recipe.whiten_images])
        self.fitting_images = fitting.to(self.device)
        net = build(config.model, config.width)
        if config.batchnorm == GLOBAL_BATCHNORM:
            net = globalise(net)  # torch's BatchNorm2d while there is one rank
        self.precision = precision.for_device(self.device, config.batch_size)
        net = self.precision.apply(net).to(self.device, memory_format=torch.channels_last)
        if self.device.type == "cuda":
            # Shapes are static: cuDNN picks each convolution's fastest kernel once.
            torch.backends.cudnn.benchmark = True
        lr, weight_decay = self.precision.sgd(config.lr, config.weight_decay)
        optimizer = torch.optim.SGD(
            param_groups(net, self.recipe, lr, weight_decay),
            lr=lr,
            momentum=config.momentum,
            nesterov=True,
            fused=True,
        )
        self.numerics = Numerics(
            net, self.recipe, optimizer, self.device, self.precision, config.label_smoothing
        )
        self.net, self.optimizer, self.lookahead = net, optimizer, self.numerics.lookahead
        self.progress = Progress()
        self.total_steps = config.steps
        self.writer = checkpoint.Writer(self.folder.checkpoints, where.checkpoint_keep)
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
            steps=self.total_steps,
            line_keys=HISTORY_KEYS + (TEST_KEYS if self.where.epoch_eval else ()),
        )

    def check(self, start: Start) -> None:
        """Refuse the checkpoint rank 0 chose if its content does not fit this run."""
        if start.path is not None and start.state is not None:
            checkpoint.check(start.path, start.state, self.layout())

    def resume(self, start: Start) -> bool:
        """Continue from the checkpoint rank 0 chose, loaded and checked (the others load and check
        it now); a restart. False when there is none: the run starts fresh."""
        # Its file name only: each rank reads its own run folder, wherever a peer would point.
        name = distributed.share_text(
            start.path.name if start.path else None, checkpoint.PATTERN, "a checkpoint's file name"
        )
        if name is None:
            return False
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
        return True

    # -- training ------------------------------------------------------------------------------

    def fit(self, stop: StopSignal, start: Start) -> dict[str, Any]:
        if not self.resume(start):
            self.fit_to_data()
        stop.arm()
        model = distributed.wrap(self.net, self.device, self.config.compression, self.precision.dtype)
        self.numerics.model = torch.compile(model) if self.where.compile else model
        self.devices = distributed.gather_text(_device_name(self.device), DEVICE_NAME, "a device name")
        self.report_status("running")
        p = self.progress
        self.metrics.started(p.step, p.epoch, p.restarts, self.total_steps, self.config.epochs)
        try:
            for epoch in range(self.progress.epoch, self.config.epochs):
                self.train_epoch(epoch, stop)
        finally:
            self.writer.wait()
        began = time.monotonic()
        final_loss, final_acc = self.numerics.evaluate(self.test, self.config.tta, self.recipe.eval_batch)
        check_finite("the final evaluation", self.config.lr, self.place.rank, test=final_loss)
        final_seconds = time.monotonic() - began  # evaluate waits for the device (its sums)
        self.progress.eval_seconds += final_seconds
        return self.summarise(final_loss, final_acc, final_seconds)

    def fit_to_data(self) -> None:
        """A fresh run's whitening stem, fitted on the device and timed, as airbench94 times it:
        after the lookahead has copied the net (airbench's LookaheadState precedes its
        init_whitening_conv) and before DDP gives every rank rank 0's weights."""
        began = time.monotonic()
        fit_to_data(self.net, self.numerics.normalise(self.fitting_images))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.progress.whiten_seconds = time.monotonic() - began

    def epoch_steps(self, epoch: int) -> int:
        """Steps epoch `epoch` (from 0) trains: a whole epoch's, or fewer where the budget ends."""
        per_epoch = self.loader.steps_per_epoch
        return min(per_epoch, self.total_steps - epoch * per_epoch)

    def train_epoch(self, epoch: int, stop: StopSignal) -> None:
        """The step loop (nothing in it waits for the device), then the epoch's figures."""
        p = self.progress
        steps = self.epoch_steps(epoch)
        begun, begun_step, last_status = time.monotonic(), p.step_in_epoch, time.monotonic()
        # Agreeing on the stop flag is a collective: every few steps where it costs a device sync.
        stop_every = distributed.stop_check_steps()
        parts = self.config.accumulate
        scale = self.precision.loss_scale * self.place.world_size / self.config.batch_size
        sums = torch.tensor(p.sums[:2], dtype=torch.float64, device=self.device)
        seen = p.sums[2]
        for images, labels in self.loader.batches(epoch, p.step_in_epoch, steps):
            if p.step_in_epoch % stop_every == 0 and self.metrics.timed_wait(
                distributed.any_rank, stop.requested
            ):
                self.stop(sums, seen, begun)
            self.numerics.set_learning_rates(p.step, self.total_steps, epoch)
            self.numerics.step(images, labels, parts, scale, sums)
            seen += len(labels)
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
        loss_sum, correct, seen = distributed.sum_all([*sums.tolist(), seen])  # waits for the device
        seconds = time.monotonic() - begun
        p.train_seconds += seconds
        train_loss, where = loss_sum / seen, f"epoch {epoch + 1} (step {p.step})"
        line = {
            "epoch": epoch + 1,
            "step": p.step,
            "train_loss": train_loss,
            "train_acc": correct / seen,
            "lr": self.precision.recipe_lr(self.optimizer.param_groups[0]["lr"]),
            "epoch_seconds": seconds,
            "images_per_second": (p.step_in_epoch - begun_step) * self.config.batch_size / seconds,
            "restarts": p.restarts,
            TRAINED_ON: self.config.trained_on,
        }
        if steps < self.loader.steps_per_epoch:
            line["epoch_fraction"] = steps / self.loader.steps_per_epoch  # the budget ended partway
        if self.where.epoch_eval:
            began = time.monotonic()
            test_loss, test_acc = self.numerics.evaluate(self.test, 0, self.recipe.eval_batch)
            p.eval_seconds += time.monotonic() - began
            line |= {"test_loss": test_loss, "test_acc": test_acc}
            if p.seconds_to_target is None and test_acc >= self.where.target_accuracy:
                p.seconds_to_target, p.epochs_to_target = p.train_seconds, epoch + 1
        # Before the checkpoint: the last one on disk is always of an epoch that had not diverged.
        check_finite(where, self.config.lr, self.place.rank, train=train_loss, **_test_losses(line))
        check_below_divergence(where, self.config.lr, self.place.rank, train_loss)
        p.history.append(line)
        p.epoch, p.step_in_epoch, p.sums = epoch + 1, 0, [0.0, 0.0, 0.0]
        self.metrics.checkpointed()
        if self.is_rank0:
            # The metrics line follows its checkpoint onto the disk: a line always has one.
            self.writer.submit(p.step, self.state(emergency=False), lambda: self.folder.append_metrics(line))
            eta = (self.total_steps - p.step) * seconds / max(steps - begun_step, 1)
            self.report_status("running", eta_seconds=eta, **_latest(line))
            print(progress_line(line, self.config.epochs, eta), flush=True)
        self.metrics.epoch_done(line)

    def stop(self, sums: torch.Tensor, seen: float, begun: float) -> None:
        """SIGTERM: the emergency checkpoint, on disk before this returns, then Stopped."""
        p = self.progress
        # The checkpoint holds the epoch's totals over all ranks; rank 0 resumes with them.
        p.sums = distributed.sum_all([*sums.tolist(), seen])
        p.train_seconds += time.monotonic() - begun
        self.writer.wait()
        self.metrics.checkpointed()
        if self.is_rank0:
            checkpoint.save(
                self.folder.checkpoints, p.step, self.state(emergency=True), self.where.checkpoint_keep
            )
        raise Stopped

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
                **self.budget(),
                "world_size": self.place.world_size,
                "rank_count": len(self.devices),
                "restarts": p.restarts,
                "config_hash": self.config.hash(),
                TRAINED_ON: self.config.trained_on,
                **fields,
            },
        )

    def budget(self) -> dict[str, Any]:
        """The run's budget as status and summary state it: its steps, and the epochs they make,
        a fraction where the last epoch ends partway (airbench94's 476 steps: 9.92 of 48)."""
        per_epoch = self.loader.steps_per_epoch
        return {
            "steps_planned": self.total_steps,
            "steps_per_epoch": per_epoch,
            "epochs_planned": round(self.total_steps / per_epoch, 4),
        }

    def summarise(self, final_loss: float, final_acc: float, final_seconds: float) -> dict[str, Any]:
        """The run's figures, the same on every rank; `publish` writes them."""
        p = self.progress
        accuracies = [line["test_acc"] for line in p.history if "test_acc" in line] + [final_acc]
        if p.seconds_to_target is None and final_acc >= self.where.target_accuracy:
            p.seconds_to_target, p.epochs_to_target = p.train_seconds, self.config.epochs
        summary = {
            TRAINED_ON: self.config.trained_on,
            "final_test_acc": final_acc,
            "final_test_loss": final_loss,
            "best_test_acc": max(accuracies),
            "epochs": self.config.epochs,
            "steps": p.step,
            **self.budget(),
            "world_size": self.place.world_size,
            "backend": self.where.backend,
            "devices": self.devices,
            "wall_seconds": p.train_seconds,
            "eval_seconds": p.eval_seconds,
            "whiten_seconds": p.whiten_seconds,
            "final_eval_seconds": final_seconds,
            # What airbench94 prints as total_time_seconds: the whitening, the step loops and the
            # final evaluation with TTA (docs/trainer.md, "Timing").
            "airbench_seconds": p.whiten_seconds + p.train_seconds + final_seconds,
            "target_accuracy": self.where.target_accuracy,
            "seconds_to_target": p.seconds_to_target,
            "epochs_to_target": p.epochs_to_target,
            "hyperparameters": self.config.hyperparameters(),
            "config_hash": self.config.hash(),
            "code_hash": code_hash(),
            "torch_version": torch.__version__,
            "restarts": p.restarts,
        }
        return summary

    def publish(self, summary: dict[str, Any]) -> None:
        """Rank 0's summary, curves, final status and last line; nothing on the other ranks."""
        if self.is_rank0:
            p, final_acc = self.progress, summary["final_test_acc"]
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
                f" on {self.config.trained_on}, loss {summary['final_test_loss']:.4f},"
                f" {p.train_seconds:.1f} s of training on {self.place.world_size} rank(s)",
                flush=True,
            )


def _test_losses(line: dict[str, Any]) -> dict[str, float]:
    return {"test": line["test_loss"]} if "test_loss" in line else {}


def _latest(line: dict[str, Any]) -> dict[str, Any]:
    return {k: line[k] for k in ("test_acc", "train_loss", "images_per_second") if k in line}


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"
