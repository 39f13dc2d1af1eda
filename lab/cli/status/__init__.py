"""`labctl status`: the training run as it stands: ranks and their nodes, the ranks' live figures
from Prometheus where the lab has it (the package's `live`), epoch, loss, accuracy, throughput,
ETA and restarts."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from lab.cli.common.console import CliError, console, errors, shown
from lab.cli.common.runsource import print_problems, run_option, runs_source, unreadable_runs
from lab.cli.common.stackarg import add_stack_option, flags, load
from lab.cli.status import cluster, live
from lab.config import STACKS_DIR, LabConfig
from lab.remote.gpu_nodes import gpu_node_lines
from lab.remote.pods import Rank, training_ranks
from trainer.contract import TRAINED_ON


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="show the training run as it stands",
        description="Ranks and where they run (kubectl on the server over SSH; on a stack that names a"
        " cluster's kubeconfig, the cluster's API, with its StatefulSets and Jobs), their live figures from"
        " the lab's Prometheus (step, epoch, train loss and images/s per rank, through the API server),"
        " and the run's progress from its status.json and metrics.jsonl on the NFS export.",
    )
    add_stack_option(parser)
    parser.add_argument("--run", help="run folder name (default: the most recently updated run)")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        help="read a local copy of the runs folder instead (no cluster query, no stack file needed)",
    )
    live.add_prometheus_option(parser)
    parser.set_defaults(handler=run)


def all_runs(found: dict[str, Any]) -> list[dict[str, Any]]:
    """Plain runs and every sweep member, each named by its path under the runs folder."""
    members = [m | {"name": m["path"]} for sweep in found["sweeps"] for m in sweep["members"]]
    return found["runs"] + members


def pick_run(found: dict[str, Any], name: str | None, where: str, starts: str = "") -> dict[str, Any]:
    """Run `name`, or the most recently updated one; `starts` says what would start one."""
    runs = all_runs(found)
    if name is not None:
        for candidate in runs:
            if name in {candidate["name"], candidate["path"]}:
                return candidate
        known = ", ".join(r["name"] for r in runs) or "none"
        raise CliError(f"no run {name!r} under {where}; runs there: {known}")
    if not runs:
        raise CliError(f"no training run under {where} yet{'; ' + starts if starts else ''}")
    return max(runs, key=lambda r: r["modified"])


def what_starts_a_run(args: argparse.Namespace) -> str:
    """What puts a run where `status` and `wait` look, for the stack or the local folder they read."""
    if args.runs_dir is not None:
        return "pass the folder that holds the run folders (`labctl try` writes them into its --out)"
    if not load(args).installs_kubernetes:
        # Such a stack (`labctl try`'s, the test machines') trains nothing by itself.
        return (
            f"stack {args.stack} skips the Kubernetes install (k8scifar:skip.kubernetesInstall), so"
            " nothing trains on its machines by itself; for the runs `labctl try` wrote, use"
            " --runs-dir with its --out folder"
        )
    follow = f"`labctl status {flags(args)}` follows it"
    if Path(args.stacks_dir).resolve() != STACKS_DIR:
        # `pulumi up` reads stack files from stacks/ only (Pulumi.yaml's stackConfigDir).
        return f"`labctl hosts up {flags(args)}` and `labctl render {flags(args)} DIR` start one, {follow}"
    return f"`pulumi up --stack {args.stack}` starts one, {follow}"


def progress(run: dict[str, Any]) -> dict[str, Any]:
    """status.json's fields, filled in from the last metrics line and the summary where it has none."""
    status = run.get("status") or {}
    latest = status["latest"] if isinstance(status.get("latest"), dict) else {}
    summary = run.get("summary") or {}
    last = run.get("last_metrics") or {}
    merged: dict[str, Any] = {"state": "complete" if summary else "unknown", "epochs": summary.get("epochs")}
    merged |= {
        k: last[k]
        for k in ("epoch", "step", "test_acc", "train_loss", "images_per_second", TRAINED_ON)
        if k in last
    }
    merged |= {k: summary[k] for k in (TRAINED_ON,) if k in summary}
    return merged | status | latest


# Beyond a year an ETA says nothing; status.json is anyone's to write.
MAX_ETA_SECONDS = 366 * 24 * 3600


def _format(key: str, value: Any) -> str:
    """A status figure as the table shows it; what is not the number it should be (the run folder
    is anyone's to write) is shown as it is."""
    if value is None:
        return "-"
    finite = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if key.endswith("acc") and isinstance(value, float) and finite:
        return f"{value:.2%}"
    if key == "updated" and finite:
        try:
            return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):
            return str(value)
    if key == "eta_seconds" and finite and 0 <= value < MAX_ETA_SECONDS:
        minutes, seconds = divmod(int(value), 60)
        return f"{minutes} min {seconds:02d} s"
    if isinstance(value, float) and finite:
        return f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
    return str(value)


ROWS: tuple[str, ...] = (
    TRAINED_ON,
    "state",
    "epoch",
    "epochs",
    "step",
    "world_size",
    "train_loss",
    "test_acc",
)
ROWS += ("images_per_second",)
ROWS += ("eta_seconds", "restarts", "updated")


def run_table(run: dict[str, Any]) -> Table:
    table = Table(title=shown(f"run {run['name']}"), title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value")
    figures = progress(run)
    for key in ROWS:
        table.add_row(key.removesuffix("_seconds").replace("_", " "), shown(_format(key, figures.get(key))))
    return table


def ranks_table(ranks: list[Rank]) -> Table:
    table = Table(title="ranks", title_justify="left")
    for column in ("ranks", "pod", "node", "phase", "restarts"):
        table.add_column(column)
    for r in ranks:
        table.add_row(*map(shown, (r.rank, r.pod, r.node, r.phase, r.restarts)))
    return table


def workloads_table(found: list[cluster.Workload]) -> Table:
    table = Table(title="StatefulSets and Jobs", title_justify="left")
    for column in ("kind", "name", "state"):
        table.add_column(column)
    for w in found:
        table.add_row(*map(shown, (w.kind, w.name, w.state)))
    return table


def show_cluster(args: argparse.Namespace, cfg: LabConfig) -> None:
    """The lab's part of a cluster the stack names by kubeconfig, through its API."""
    view = cluster.read(cfg)
    for line in view.gpu_lines:
        errors.print(f"[bold red]labctl:[/] {line}", soft_wrap=True)
    if view.ranks:
        console.print(ranks_table(view.ranks))
    if view.workloads:
        console.print(workloads_table(view.workloads))
    else:
        console.print(
            f"no StatefulSet or Job in namespace {cfg.namespace} of the cluster yet;"
            f" `pulumi up --stack {args.stack}` declares them",
            soft_wrap=True,
        )
    console.print(f"[yellow]run progress: {escape(unreadable_runs(cfg))}[/]", soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    run_option(args.run)
    cfg = None
    if args.runs_dir is None:
        cfg = load(args)
        if not cfg.bootstraps_hosts:
            show_cluster(args, cfg)
            return 0
        if cfg.installs_kubernetes:
            for line in gpu_node_lines(cfg, args.stack, args.stacks_dir):
                errors.print(f"[bold red]labctl:[/] {line}", soft_wrap=True)
            ranks = training_ranks(cfg, args.stack, args.stacks_dir)
            if ranks:
                console.print(ranks_table(ranks))
    source = runs_source(args)
    found = source.collect()
    print_problems(found)
    picked = pick_run(found, args.run, source.where, what_starts_a_run(args))
    live.show(args, cfg, picked)
    console.print(run_table(picked))
    return 0
