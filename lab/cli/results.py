"""`labctl results`: finished runs and sweeps, the sweep leaderboard, where the plots are, and a
copy of it all on the operator's machine with --fetch."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from lab.cli.common.console import CliError, console, shown
from lab.cli.common.runsource import print_problems, runs_source
from lab.cli.common.stackarg import add_stack_option
from trainer.contract import CIFAR10, GENERATED, TRAINED_ON
from trainer.records import report


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "results",
        help="list runs and sweeps with their best accuracy; fetch results and plots",
        description="Runs and sweeps with their best test accuracy and time, each sweep's leaderboard"
        " (best first) and where the plots are, read from the NFS export over SSH or a local copy.",
    )
    add_stack_option(parser)
    parser.add_argument(
        "--runs-dir", type=Path, help="read a local copy of the runs folder instead (no stack file needed)"
    )
    parser.add_argument(
        "--fetch", type=Path, metavar="DIR", help="copy results and plots (no checkpoints) to DIR"
    )
    parser.set_defaults(handler=run)


def _number(value: Any) -> float | None:
    """A figure a run folder holds, when it is a finite number (the folder is anyone's to write)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _acc(value: Any) -> str:
    number = _number(value)
    return f"{number:.2%}" if number is not None else "-"


def _seconds(value: Any) -> str:
    number = _number(value)
    return f"{number:,.1f} s" if number is not None else "-"


def _best(run: dict[str, Any]) -> float:
    found = _number((run.get("summary") or {}).get("best_test_acc"))
    return -1.0 if found is None else found


def trained_on(run: dict[str, Any]) -> str:
    """What the run trained on, from its summary, status or last metrics line; a value the trainer
    never writes is shown as such."""
    for record in ("summary", "status", "last_metrics"):
        found = (run.get(record) or {}).get(TRAINED_ON)
        if found:
            return (
                str(found) if found in (CIFAR10, GENERATED) else f"{found!s} (not a value the trainer writes)"
            )
    return "not recorded"


def _hyperparameters(summary: dict[str, Any]) -> dict[str, Any]:
    found = summary.get("hyperparameters")
    return found if isinstance(found, dict) else {}


def _to_target(run: dict[str, Any]) -> str:
    """The time to the target accuracy, a CIFAR-10 figure: shown for runs on CIFAR-10 only."""
    if trained_on(run) != CIFAR10:
        return "- (not CIFAR-10)"
    return _seconds((run.get("summary") or {}).get("seconds_to_target"))


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="runs", title_justify="left")
    columns = ("run", "trained on", "state", "best acc", "final acc", "epochs", "ranks", "wall time")
    for column in (*columns, "to target"):
        table.add_column(column)
    for r in runs:
        s = r.get("summary") or {}
        state = (r.get("status") or {}).get("state") or ("complete" if s else "running")
        ranks = f"{s.get('world_size', '-')} x {s.get('backend', '-')}" if s else "-"
        cells = (
            r["name"],
            trained_on(r),
            state,
            _acc(s.get("best_test_acc")),
            _acc(s.get("final_test_acc")),
            s.get("epochs", r["epochs_logged"]),
            ranks,
            _seconds(s.get("wall_seconds")),
            _to_target(r),
        )
        table.add_row(*map(shown, cells))
    return table


def leaderboard(sweep: dict[str, Any]) -> Table:
    """A sweep's members, best test accuracy first; unfinished members last."""
    table = Table(title=f"sweep {sweep['name']} leaderboard", title_justify="left")
    for column in ("place", "index", "trained on", "hyperparameters", "best acc", "wall time", "to target"):
        table.add_column(column)
    members = sorted(sweep["members"], key=_best, reverse=True)
    finished = [{"hyperparameters": _hyperparameters(m["summary"])} for m in members if m.get("summary")]
    # The same columns as `python -m trainer sweep report`: the hyperparameters that differ.
    try:
        columns = report.varied(finished) if finished else []
    except (KeyError, TypeError, ValueError):
        columns = []  # summaries that do not share their hyperparameters' names
    for place, m in enumerate(members, start=1):
        s = m.get("summary") or {}
        chosen = _hyperparameters(s)
        params = ", ".join(f"{k}={chosen[k]}" for k in columns if k in chosen)
        cells = (
            place,
            m["name"],
            trained_on(m),
            params or "-",
            _acc(s.get("best_test_acc")),
            _seconds(s.get("wall_seconds")),
            _to_target(m),
        )
        table.add_row(*map(shown, cells))
    return table


def plots(found: dict[str, Any]) -> list[str]:
    runs = found["runs"] + [m for s in found["sweeps"] for m in s["members"]]
    return sorted([p for r in runs for p in r["plots"]] + [p for s in found["sweeps"] for p in s["plots"]])


def run(args: argparse.Namespace) -> int:
    source = runs_source(args)
    found = source.collect()
    print_problems(found)
    if not found["runs"] and not found["sweeps"]:
        raise CliError(f"no runs under {source.where} yet; `pulumi up --stack {args.stack}` starts training")
    if found["runs"]:
        console.print(runs_table(found["runs"]))
    for sweep in found["sweeps"]:
        console.print(leaderboard(sweep))
    console.print(shown(f"plots under {source.where}:"))
    for path in plots(found):
        console.print(shown(f"  {path}"))
    if args.fetch:
        left = source.fetch(args.fetch)
        print_problems({"problems": left}, set(found.get("problems") or []))
        console.print(shown(f"copied results and plots to {args.fetch}"))
    return 0
