"""Benchmark the bootstrap and cross-host recovery on the local test machines (needs root).

Measures, on two fresh systemd-nspawn machines: site.yml's first convergence, the idempotent
second run (target under 20 s), and the recovery time of a two-rank DDP run from a killed rank
and from a link cut for longer than the collective timeout (target under 30 s plus the timeout).
Writes docs/benchmarks/bootstrap.md with the machine it ran on.

    sudo .venv/bin/python benchmarks/bootstrap_bench.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

from lab import testbed
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import load_stack
from lab.testbed import aptproxy, ddp
from lab.testbed.layout import CACHE_ROOT

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks" / "bootstrap.md"
STACK = "testbed"
# The trainer also waits this long for a restarted peer: room for a slow start on a busy machine.
COLLECTIVE_TIMEOUT_S = 30
JOB_TIMEOUT_S = 300


def timed(action: Callable[[], object]) -> float:
    began = time.monotonic()
    action()
    return time.monotonic() - began


def bootstrap_times() -> tuple[float, float, float]:
    """Seconds for site.yml's first run, its second run and reset.yml, through the Pulumi provider."""
    lab = load_stack(STACK)
    provider = HostBootstrapProvider()
    inputs = bootstrap_inputs(lab, STACK)
    outs: dict[str, object] = {}
    first = timed(lambda: outs.update(provider.create(inputs).outs or {}))
    again: dict[str, object] = {}
    second = timed(lambda: again.update(provider.update("hosts-testbed", outs, inputs).outs or {}))
    if again["changed"] != {n.name: 0 for n in lab.nodes}:
        raise SystemExit(f"the second site.yml run changed something: {again['changed']}")
    reset = timed(lambda: provider.delete("hosts-testbed", outs))
    return first, second, reset


def recovery(machines: testbed.Testbed, folder: Path, name: str) -> ddp.Recovery:
    """One two-rank run with a fault (`kill` or `link`) after its first epoch."""
    data = folder / "data"
    if not data.exists():
        ddp.make_dataset(data)
    job = ddp.DdpJob(machines.layout, ddp.small_run(data, folder / "runs", name), name, COLLECTIVE_TIMEOUT_S)
    job.start()
    try:
        job.wait_for(ddp.EPOCH_LINE, JOB_TIMEOUT_S)
        fault_at = (
            job.kill_worker(1) if name.startswith("kill") else job.cut_link(1, COLLECTIVE_TIMEOUT_S + 5)
        )
        result = job.recovery(fault_at, JOB_TIMEOUT_S)
        if job.wait(JOB_TIMEOUT_S) != [0, 0]:
            raise SystemExit(f"{name}: the run did not finish:\n{job.output()}")
        return result
    finally:
        job.stop()


def machine() -> str:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in ln
        ),
        platform.processor() or "unknown CPU",
    )
    mem_kb = int(
        next(
            ln.split()[1]
            for ln in Path("/proc/meminfo").read_text().splitlines()
            if ln.startswith("MemTotal")
        )
    )
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_kb / 2**20:.0f} GiB, Linux {platform.release()},"
        f" Python {platform.python_version()}, torch {torch.__version__}"
    )


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f} s"
    return (
        f"{statistics.median(values):.1f} s (min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1, help="repetitions of each measurement")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bootstrap_bench: needs root to create the test machines", file=sys.stderr)
        return 2
    cache = "warm" if any((CACHE_ROOT / "apt-cacher-ng").glob("*")) else "cold"
    load = os.getloadavg()[0]  # other work on the machine slows Ansible's many small SSH round trips
    layout = testbed.Layout()
    first, second, reset, ups = [], [], [], []
    kills: list[ddp.Recovery] = []
    links: list[ddp.Recovery] = []
    for _ in range(args.repeat):
        with testbed.exclusive():
            began = time.monotonic()
            machines = testbed.up(layout)
            ups.append(time.monotonic() - began)
            try:
                one, two, three = bootstrap_times()
                first.append(one)
                second.append(two)
                reset.append(three)
                with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
                    kills.append(recovery(machines, Path(tmp), "kill"))
                    links.append(recovery(machines, Path(tmp), "link"))
            finally:
                testbed.down(layout)
    rows = [
        ("`python -m lab.testbed up` (2 machines, base tree cached)", spread(ups), ""),
        ("site.yml, first convergence", spread(first), ""),
        ("site.yml, second run (changed=0)", spread(second), "under 20 s"),
        ("reset.yml", spread(reset), ""),
        ("rank 1 killed: group re-formed, checkpoint loaded", spread([k.regrouped_s for k in kills]), ""),
        (
            "rank 1 killed: next epoch completed",
            spread([k.next_epoch_s for k in kills]),
            f"under {30 + COLLECTIVE_TIMEOUT_S} s",
        ),
        (
            f"link cut {COLLECTIVE_TIMEOUT_S + 5} s: group re-formed, checkpoint loaded",
            spread([k.regrouped_s for k in links]),
            "",
        ),
        (
            f"link cut {COLLECTIVE_TIMEOUT_S + 5} s: next epoch completed",
            spread([k.next_epoch_s for k in links]),
            f"under {30 + COLLECTIVE_TIMEOUT_S} s",
        ),
    ]
    table = "\n".join(f"| {what} | {value} | {target} |" for what, value, target in rows)
    REPORT.write_text(
        f"""# Bootstrap and recovery on the local test machines

Measured by `benchmarks/bootstrap_bench.py --repeat {args.repeat}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.

Machine: {machine()}; load average {load:.1f} when it started.
Test machines: two Debian 12 systemd-nspawn machines (`python -m lab.testbed up`), apt through
apt-cacher-ng ({cache} package cache at the start, mirror {aptproxy.host_mirror()}).
Kubernetes and the NFS server start are skipped there (`stacks/Pulumi.testbed.yaml` says why),
so the convergence time covers packages, kernel settings, NFS and registry configuration only.

| measurement | time | target |
| --- | --- | --- |
{table}

Recovery runs: two ranks (one per machine, Gloo over the veths), synthetic data (2048 training
images, 4 epochs of 8 steps), collective timeout {COLLECTIVE_TIMEOUT_S} s,
torchrun `--max-restarts {ddp.DdpJob.max_restarts}`.
Times count from the fault (the kill, or the moment the link went down). The trainer reports
progress once per epoch, so "next epoch completed" is an upper bound of the time to the next
completed step; "group re-formed" is when rank 0 printed that it resumed from the checkpoint.
"""
    )
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
