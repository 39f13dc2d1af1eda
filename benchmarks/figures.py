"""What the benchmarks share: the machine they ran on, child processes, a generated set, and the
spread of a ratio measured in rounds (its median and a distribution-free interval around it).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The least coverage an interval of the median must have; with 5 rounds only the smallest and
# largest round reach it (93.75 %).
COVERAGE = 0.90


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        line.split()[1]
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    gib = int(memory) // 1024**2
    return (
        f"{cpu}, {os.cpu_count()} cores (nproc), {gib} GiB, GPU: {gpu};"
        f" torch {torch.__version__}, Python {platform.python_version()}"
    )


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def heading(title: str, host: str, script: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `{script}` on: {host}.",
    ]


class RunFailed(Exception):
    """A benchmark's child process failed; the message holds the command and its output's end."""


def run(command: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` to its end; on failure RunFailed with its output, so a run on a lent machine says
    what broke."""
    done = subprocess.run(list(command), env=env, capture_output=True, text=True)
    if done.returncode:
        output = done.stdout[-2000:] + done.stderr[-4000:]
        raise RunFailed(f"{' '.join(command)} failed ({done.returncode}):\n{output}")
    return done


def last_line(error: BaseException) -> str:
    """The last non-empty line of an error's message: what a table can hold."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


def synthetic(folder: Path, train: int, test: int) -> Path:
    """A generated set in CIFAR-10's format, written by the trainer's own command."""
    command = [sys.executable, "-m", "trainer", "data", "synthetic", "--dir", str(folder)]
    command += ["--train", str(train), "--test", str(test)]
    run(command, {**os.environ, "PYTHONPATH": str(ROOT)})
    return folder


def median_interval(values: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float, float]:
    """The narrowest interval of order statistics [x(j), x(n+1-j)] that holds the median of what
    `values` were drawn from with probability `coverage` at least, whatever that distribution:
    P = 1 - 2 P(Binomial(n, 1/2) < j). Returns (low, high, its coverage); with fewer than 5 values
    no such interval reaches 90 %, and the whole range is returned with what it covers."""
    ordered = sorted(values)
    n = len(ordered)
    best = 1
    for j in range(1, n // 2 + 1):
        if _covers(n, j) >= coverage:
            best = j
    return ordered[best - 1], ordered[n - best], _covers(n, best)


def _covers(n: int, j: int) -> float:
    return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n


def interval_text(low: float, high: float, level: float) -> str:
    return f"{low:.3f} to {high:.3f} ({100 * level:.1f} %)"


def verdict(low: float, high: float, level: float, above: str, below: str) -> str:
    """What an interval of a ratio allows one to say: `above` 1 or `below` it, or neither."""
    if level < COVERAGE:
        return f"too few rounds for a {100 * COVERAGE:.0f} % interval: no claim"
    if low > 1:
        return above
    if high < 1:
        return below
    return "not distinguishable: the interval holds 1"


def listed(values: Sequence[float], scale: float = 1.0) -> str:
    return ", ".join(f"{scale * v:.1f}" for v in values)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
