"""Host bootstrap benchmark: how long the playbooks take on the local test machines.

Times reset.yml (to start clean), site.yml on clean machines, site.yml on a converged lab and
reset.yml again, and writes the figures with the machine they ran on to docs/benchmarks/hosts.md.
Runs the lab's real playbooks through lab.playbook, with the testbed stack's skips. As root:

    .venv/bin/python -m lab.testbed up --name hb --subnet 10.78.0.0/24
    .venv/bin/python benchmarks/hosts_bench.py --testbed hb --subnet 10.78.0.0/24
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.config import LabConfig, parse_config, read_stack_values, stack_file  # noqa: E402
from lab.hosts import new_join_token  # noqa: E402
from lab.inventory import build_inventory, known_hosts_file  # noqa: E402
from lab.playbook import run_playbook  # noqa: E402
from lab.testbed.layout import Layout  # noqa: E402

OUTPUT = ROOT / "docs" / "benchmarks" / "hosts.md"
STEPS = [
    ("reset.yml", "start clean"),
    ("site.yml", "clean machines"),
    ("site.yml", "converged"),
    ("reset.yml", "undo"),
]


def testbed_lab(layout: Layout) -> LabConfig:
    """The testbed stack's configuration, pointed at the machines of `layout`."""
    values = read_stack_values(stack_file("testbed"))
    template = values["nodes"]
    values["nodes"] = [
        {
            **template[min(i, len(template) - 1)],
            "name": m.name,
            "address": m.address,
            "role": "server" if i == 0 else "agent",
        }
        for i, m in enumerate(layout.machines)
    ]
    values["ssh"] = {**values.get("ssh", {}), "keyPath": str(layout.key)}
    return parse_config(values, source=f"testbed {layout.name}")


def _machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kib = int(
        next(
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    )
    return f"{cpu}, {os.cpu_count()} cores, {memory_kib / 2**20:.0f} GiB, Linux {platform.release()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testbed", default="lab", help="testbed name (python -m lab.testbed up --name)")
    parser.add_argument("--subnet", default="10.77.0.0/24", help="the testbed's subnet")
    args = parser.parse_args()
    layout = Layout(name=args.testbed, subnet=args.subnet)
    lab = testbed_lab(layout)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as state:
        inventory = build_inventory(lab, known_hosts_file("bench", Path(state)))
        token = new_join_token()
        for playbook, when in STEPS:
            start = time.monotonic()
            result = run_playbook(
                Path(state) / "work",
                playbook,
                inventory,
                {"lab_stack": "bench"},
                secret_vars={"lab_join_token": token},
                quiet=True,
            )
            seconds = time.monotonic() - start
            rows.append(f"| {playbook} | {when} | {seconds:.1f} | {result.total_changed} |")
            print(rows[-1], flush=True)
    OUTPUT.write_text(
        "# Host bootstrap timings\n\n"
        "Written by `benchmarks/hosts_bench.py`; wall-clock seconds of each playbook run\n"
        f"against {len(layout.machines)} local test machines (Debian 12, systemd-nspawn, apt through the\n"
        "testbed's caching proxy), with the testbed stack's skips (no Kubernetes install, no NFS\n"
        "server start). Package downloads come from the proxy's cache after the first run.\n\n"
        f"- date: {datetime.date.today().isoformat()}\n"
        f"- machine: {_machine()}\n\n"
        "| playbook | state | seconds | changed tasks (all hosts) |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n"
    )
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
