"""Text that flags, environment variables and stack files hand the trainer and the lab, read
strictly: numbers in the ASCII digits 0-9 only, and run names that are one plain folder name.

Python's `int()`, `float()`, `str.isdigit()` and `re`'s `\\d` accept every Unicode digit: `int("١٢")`
is 12 and `"²".isdigit()` is true, while the shell, Kubernetes, YAML and Go read such text as
text. A value that passed here and meant something else there would break a machine later, so
numbers are read through this module (and patterns spell digits `[0-9]`).

Standard library only: the trainer image and `labctl` both import it.
"""

from __future__ import annotations

import re

# Decimal integers and numbers as C, Go, YAML 1.2 and JSON all read them, with an optional sign.
INTEGER = re.compile(r"[-+]?[0-9]+")
NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
DIGITS = re.compile(r"[0-9]+")
# A run's folder under the runs volume: one name of the portable filename characters
# (POSIX 3.282), not hidden, never `.` or `..`, short enough for any file system.
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
RUN_NAME_RULE = (
    "1 to 100 letters, digits, '.', '_' and '-', not starting with '.' or '-' (one folder name,"
    " no '/', no absolute path)"
)
# Blanks around a number on the command line or in an environment variable are ignored.
BLANKS = " \t\r\n"
# How much of a value a message echoes: enough to know it again, never a screen of digits.
EXCERPT = 40


def excerpt(text: str) -> str:
    """`text` as a message shows it: whole when short, else its start and its length."""
    return text if len(text) <= EXCERPT else f"{text[:EXCERPT]}... ({len(text)} characters)"


def is_digits(text: str) -> bool:
    """Whether `text` is a non-negative integer in the digits 0-9 (unlike `str.isdigit`)."""
    return DIGITS.fullmatch(text) is not None


def integer(text: str) -> int:
    """`text` as an integer written in the digits 0-9; ValueError otherwise."""
    stripped = text.strip(BLANKS)
    if not INTEGER.fullmatch(stripped):
        raise ValueError(f"{text!r} is not an integer written in the digits 0-9")
    return int(stripped)


def number(text: str) -> float:
    """`text` as a decimal number written in the digits 0-9 (no inf or nan); ValueError otherwise."""
    stripped = text.strip(BLANKS)
    if not NUMBER.fullmatch(stripped):
        raise ValueError(f"{text!r} is not a number written in the digits 0-9")
    return float(stripped)


def run_name(text: str) -> str:
    """`text` when it names one run folder; ValueError naming the rule otherwise."""
    if not RUN_NAME.fullmatch(text) or text in {".", ".."}:
        shown = repr(text[:40] + ("..." if len(text) > 40 else ""))
        raise ValueError(f"{shown} is not a run name: use {RUN_NAME_RULE}")
    return text
