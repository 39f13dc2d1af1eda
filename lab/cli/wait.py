"""`labctl wait`: follow a training run to its end with a progress bar; exit 0 when it completes,
1 with the reason when it fails.

It reads what `labctl status` reads (the run's status.json and metrics.jsonl, on the NFS export
over SSH or in a local copy), so `pulumi up --stack lab && labctl wait --stack lab` is one command
from two machines to a trained model.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from lab.cli.common import stackcluster
from lab.cli.common.console import CliError, console, errors
from lab.cli.common.runsource import RunsSource, print_problems, run_option, runs_source
from lab.cli.common.stackarg import DEFAULT_STACK, add_stack_option, flags, load
from lab.cli.status import MAX_ETA_SECONDS, all_runs, progress
from lab.cluster.build_context import build_context
from lab.config import LabConfig
from lab.remote.gpu_nodes import gpu_node_lines
from trainer.inputs import number
from trainer.records.runfolders import printable

# A failed status is final once nothing rewrote it for this long: torchrun restarts a failed
# worker group inside the pod within seconds, and the restarted rank 0 writes "running" again.
FAILED_AFTER_SECONDS = 120.0
EXIT_FAILED = 1


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "wait",
        help="follow the training run to its end with a progress bar",
        description="Follow the stack's training run (or --run) until it is complete (exit 0) or has"
        " failed (exit 1, with the reason), from its status.json and metrics.jsonl on the NFS export.",
    )
    add_stack_option(parser)
    # Unset unless given: with --runs-dir and no --stack, no stack file is read (as `status` does).
    parser.set_defaults(stack=None)
    parser.add_argument(
        "--run",
        help="run folder name (default: the run the stack's inputs give; with --runs-dir and no"
        " --stack, the most recently updated run there)",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        help="follow a run in a local copy of the runs folder instead (no stack file needed without --stack)",
    )
    parser.add_argument("--interval", type=number, default=10.0, help="seconds between reads (default: 10)")
    parser.add_argument("--timeout", type=number, help="give up after this many seconds (default: never)")
    parser.add_argument(
        "--failed-after",
        type=number,
        default=FAILED_AFTER_SECONDS,
        help="seconds a failed status must stand before it counts, so a restart can recover"
        " (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def find(found: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((r for r in all_runs(found) if name in {r["name"], r["path"]}), None)


def _finite(value: Any) -> float | None:
    """A figure of status.json when it is a finite number (the run folder is anyone's to write)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _plain(value: Any) -> str:
    """Text from a run folder for the progress line's markup: shown as it is, escapes visible."""
    return escape(printable(str(value)))


def _fields(figures: dict[str, Any]) -> dict[str, Any]:
    def number(key: str, text: str) -> str:
        value = _finite(figures.get(key))
        return text.format(value) if value is not None else "-"

    eta = _finite(figures.get("eta_seconds"))
    eta = eta if eta is not None and 0 <= eta < MAX_ETA_SECONDS else None
    return {
        "epoch": _plain(f"{figures.get('epoch') or 0}/{figures.get('epochs') or '?'}"),
        "acc": number("test_acc", "{:.2%}"),
        "speed": number("images_per_second", "{:,.0f}"),
        "eta": f"{int(eta) // 60}m{int(eta) % 60:02d}s" if eta is not None else "-",
        "restarts": _plain(figures.get("restarts") or 0),
        "state": _plain(figures.get("state", "unknown")),
    }


class Follower:
    """One run's progress as read at each poll, with the rule for when a failure is final.

    Without a name it follows the run that was most recently updated when one first appears.
    """

    def __init__(self, source: RunsSource, name: str | None, failed_after: float) -> None:
        self.source, self.name, self.failed_after = source, name, failed_after
        self.failed_since: tuple[Any, float] | None = None  # (status.json's "updated", first seen)
        self.problems_shown: set[str] = set()

    @property
    def label(self) -> str:
        return self.name or f"the newest run under {self.source.where}"

    def poll(self) -> tuple[str, dict[str, Any]]:
        """("absent" | "running" | "complete" | "failed", the merged figures)."""
        collected = self.source.collect()
        print_problems(collected, self.problems_shown)
        if self.name is None and all_runs(collected):
            self.name = max(all_runs(collected), key=lambda r: r["modified"])["path"]
        found = find(collected, self.name) if self.name is not None else None
        if found is None:
            return "absent", {}
        figures = progress(found)
        state = figures.get("state")
        if state == "complete":
            return "complete", figures
        if state != "failed":
            self.failed_since = None
            return "running", figures
        updated = figures.get("updated")
        if self.failed_since is None or self.failed_since[0] != updated:
            self.failed_since = (updated, time.monotonic())
        final = time.monotonic() - self.failed_since[1] >= self.failed_after
        return ("failed" if final else "running"), figures


def follow(follower: Follower, interval: float, timeout: float | None, status_flags: str) -> int:
    began = time.monotonic()
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn(
            "epoch {task.fields[epoch]}  acc {task.fields[acc]}  {task.fields[speed]} img/s"
            "  eta {task.fields[eta]}  restarts {task.fields[restarts]}  {task.fields[state]}"
        ),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(_plain(follower.label), total=None, **_fields({"state": "waiting for the run"}))
        while True:
            state, figures = follower.poll()
            if figures:
                total, done = _finite(figures.get("epochs")), _finite(figures.get("epoch"))
                bar.update(
                    task,
                    description=_plain(follower.label),
                    total=total if total is not None and total > 0 else None,
                    completed=max(done or 0.0, 0.0),
                    **_fields(figures),
                )
            if state in {"complete", "failed"}:
                break
            if timeout is not None and time.monotonic() - began > timeout:
                state = "timeout"
                break
            time.sleep(interval)
    label = _plain(follower.label)
    if state == "complete":
        best, final = _finite(figures.get("best_test_acc")), _finite(figures.get("final_test_acc"))
        console.print(
            f"run {label} is complete: best test accuracy {best:.2%}, final {final:.2%}"
            if best is not None and final is not None
            else f"run {label} is complete"
        )
        return 0
    if state == "failed":
        reason = _plain(figures.get("error") or "no error recorded")
        errors.print(
            f"[bold red]labctl:[/] run {label} failed at epoch {_plain(figures.get('epoch'))}: {reason};"
            " the ranks' logs say more (`pulumi stack output follow`)",
            soft_wrap=True,
        )
        return EXIT_FAILED
    errors.print(
        f"[bold red]labctl:[/] run {label} did not finish within {timeout:.0f} s"
        f" (last state: {_plain(figures.get('state', 'no run folder yet'))}); `labctl status {status_flags}`"
        " shows where it stands",
        soft_wrap=True,
    )
    return EXIT_FAILED


def _gpu_lines(cfg: LabConfig, stack: str, stacks_dir: Path) -> list[str]:
    """The nodes whose allocatable GPUs are not the stack's: as the cluster's API answers on a
    stack that names its kubeconfig, else as the server's kubectl lists them over SSH."""
    if cfg.bootstraps_hosts:
        return gpu_node_lines(cfg, stack, stacks_dir)
    return stackcluster.gpu_lines(cfg)


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0 or (args.timeout is not None and args.timeout <= 0) or args.failed_after < 0:
        raise CliError("--interval and --timeout must be above 0 and --failed-after at least 0")
    name = run_option(args.run)
    stack: str = args.stack or DEFAULT_STACK
    if args.runs_dir is None or args.stack is not None:
        args.stack = stack
        cfg = load(args)
        # The name `pulumi up` gives the run from the same stack and the same checkout.
        # Imported here: lab.cluster declares objects through pulumi_kubernetes, which `labctl`
        # loads only where it must.
        from lab.cluster.training import run_name

        name = name or run_name(cfg, build_context().tag)
    # Ranks that ask for GPUs no node offers never start: say so instead of waiting forever.
    gpu_lines = [] if args.runs_dir is not None else _gpu_lines(cfg, stack, args.stacks_dir)
    for line in gpu_lines:
        errors.print(f"[bold red]labctl:[/] {line}", soft_wrap=True)
    if gpu_lines:
        return EXIT_FAILED
    source = runs_source(args)
    where = f"--runs-dir {args.runs_dir}" if args.runs_dir is not None else flags(args)
    return follow(Follower(source, name, args.failed_after), args.interval, args.timeout, where)
