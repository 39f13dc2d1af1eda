"""A run writes its time per test folder (tests/support/durations.py), and the totals add up to
the durations pytest itself reports, test by test."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.durations import HEADING, folder_of

ROOT = Path(__file__).resolve().parents[1]

# Each folder's time is in a different phase: a fixture's setup, a test's call, a teardown.
PLANTED = {
    "alpha/test_alpha.py": """
import time

import pytest


@pytest.fixture
def slow_setup():
    time.sleep(0.3)


def test_one(slow_setup):
    pass


def test_two(slow_setup):
    time.sleep(0.1)
""",
    "beta/deeper/test_beta.py": """
import time

import pytest


@pytest.fixture
def slow_teardown():
    yield
    time.sleep(0.2)


def test_three(slow_teardown):
    pass
""",
    "test_top.py": """
def test_four():
    pass
""",
}
PHASE = re.compile(r"^(\d+\.\d+)s (?:setup|call|teardown)\s+(\S+)$", re.MULTILINE)
TOTAL = re.compile(r"^\s*(\d+\.\d+)s  (\S.*)$", re.MULTILINE)


def test_a_folder_is_the_top_level_part_of_tests() -> None:
    assert folder_of("tests/roles/test_a.py::test_b[x/y]") == "tests/roles/"
    assert folder_of("tests/roles/deeper/test_a.py::test_b") == "tests/roles/"
    assert folder_of("tests/test_locks.py::test_a") == "tests/test_locks.py"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two workers"])
def test_a_run_ends_with_totals_per_folder_that_add_up(tmp_path: Path, workers: list[str]) -> None:
    """The suite's own conftest on planted tests; pytest's --durations=0 -vv lists every phase."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "tests" / "support").symlink_to(ROOT / "tests" / "support")
    for name, text in PLANTED.items():
        path = tmp_path / "tests" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=0", "-vv", *workers],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    phases, totals_part = done.stdout.split(f" {HEADING} ")
    listed: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for seconds, nodeid in PHASE.findall(phases):
        listed[folder_of(nodeid)] += float(seconds)
        count[folder_of(nodeid)] += 1
    totals = {name: float(seconds) for seconds, name in TOTAL.findall(totals_part)}
    everything = totals.pop("in all")
    assert sorted(totals) == ["tests/alpha/", "tests/beta/", "tests/test_top.py"], done.stdout
    # pytest writes each phase to two decimals, so each listed phase may be off by half a hundredth.
    for folder, seconds in totals.items():
        assert abs(seconds - listed[folder]) <= 0.005 * count[folder] + 0.01, (folder, done.stdout)
    assert totals["tests/alpha/"] >= 0.7 and totals["tests/beta/"] >= 0.2, done.stdout
    assert abs(everything - sum(totals.values())) <= 0.01 * len(totals), done.stdout
