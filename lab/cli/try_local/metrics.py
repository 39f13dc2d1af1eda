"""`labctl try`'s Prometheus: the real one (Debian's package) on this machine, scraping the ranks
on the test machines over their bridge while they train, as the lab's Prometheus scrapes the pods,
and each machine's node exporter (lab.cli.try_local.node_exporter), as it scrapes each node's.

The scrape configuration is checked with `promtool check config` before Prometheus starts. Each
rank serves on the stack's `observability.metricsPort` (`train --metrics-port`) at its machine's
address; Prometheus listens on 127.0.0.1 only. When the run ends, a few figures are asked of it,
it is stopped (closing its database), and its database and configuration are kept in the run
folder (`prometheus/`, `prometheus.yml`): the series of the run, for a later look or a test.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from lab.cli.common.console import CliError
from lab.cli.try_local import node_exporter
from lab.cli.try_local.local_prometheus import (
    LocalPrometheus,
    check_config,
    missing,
    scrape_config,
    write_config,
)
from lab.cli.try_local.node_exporter import NodeExporter
from lab.config.monitoring import NODES_JOB, RANKS_JOB
from lab.remote.prometheus import PrometheusError, describe, number, rank_figures
from lab.testbed.layout import Layout

SCRAPE_INTERVAL_S = 1  # a try trains for seconds: the cluster's 15 s would catch a sample or two
# How long a finished rank serves its final figures, waiting to be scraped twice more (`train
# --metrics-linger`): two intervals when the machine is idle, with room for one that is not.
LINGER_S = 30
CONFIG_FILE = "prometheus.yml"
DATA_FOLDER = "prometheus"


def targets(layout: Layout, port: int) -> dict[str, str]:
    """Each machine's rank (`address:port`, one rank per machine) -> the machine's name."""
    return {f"{machine.address}:{port}": machine.name for machine in layout.machines}


def exporters(layout: Layout, work: Path) -> list[NodeExporter]:
    """A node exporter per machine, logging into `work`."""
    return [NodeExporter(machine, work / f"node-exporter-{machine.name}.log") for machine in layout.machines]


def jobs(layout: Layout, port: int, nodes: list[NodeExporter]) -> dict[str, dict[str, str]]:
    """The scrape jobs: the ranks, and the node exporters, each target labelled with its machine."""
    return {RANKS_JOB: targets(layout, port), NODES_JOB: {n.target: n.machine.name for n in nodes}}


def missing_tools() -> list[str]:
    """The programs a try's metrics need that this machine lacks, each with its Debian package."""
    return [f"{tool} (package prometheus)" for tool in missing()] + [
        f"{tool} (package {tool})" for tool in node_exporter.missing()
    ]


@dataclass
class TryPrometheus:
    """Prometheus of one try: its files in the run's work folder until `keep` copies them out."""

    work: Path
    server: LocalPrometheus
    began: float = 0.0  # time.monotonic() at start

    @property
    def config(self) -> Path:
        return self.server.config

    def window_s(self) -> int:
        """Seconds back to the start, and a minute more: a range that holds every sample."""
        return int(time.monotonic() - self.began) + 60

    def figures(self, run: str) -> list[str]:
        """A line per rank with its last scraped figures, and the share of step time spent waiting
        for peers; lines saying why when Prometheus has none."""
        api = self.server.api
        window = self.window_s()
        ranks = rank_figures(api.last_values(run, window))
        if not ranks:
            return [f"Prometheus scraped no series of run {run}: {self.targets_health()}"]
        waits = {
            s.labels.get("rank", "?"): s.value
            for s in api.query(
                f'max_over_time(trainer_sync_wait_seconds_total{{run="{run}"}}[{window}s])'
                f' / max_over_time(trainer_step_seconds_total{{run="{run}"}}[{window}s])'
            )
        }
        # Prometheus' own series of each scrape: `up` is 1 for each one that succeeded.
        scrapes = api.query(f'sum(sum_over_time(up{{job="{RANKS_JOB}"}}[{window}s]))')
        samples = api.query(f'sum(sum_over_time(scrape_samples_scraped{{job="{RANKS_JOB}"}}[{window}s]))')
        lines = [
            f"rank {r.rank} on {r.where}: {describe(r)}, waiting for peers"
            f" {number(100 * waits[r.rank] if r.rank in waits else None, 1)}% of step time"
            for r in ranks
        ]
        lines.append(
            f"{number(samples[0].value if samples else None)} samples in"
            f" {number(scrapes[0].value if scrapes else None)} successful scrapes (each rank every"
            f" {SCRAPE_INTERVAL_S} s)"
        )
        return lines

    def targets_health(self) -> str:
        try:
            found = self.server.api.query(f'up{{job="{RANKS_JOB}"}}')
        except PrometheusError as err:
            return str(err)
        return ", ".join(f"{s.labels['instance']} up={number(s.value)}" for s in found) or "no targets"

    def keep(self, run_folder: Path) -> None:
        """Its database and configuration into the run folder (after `stop`)."""
        # Not the lock file a Prometheus may hold while it runs (`--storage.tsdb.use-lockfile`).
        kept = run_folder / DATA_FOLDER
        shutil.copytree(self.server.data, kept, dirs_exist_ok=True, ignore=shutil.ignore_patterns("lock"))
        shutil.copyfile(self.config, run_folder / CONFIG_FILE)


@contextmanager
def watching(layout: Layout, port: int, work: Path) -> Iterator[TryPrometheus]:
    """Prometheus scraping the ranks of `layout` on `port` and each machine's node exporter, from
    start to stop (also on a signal): the exporters first, so that its first scrape finds them."""
    began = time.monotonic()
    nodes = exporters(layout, work)
    config = write_config(work / CONFIG_FILE, scrape_config(jobs(layout, port, nodes), SCRAPE_INTERVAL_S))
    check_config(config)
    data = work / DATA_FOLDER
    data.mkdir()
    server = LocalPrometheus(config, data, log=work / "prometheus.log")
    with ExitStack() as running:
        try:
            for exporter in nodes:
                running.callback(exporter.stop)  # before it starts: a signal may come while it does
                exporter.start()
            running.callback(server.stop)
            server.start()
        except PrometheusError as err:
            raise CliError(f"the try's metrics could not start: {err}") from None
        yield TryPrometheus(work, server, began)
