"""Benchmark `labctl try`: its wall time from the command to the prompt, step by step, and what its
Prometheus and node exporters use (needs root).

Runs `labctl try --generated` (the generated CIFAR-format set, so that the figure does not
depend on a download) and writes docs/benchmarks/try.md with the machine it ran on. While it
runs, its Prometheus and node exporter processes (its children) are read from /proc every
SAMPLE_S: peak resident memory (`VmHWM`, /proc/PID/status) and CPU seconds (user plus system,
/proc/PID/stat), as last read before each exits.

    sudo .venv/bin/python benchmarks/try_bench.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bootstrap_bench import machine, spread
from lab.cli.try_local.local_prometheus import PROMETHEUS
from lab.cli.try_local.metrics import DATA_FOLDER, SCRAPE_INTERVAL_S
from lab.cli.try_local.node_exporter import NODE_EXPORTER
from lab.cluster.observability import SIZES
from lab.testbed import processes
from lab.testbed.layout import CACHE_ROOT

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks" / "try.md"
STEP = re.compile(r"^(\d/5 [a-z]+):")
DONE = re.compile(r"^  done in (\d+) s$")
SAMPLE_S = 0.2
WATCHED = (PROMETHEUS, NODE_EXPORTER)
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    """One process of the try's, as last read: what it is, its peak resident memory, CPU seconds
    and how long it was seen."""

    program: str
    peak_kib: int
    cpu_s: float
    first: float  # time.monotonic()
    last: float

    @property
    def cpu_share(self) -> float:
        """CPU seconds per second of its life (1.0: one core)."""
        return self.cpu_s / max(self.last - self.first, SAMPLE_S)


def read(pid: int) -> tuple[str, int, float] | None:
    """A watched process's program, peak resident KiB and CPU seconds; None for any other."""
    command = processes.command_line(pid)
    program = Path(command[0]).name if command else ""
    if program not in WATCHED:
        return None
    with contextlib.suppress(OSError, StopIteration, IndexError, ValueError):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        peak = int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return program, peak, (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return None


def watch(proc: subprocess.Popen[str]) -> dict[int, Usage]:
    """Its watched children, read every SAMPLE_S until it exits."""
    seen: dict[int, Usage] = {}
    while proc.poll() is None:
        now = time.monotonic()
        for pid in processes.children(proc.pid):
            found = read(pid)
            if found:
                program, peak, cpu = found
                usage = seen.setdefault(pid, Usage(program, peak, cpu, now, now))
                usage.peak_kib, usage.cpu_s, usage.last = peak, cpu, now
        time.sleep(SAMPLE_S)
    return seen


def one_run() -> tuple[float, dict[str, float], list[Usage], int]:
    """Wall seconds of one `labctl try`, the seconds each step reported, what its Prometheus and
    node exporters used, and the bytes of the database it kept."""
    with tempfile.TemporaryDirectory(prefix="try-bench-") as out:
        began = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.cli", "try", "--generated", "--out", out],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ | {"COLUMNS": "200"},
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        usage = list(watch(proc).values())
        reader.join()
        wall = time.monotonic() - began
        kept = sum(f.stat().st_size for f in Path(out).glob(f"*/{DATA_FOLDER}/**/*") if f.is_file())
    stdout = "".join(lines)
    if proc.returncode != 0:
        raise SystemExit(f"labctl try failed ({proc.returncode}):\n{stdout[-5000:]}")
    steps, current = {}, None
    for line in stdout.splitlines():
        if match := STEP.match(line):
            current = match.group(1)
        elif (match := DONE.match(line)) and current:
            steps[current] = float(match.group(1))
    return wall, steps, usage, kept


def usage_rows(used: list[Usage]) -> str:
    """A row per program: the highest peak and the most CPU of its processes in every run."""
    names = {
        PROMETHEUS: ("Prometheus", "prometheus"),
        NODE_EXPORTER: ("node exporter (each)", "node-exporter"),
    }
    rows = []
    for program, (title, size) in names.items():
        mine = [u for u in used if u.program == program]
        if not mine:
            rows.append(f"| {title} | not seen | | | |")
            continue
        limits = f"{SIZES[size].cpu_limit} CPU, {SIZES[size].memory_limit}"
        peak = max(u.peak_kib for u in mine) / 1024
        cpu, life = max(u.cpu_s for u in mine), max(u.last - u.first for u in mine)
        share = 1000 * max(u.cpu_share for u in mine)
        rows.append(f"| {title} | {peak:.1f} MiB | {cpu:.2f} s over {life:.0f} s | {share:.0f}m | {limits} |")
    return "\n".join(rows)


def spread_kib(sizes: list[int]) -> str:
    return ", ".join(f"{size / 1024:.0f} KiB" for size in sizes)


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
    used: list[Usage] = []
    kept: list[int] = []
    for _ in range(args.repeat):
        wall, found, usage, database = one_run()
        walls.append(wall)
        used.extend(usage)
        kept.append(database)
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

## What its Prometheus and node exporters use

Read from /proc every {SAMPLE_S} s while it ran (peak resident memory `VmHWM`; CPU seconds, user
plus system, from start to exit; CPU while it ran: those seconds over its life), beside the limits
the lab's charts give the same programs' containers (`SIZES` in `lab/cluster/observability.py`):

| process | peak resident memory | CPU seconds | CPU while it ran | the lab's container limits |
| --- | --- | --- | --- | --- |
{usage_rows(used)}

Prometheus scraped two ranks and two node exporters every {SCRAPE_INTERVAL_S} s (the lab's every 15 s) and
kept {spread_kib(kept)} of database; each node exporter ran the `netdev` and `netclass` collectors
only (the lab's runs the chart's defaults). Grafana and dcgm-exporter are not measured: Debian
packages neither, and there is no GPU here.
"""
    )
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
