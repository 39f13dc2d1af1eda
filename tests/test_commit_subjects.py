"""Each commit after BASE has a subject of at most 72 characters (what `git log --oneline`, a
terminal and a mail subject show whole). The commits before BASE keep the subjects they have."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The last commit whose subject was not held to the rule.
BASE = "7b0d98702accdfdd57f839eb09bf7b28db26102e"
LONGEST = 72


def too_long(subjects: list[str]) -> list[str]:
    return [f"{len(s)} characters: {s}" for s in subjects if len(s) > LONGEST]


def _subjects_after_base() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no commits to read")
    git = ["git", "-C", str(ROOT)]
    found = subprocess.run([*git, "cat-file", "-e", f"{BASE}^{{commit}}"], capture_output=True, check=False)
    has_base = found.returncode == 0
    # A shallow clone that stops after the base holds only commits made after it: check them all.
    span = f"{BASE}..HEAD" if has_base else "HEAD"
    log = subprocess.run([*git, "log", "--format=%s", span], capture_output=True, text=True, check=False)
    assert log.returncode == 0, f"git log {span} failed: {log.stderr.strip()}"
    return log.stdout.splitlines()


def test_subjects_after_the_base_fit_72_characters() -> None:
    assert not too_long(_subjects_after_base())


def test_a_long_subject_is_named() -> None:
    long = "x" * 73
    assert too_long(["Short subject", long]) == [f"73 characters: {long}"]
