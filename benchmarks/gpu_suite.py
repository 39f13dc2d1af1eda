"""The GPU figures in one command, about 4 minutes on one H200, markdown tables into DIR:

    python benchmarks/gpu_suite.py --out DIR [--airbench REFERENCE] [--rounds 5]
    .venv/bin/python benchmarks/gpu_suite.py --out /tmp/suite --smoke     # CPU, end to end, tiny

1. `side-by-side.md`: the trainer and airbench94's own code, both eager, each at airbench94's
   recipe (9.9 epochs, 476 steps of 1024, TTA level 2) on a generated CIFAR-size set, ROUNDS rounds in
   rotating turns: images/s and seconds as airbench94 times a run, per round and side, each
   round's ratio to airbench94, its median, an interval of the median and the claim the interval
   allows; the torch every figure ran on.
2. `suite.md`: the machine, the torch, what ran, how long each part took, and what was left out.

airbench94's code is not in this repository. Where the `airbench` package does not import (a
GPU machine without it, which cannot install it), copy the pinned package beside the checkout
first and name it, outside git:

    mkdir -p .reference && cp -r .venv/lib/python3.11/site-packages/airbench .reference/
    echo /.reference/ >> .git/info/exclude        # then carry .reference to the GPU machine
    python benchmarks/gpu_suite.py --out DIR --airbench .reference

Without it the side by side has the trainer's two sides only and says why.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import figures, trainer_bench  # noqa: E402
from trainer.data import provenance  # noqa: E402

VARIANTS: dict[str, list[str]] = {"trainer": []}


def side_by_side(work: Path, out: Path, rounds: int, reference: Path | None, smoke: bool) -> str:
    plan = trainer_bench.SMOKE_PLAN if smoke else trainer_bench.GPU_PLAN
    data = figures.synthetic(work / "data", *plan.images)
    runs = trainer_bench.side_by_side(data, work, plan, VARIANTS, reference, rounds)
    lines = [
        *figures.heading(
            "The trainer side by side with airbench94", figures.machine(), "benchmarks/gpu_suite.py"
        ),
        "",
        *trainer_bench.describe(plan, rounds, provenance(data)),
        *trainer_bench.side_tables(runs, plan),
        *trainer_bench.absent_note(reference),
    ]
    (out / "side-by-side.md").write_text("\n".join(lines) + "\n")
    return "side-by-side.md"


PARTS: list[tuple[str, Callable[[Path, Path, int, Path | None, bool], str]]] = [
    ("the side by side with airbench94", side_by_side),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the markdown tables")
    parser.add_argument("--airbench", type=Path, help="a folder holding the airbench package")
    parser.add_argument("--rounds", type=int, default=trainer_bench.ROUNDS, help="rounds of every side")
    parser.add_argument("--smoke", action="store_true", help="tiny settings, on a CPU: the suite end to end")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        parser.error("the suite measures a GPU and none is visible; --smoke runs it on a CPU, tiny")
    args.out.mkdir(parents=True, exist_ok=True)
    rounds = 2 if args.smoke else args.rounds
    began, load = time.monotonic(), figures.load_average()
    done: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, part in PARTS:
            started = time.monotonic()
            print(f"== {what}", flush=True)
            try:
                name = part(Path(tmp), args.out, rounds, args.airbench, args.smoke)
            except Exception as error:  # a part that breaks costs its own table, not the others'
                traceback.print_exc()
                done.append(
                    f"| {what} | failed: `{figures.last_line(error)}` | {time.monotonic() - started:.0f} |"
                )
                continue
            done.append(f"| {what} | `{name}` | {time.monotonic() - started:.0f} |")
            print((args.out / name).read_text(), flush=True)
    problem = trainer_bench.airbench_problem(args.airbench)
    summary = [
        *figures.heading("GPU suite", figures.machine(), "benchmarks/gpu_suite.py"),
        "",
        f"{'Smoke settings (tiny, on a CPU): no figure here is worth reading.' if args.smoke else ''}",
        f"Rounds: {rounds}. Load average at the start: {load}; at the end: {figures.load_average()}.",
        f"airbench94's code: {problem or 'found'}.",
        "",
        "| part | file | seconds |",
        "| --- | --- | --- |",
        *done,
        "",
        f"In all {time.monotonic() - began:.0f} s.",
    ]
    (args.out / "suite.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
