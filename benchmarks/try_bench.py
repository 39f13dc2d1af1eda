"""Benchmark `labctl try`: its wall time from the command to the prompt, step by step (needs root).

Runs `labctl try --generated` (the generated CIFAR-format set, so that the figure does not
depend on a download) and writes docs/benchmarks/try.md with the machine it ran on.

    sudo .venv/bin/python benchmarks/try_bench.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bootstrap_bench import machine, spread
from lab.testbed.layout import CACHE_ROOT

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks" / "try.md"
STEP = re.compile(r"^(\d/5 [a-z]+):")
DONE = re.compile(r"^  done in (\d+) s$")


def one_run() -> tuple[float, dict[str, float]]:
    """Wall seconds of one `labctl try`, and the seconds each step reported."""
    with tempfile.TemporaryDirectory(prefix="try-bench-") as out:
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "lab.cli", "try", "--generated", "--out", out],
            capture_output=True,
            text=True,
            env=os.environ | {"COLUMNS": "200"},
            check=False,
        )
        wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(
            f"labctl try failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
    steps, current = {}, None
    for line in done.stdout.splitlines():
        if match := STEP.match(line):
            current = match.group(1)
        elif (match := DONE.match(line)) and current:
            steps[current] = float(match.group(1))
    return wall, steps


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of `labctl try`")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("try_bench: `labctl try` needs root", file=sys.stderr)
        return 2
    cached = any(CACHE_ROOT.glob("base-*"))
    load = os.getloadavg()[0]
    walls: list[float] = []
    steps: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        wall, found = one_run()
        walls.append(wall)
        for step, seconds in found.items():
            steps.setdefault(step, []).append(seconds)
    rows = "\n".join(f"| {step} | {spread(values)} |" for step, values in steps.items())
    REPORT.write_text(
        f"""# `labctl try` on a 2-core machine

Measured by `benchmarks/try_bench.py --repeat {args.repeat}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.

Machine: {machine()}; load average {load:.1f} when it started (the machine is shared, so the
figures carry other work's load). Base tree {"cached" if cached else "built by the first run"}.

| what | time |
| --- | --- |
| `labctl try --generated`, command to prompt | {spread(walls)} |
{rows}

The run: two Debian 12 systemd-nspawn machines, site.yml with the `testbed` stack's settings
(Kubernetes and the NFS server start skipped), two DDP ranks (one per machine, Gloo over the
machines' links) training the narrow network (width 16) for 4 epochs on the generated set (2048
training, 512 test images), results copied, the validation suite against both machines, and the
machines removed. The data step (generating the set) and the copying are in the total only.
"""
    )
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
