"""What every subcommand prints through: one rich console, findings tables and one-line errors."""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass
from enum import StrEnum

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from lab.config import ConfigError
from trainer.records.runfolders import printable

# Piped or redirected output has no terminal to fit: rich would fold every table to 80 columns.
PIPED_WIDTH = 240


def _width() -> int | None:
    """The terminal's width (rich finds it), COLUMNS when set, else room for whole rows."""
    return None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH


console = Console(highlight=False, width=_width())
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


def findings_list(findings: list[Finding], width: int) -> list[Text]:
    """The findings a paragraph each, wrapped between words to `width` (a word longer than the
    line stays whole on a line of its own), for a terminal too narrow for the table."""
    indent = " " * (max(len(level) for level in Level) + 1)
    lines = []
    for f in findings:
        paragraphs = [f"{f.where}, {f.check}: {f.detail}"] + ([f"fix: {f.fix}"] if f.fix else [])
        wrapped = [
            line
            for paragraph in paragraphs
            for line in textwrap.wrap(
                paragraph, width - len(indent), break_long_words=False, break_on_hyphens=False
            )
        ]
        lines.append(Text.assemble((f"{f.level:<{len(indent)}}", STYLE[f.level]), wrapped[0]))
        lines += [Text(indent + line) for line in wrapped[1:]]
    return lines


def print_findings(title: str, findings: list[Finding]) -> None:
    """A table where each column is wide enough for its longest word, else a list: a table
    folded to fit cuts addresses, paths and URLs in the middle."""
    table = findings_table(title, findings)
    unbounded = console.options.update_width(sys.maxsize)
    if Measurement.get(console, unbounded, table).minimum <= console.width:
        console.print(table)
        return
    console.print(title)
    for line in findings_list(findings, console.width):
        console.print(line, soft_wrap=True)


def plural(count: int, word: str, many: str = "") -> str:
    """`1 warning`, `2 warnings`; `many` for words that take more than an s."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def one_line(err: Exception) -> str:
    """An error as the single line the operator sees (a ConfigError's problems joined by '; ')."""
    if isinstance(err, ConfigError):
        return f"{err.source}: {'; '.join(err.problems)}"
    return " ".join(str(err).split())


def shown(value: object) -> Text:
    """`value` as a table cell or line shows it: as plain text (no rich markup), with control
    characters written as visible escapes: for what a run folder, a node or a stack file holds."""
    return Text(printable(str(value)))


def print_error(err: Exception) -> None:
    # The message may quote what a stack file or a run folder holds: never markup, never escapes.
    errors.print(f"[bold red]labctl:[/] {escape(printable(one_line(err)))}", soft_wrap=True)
