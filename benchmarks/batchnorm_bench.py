"""BatchNorm at several ranks: what global statistics cost a step, and what they change in accuracy.

Step time: the trainer's own run (`train.Run`, DDP, `Numerics.step`) on one fixed global batch,
with each rank's own BatchNorm statistics (`--batchnorm rank`) and with the global ones
(`--batchnorm global`, the default), in turns, at 2 ranks and more (one rank takes torch's own
kernel either way): 2 processes on a CPU, as many GPUs as there are up to 8 on a GPU machine.

Accuracy: the trainer under torchrun on a generated set at 1, 2, 4 and 8 ranks, both ways.

    .venv/bin/python benchmarks/batchnorm_bench.py --out docs/benchmarks/batchnorm-cpu.md  # CPU
    .venv/bin/python benchmarks/batchnorm_bench.py --accuracy --out ...                # and accuracy
    python benchmarks/batchnorm_bench.py --out DIR/batchnorm.md                        # 2+ GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from lab.cli.try_local.local_prometheus import free_port  # noqa: E402
from trainer import distributed, train  # noqa: E402
from trainer.config import resolve  # noqa: E402
from trainer.contract import GENERATED  # noqa: E402
from trainer.data import Split  # noqa: E402
from trainer.hyperparameters import GLOBAL_BATCHNORM, RANK_BATCHNORM  # noqa: E402
from trainer.pod import run_state  # noqa: E402

MODES = (RANK_BATCHNORM, GLOBAL_BATCHNORM)


@dataclass(frozen=True)
class StepPlan:
    """One step-time measurement: the net, the batch and how many steps are timed."""

    width: int
    batch: int  # global
    warmup: int  # steps before the timing starts (cuDNN's choice, the allocator)
    timed: int  # steps in each timed block
    blocks: int  # timed blocks per run; a run's figure is their median


CPU_STEPS = StepPlan(width=64, batch=256, warmup=2, timed=3, blocks=3)
GPU_STEPS = StepPlan(width=64, batch=1024, warmup=30, timed=100, blocks=5)
SMOKE_STEPS = StepPlan(width=4, batch=32, warmup=1, timed=2, blocks=2)


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8)
    return Split(images, (np.arange(count) % 10).astype(np.int64))


def _group(rank: int, world: int, port: int, backend: str) -> None:
    """A process group of `world` ranks, a group of one included (the trainer makes none there)."""
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)


def _step_rank(rank: int, world: int, port: int, mode: str, plan: StepPlan, out: Path) -> None:
    """One rank: the trainer's run in `mode`, its median seconds a step written by rank 0."""
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)
    place = distributed.Topology(rank, world, rank, "127.0.0.1", port)
    device = distributed.device_for(place, "nccl" if cuda else "gloo")
    _group(rank, world, port, "nccl" if cuda else "gloo")
    splits = (_split(plan.batch, 0), _split(16, 1))
    options = {
        "model": "airbench", "width": plan.width, "batch_size": plan.batch, "seed": 0, "cutout": 0,
        "tta": 0, "accumulate": 1, "compression": "none", "steps": 1000, "batchnorm": mode,
    }  # fmt: skip
    config = resolve(options, plan.batch, 16, GENERATED)
    where = run_state.RunOptions(out / f"run-{mode}-{world}-{rank}", "gloo", 300, 2, 0.94, "exit")
    run = train.Run(config, where, place, splits)
    run.fit_to_data()
    numerics = run.numerics
    numerics.model = distributed.wrap(run.net, device, "none", run.precision.dtype)
    images, labels = next(run.loader.batches(0))
    scale = run.precision.loss_scale * world / plan.batch
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    numerics.set_learning_rates(0, 1000, 0)

    def steps(count: int) -> float:
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(count):
            numerics.step(images, labels, 1, scale, sums)
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - began) / count

    steps(plan.warmup)
    seconds = statistics.median(steps(plan.timed) for _ in range(plan.blocks))
    if rank == 0:
        (out / f"{mode}-{world}.json").write_text(json.dumps({"seconds": seconds}))
    dist.barrier()
    dist.destroy_process_group()


def step_times(
    plan: StepPlan, worlds: tuple[int, ...], rounds: int, work: Path
) -> dict[tuple[int, str], list[float]]:
    """Seconds a step for each (ranks, mode), a figure a round, the modes in turns."""
    times: dict[tuple[int, str], list[float]] = {(w, m): [] for w in worlds for m in MODES}
    for round_ in range(rounds):
        for world in worlds:
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                out = work / f"steps-{round_}"
                out.mkdir(parents=True, exist_ok=True)
                port = free_port()
                mp.spawn(_step_rank, args=(world, port, mode, plan, out), nprocs=world, join=True)
                times[world, mode].append(json.loads((out / f"{mode}-{world}.json").read_text())["seconds"])
        print(f"round {round_ + 1}: " + ", ".join(f"{k}: {v[-1] * 1000:.1f} ms" for k, v in times.items()))
    return times


