"""Where an epoch's time goes: the trainer's step loop timed with parts of it taken away, then
profiled (the device's busy time against the wall, and the costliest operators).

    .venv/bin/python benchmarks/trainer_profile.py [--batch-size 1024] [--images 50000]

It drives `trainer.train.Run` in-process on random CIFAR-shaped data, full-width airbench, no
per-epoch evaluation. Each variant removes one part so the difference is that part's cost:
the checkpoint written each epoch, the augmentation (one batch reused), and the step's loss and
accuracy sums (a bare forward, backward and optimizer step). The variants take turns an epoch
each, so a GPU's clocks rising over the first seconds of load weigh on them alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer import distributed, train  # noqa: E402
from trainer.config import resolve  # noqa: E402
from trainer.contract import GENERATED  # noqa: E402
from trainer.data import Split  # noqa: E402
from trainer.pod import run_state  # noqa: E402

EPOCHS = 5  # timed per variant, after one warm-up epoch


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8)
    return Split(images, (np.arange(count) % 10).astype(np.int64))


def _run(folder: Path, images: int, batch: int) -> train.Run:
    flags = {
        "model": "airbench", "width": 64, "batch_size": batch, "seed": 0, "cutout": 0, "tta": 0,
        "accumulate": 1, "compression": "none", "epochs": 100,
    }  # fmt: skip
    config = resolve(flags, images, 1000, GENERATED)
    where = run_state.RunOptions(folder, "nccl", 60, 2, 0.94, "exit", epoch_eval=False)
    place = distributed.Topology(0, 1, 0, "127.0.0.1", 0)
    run = train.Run(config, where, place, (_split(images, 0), _split(1000, 1)))
    run.folder.prepare(fresh=True)
    run.numerics.model = run.net
    return run


def _no_checkpoint(run: train.Run) -> None:
    run.writer.submit = lambda step, state, then=lambda: None: then()  # type: ignore[method-assign]


def _one_batch(run: train.Run) -> None:
    images, labels = next(run.loader.batches(0))

    def batches(
        epoch: int, start_step: int = 0, steps: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(start_step, steps or run.loader.steps_per_epoch):
            yield images, labels

    run.loader.batches = batches  # type: ignore[method-assign]


def _bare_step(run: train.Run) -> None:
    numerics = run.numerics

    def step(
        images: torch.Tensor, labels: torch.Tensor, parts: int, scale: float, sums: torch.Tensor
    ) -> None:
        logits = numerics.model(numerics.normalise(images)).float()
        F.cross_entropy(logits, labels, reduction="sum").backward()
        numerics.optimizer.step()
        numerics.optimizer.zero_grad(set_to_none=True)

    numerics.step = step  # type: ignore[method-assign]


VARIANTS: list[tuple[str, list[Callable[[train.Run], None]]]] = [
    ("as trained", []),
    ("no checkpoint", [_no_checkpoint]),
    ("no checkpoint, one batch", [_no_checkpoint, _one_batch]),
    ("no checkpoint, one batch, bare step", [_no_checkpoint, _one_batch, _bare_step]),
]


def _epoch_seconds(run: train.Run, epochs: int) -> list[float]:
    seconds = []
    for _ in range(epochs):
        epoch = run.progress.epoch
        run.train_epoch(epoch, run_state.StopSignal())
        seconds.append(run.progress.history[-1]["epoch_seconds"])
    run.writer.wait()
    return seconds


def _profile(run: train.Run) -> None:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    _epoch_seconds(run, 1)  # cuDNN's kernel choice stays out of the profile
    began = time.perf_counter()
    with profile(activities=activities) as prof:
        _epoch_seconds(run, 1)
    wall = time.perf_counter() - began
    steps = run.loader.steps_per_epoch
    averages = prof.key_averages()
    busy = sum(e.self_device_time_total for e in averages) / 1e6
    launches = sum(e.count for e in averages if e.device_type == torch.autograd.DeviceType.CUDA)
    per_step = launches / steps
    print(f"\nprofiled epoch: {wall:.3f} s wall, device busy {busy:.3f} s, {per_step:.0f} kernels a step")
    if run.device.type == "cuda":
        print(averages.table(sort_by="self_device_time_total", row_limit=18, max_name_column_width=50))
    print(averages.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--images", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for name, changes in VARIANTS:
            run = _run(Path(tmp) / name.replace(" ", "-").replace(",", ""), args.images, args.batch_size)
            for change in changes:
                change(run)
            _epoch_seconds(run, 1)
            runs.append(run)
        seconds: list[list[float]] = [[] for _ in runs]
        for _ in range(EPOCHS):
            for run, taken in zip(runs, seconds, strict=True):
                # Two epochs a turn, the second timed: it is the one the first's checkpoint overlaps.
                taken.append(_epoch_seconds(run, 2)[1])
        for (name, _), run, taken in zip(VARIANTS, runs, seconds, strict=True):
            images = run.loader.steps_per_epoch * args.batch_size
            print(
                f"{name:40s} {statistics.median(taken) * 1000:7.1f} ms an epoch"
                f" ({images / statistics.median(taken):,.0f} images/s)",
                flush=True,
            )
        _profile(_run(Path(tmp) / "profiled", args.images, args.batch_size))


if __name__ == "__main__":
    main()
