"""`labctl try`'s node exporters: Debian's `prometheus-node-exporter` (1.5.0 on Debian 12, from
scripts/apt-packages.txt), one per test machine, serving that machine's network interfaces as the
cluster's node exporter serves each node's.

A test machine is this host's files and processes in a network namespace of its own (lab.testbed),
as its ranks are (lab.testbed.ddp): the exporter runs there with `ip netns exec`, which also mounts
a sysfs of that namespace, so `/proc/net/dev` (the `netdev` collector) and `/sys/class/net` (the
`netclass` collector) show the machine's own links. Only those two collectors run: every other
one would read this host's CPUs, memory and disks and give each machine the same figures.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lab.cli.try_local.local_prometheus import await_answer, start_logged, stop_process
from lab.config.monitoring import NODE_EXPORTER_PORT
from lab.testbed.layout import Machine

NODE_EXPORTER = "prometheus-node-exporter"  # Debian's name for upstream's node_exporter
COLLECTORS = ("netdev", "netclass")


def missing() -> list[str]:
    return [NODE_EXPORTER] if shutil.which(NODE_EXPORTER) is None else []


@dataclass
class NodeExporter:
    """The node exporter of one test machine, on its address only."""

    machine: Machine
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{self.machine.address}:{NODE_EXPORTER_PORT}"

    def command(self) -> list[str]:
        return [
            "ip", "netns", "exec", self.machine.netns, NODE_EXPORTER,
            f"--web.listen-address={self.target}", "--collector.disable-defaults",
            *(f"--collector.{name}" for name in COLLECTORS),
        ]  # fmt: skip

    def start(self) -> None:
        """Start it and wait until it serves its metrics over the bridge, where Prometheus asks;
        `stop` ends it whether or not it got that far."""
        self.process = start_logged(self.command(), self.log)
        what = f"{NODE_EXPORTER} of {self.machine.name}"
        await_answer(self.process, f"http://{self.target}/metrics", what, self.log)

    def stop(self) -> None:
        stop_process(self.process)
