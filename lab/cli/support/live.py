"""The ranks' live figures from Prometheus, for `labctl status`: the lab's own Prometheus asked
through the API server's service proxy by the server's kubectl over SSH (no port-forward, nothing
exposed), or any Prometheus this machine reaches (`--prometheus URL`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from lab.cli.common.console import console
from lab.cli.support.prometheus import (
    HttpPrometheus,
    PrometheusError,
    RankFigures,
    Series,
    live_query,
    number,
    parse,
    rank_figures,
)
from lab.config import LabConfig, monitoring
from lab.remote.server_cluster import KubectlFailed, server_kubectl


@dataclass(frozen=True)
class ProxiedPrometheus:
    """The lab's Prometheus, through `kubectl get --raw` on the server and the API server's proxy."""

    cfg: LabConfig
    stack: str
    stacks_dir: Path

    @property
    def where(self) -> str:
        return (
            f"{monitoring.PROMETHEUS_SERVICE} in {monitoring.monitoring_namespace(self.cfg)},"
            f" through the API server on {self.cfg.server.name}"
        )

    def query(self, promql: str) -> list[Series]:
        path = monitoring.prometheus_api_path(self.cfg, "query", {"query": promql})
        try:
            return parse(server_kubectl(self.cfg, self.stack, self.stacks_dir, "get", "--raw", path))
        except KubectlFailed as err:
            raise PrometheusError(f"Prometheus is not reachable ({err.last})") from None


def add_prometheus_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="ask this Prometheus for the ranks' live figures (e.g. http://127.0.0.1:9090 through"
        " `kubectl port-forward`); default: the lab's own, through the API server, when the lab has it",
    )


def source(args: argparse.Namespace, cfg: LabConfig | None) -> tuple[Any, str]:
    """Whom to ask for live figures, or None with why nobody (empty when there is nothing to say)."""
    if args.prometheus:
        return HttpPrometheus(args.prometheus.rstrip("/")), ""
    if cfg is None or not cfg.installs_kubernetes:
        return None, ""  # a local copy of the runs, or test machines without a cluster: no Prometheus
    if not cfg.observability.enabled:
        return None, (
            f"live figures: none, stack {args.stack} has no Prometheus (k8scifar:observability.enabled"
            " is false); the figures below are from the run's files"
        )
    return ProxiedPrometheus(cfg, args.stack, args.stacks_dir), ""


def live_table(figures: list[RankFigures], run: str, where: str) -> Table:
    table = Table(title=f"live from Prometheus ({where}), run {run}", title_justify="left")
    for column in ("rank", "pod or node", "step", "epoch", "train loss", "images/s"):
        table.add_column(column)
    for f in figures:
        v = f.values.get
        table.add_row(
            f.rank,
            f.where,
            number(v("trainer_step")),
            number(v("trainer_epoch")),
            number(v("trainer_train_loss"), 3),
            number(v("trainer_images_per_second")),
        )
    return table


def show(args: argparse.Namespace, cfg: LabConfig | None, run: dict[str, Any]) -> None:
    """The run's live figures per rank, or one plain line saying why there are none."""
    asked, why_not = source(args, cfg)
    if asked is None:
        if why_not:
            console.print(f"[yellow]{why_not}[/]", soft_wrap=True)
        return
    # The ranks label their series with their run folder's name (trainer.telemetry).
    label = str(run.get("path") or run["name"]).rsplit("/", 1)[-1]
    try:
        figures = rank_figures(asked.query(live_query(label)))
    except PrometheusError as err:
        console.print(
            f"[yellow]live figures: {err}; the figures below are from the run's files[/]",
            soft_wrap=True,
        )
        return
    if not figures:
        console.print(
            f"[yellow]live figures: Prometheus ({asked.where}) has no live series of run {label}:"
            " its ranks are not serving (finished, stopped or not started yet)[/]",
            soft_wrap=True,
        )
        return
    console.print(live_table(figures, label, asked.where))