def step_table(times: dict[tuple[int, str], list[float]], plan: StepPlan) -> list[str]:
    """Milliseconds a step each way, and global over rank per round with its median and interval."""
    lines = [
        f"Airbench at width {plan.width}, global batch {plan.batch}; each figure the median of"
        f" {plan.blocks} blocks of {plan.timed} steps after {plan.warmup} of warm-up, one process per rank.",
        "",
        "| ranks | rank statistics, ms a step (rounds) | global statistics, ms a step (rounds)"
        " | global / rank per round | median | interval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for world in sorted({w for w, _ in times}):
        rank, glob = times[world, RANK_BATCHNORM], times[world, GLOBAL_BATCHNORM]
        ratios = [g / r for g, r in zip(glob, rank, strict=True)]
        low, high, level = figures.median_interval(ratios)
        lines.append(
            f"| {world} | {figures.listed(rank, 1000)} | {figures.listed(glob, 1000)}"
            f" | {', '.join(f'{x:.3f}' for x in ratios)} | {statistics.median(ratios):.3f}"
            f" | {figures.interval_text(low, high, level)} |"
        )
    return lines


def accuracy(data: Path, work: Path, worlds: tuple[int, ...], seeds: int, flags: list[str]) -> dict:
    """Final test accuracy of the trainer at each (ranks, mode), a figure a seed."""
    torchrun = Path(sys.executable).with_name("torchrun")
    found: dict[tuple[int, str], list[float]] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for seed in range(seeds):
        for world in worlds:
            for mode in MODES:
                name = f"acc-{world}-{mode}-{seed}"
                args = ["train", "--data", str(data), "--runs", str(work), "--run-name", name, *flags]
                args += ["--seed", str(seed), "--batchnorm", mode]
                command = [str(torchrun), f"--nproc-per-node={world}", "--rdzv-backend=c10d"]
                command += [f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--module", "trainer", *args]
                figures.run(command, env)
                summary = json.loads((work / name / "summary.json").read_text())
                found.setdefault((world, mode), []).append(summary["final_test_acc"])
                print(f"{name}: {100 * summary['final_test_acc']:.2f}%", flush=True)
    return found


def accuracy_table(found: dict[tuple[int, str], list[float]]) -> list[str]:
    lines = [
        "| ranks | images a rank normalises over, rank statistics | rank statistics | global statistics |",
        "| --- | --- | --- | --- |",
    ]
    for world in sorted({w for w, _ in found}):
        cells = [
            ", ".join(f"{100 * a:.2f}%" for a in found[world, mode])
            + f" (mean {100 * statistics.mean(found[world, mode]):.2f}%)"
            for mode in MODES
        ]
        lines.append(f"| {world} | {ACCURACY_BATCH // world} | {cells[0]} | {cells[1]} |")
    return lines


ACCURACY_IMAGES = (1536, 256)
ACCURACY_BATCH = 128
ACCURACY_FLAGS = ["--width", "8", "--batch-size", str(ACCURACY_BATCH), "--tta", "0", "--epochs", "3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the markdown file to write")
    parser.add_argument("--rounds", type=int, default=5, help="step-time rounds (each: both modes)")
    parser.add_argument("--accuracy", action="store_true", help="also accuracy at 1, 2, 4 and 8 ranks")
    parser.add_argument("--seeds", type=int, default=2, help="accuracy runs per cell")
    parser.add_argument("--smoke", action="store_true", help="tiny settings: checks the script end to end")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    plan = SMOKE_STEPS if args.smoke else GPU_STEPS if cuda else CPU_STEPS
    worlds = tuple(w for w in (2, 4, 8) if w <= torch.cuda.device_count()) if cuda else (2,)
    if not worlds:
        parser.error("the step time needs 2 GPUs or more: one rank takes torch's own kernel either way")
    host, load_before = figures.machine(), figures.load_average()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        times = step_times(plan, worlds, 2 if args.smoke else args.rounds, work)
        text = [*figures.heading("BatchNorm at several ranks", host, "benchmarks/batchnorm_bench.py"), ""]
        text += ["## Step time, each rank's statistics against the global ones", "", *step_table(times, plan)]
        if args.accuracy:
            data = figures.synthetic(work / "data", *ACCURACY_IMAGES)
            flags = ACCURACY_FLAGS if not args.smoke else [*ACCURACY_FLAGS[:-1], "1"]
            found = accuracy(data, work / "runs", (1, 2) if args.smoke else (1, 2, 4, 8), args.seeds, flags)
            text += [
                "",
                "## Final accuracy on a generated set",
                "",
                f"`{' '.join(flags)}` on {ACCURACY_IMAGES[0]:,} generated training images ({GENERATED};",
                f"{ACCURACY_IMAGES[1]} test images), seeds 0 to {args.seeds - 1}, torchrun on this machine.",
                "",
                *accuracy_table(found),
            ]
        loads = f"at the start: {load_before}; at the end: {figures.load_average()}"
        text += ["", f"Load average (1, 5, 15 min) {loads}."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
