"""What every subcommand prints through: one rich console, findings tables and one-line errors."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rich.console import Console
from rich.table import Table

from lab.config import ConfigError

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


class CliError(RuntimeError):
    """Bad input or a missing precondition; the message is one line that says what to do."""


class Level(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


STYLE = {Level.OK: "green", Level.WARNING: "yellow", Level.ERROR: "bold red"}


@dataclass(frozen=True)
class Finding:
    """One check's outcome: where it ran, what it found and, unless ok, how to fix it."""

    where: str
    check: str
    level: Level
    detail: str
    fix: str = ""


def findings_table(title: str, findings: list[Finding]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("where", "check", "result", "detail", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        table.add_row(f.where, f.check, f"[{STYLE[f.level]}]{f.level}[/]", f.detail, f.fix)
    return table


def one_line(err: Exception) -> str:
    """An error as the single line the operator sees (a ConfigError's problems joined by '; ')."""
    if isinstance(err, ConfigError):
        return f"{err.source}: {'; '.join(err.problems)}"
    return " ".join(str(err).split())


def print_error(err: Exception) -> None:
    errors.print(f"[bold red]labctl:[/] {one_line(err)}", soft_wrap=True)
