"""The ranks' live figures in `labctl status`: whom to ask (the lab's own Prometheus through the
API server's service proxy, or any Prometheus this machine reaches, `--prometheus URL`), and a
table of what it answers, or one line saying why there is none."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from lab.cli.common.console import console
from lab.config import LabConfig
from lab.remote.prometheus import (
    HttpPrometheus,
    PrometheusError,
    ProxiedPrometheus,
    RankFigures,
    live_query,
    number,
    rank_figures,
)


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
    # The ranks label their series with their run folder's name (trainer.pod.telemetry).
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
