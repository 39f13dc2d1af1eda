"""The slow tier follows from what a test uses (tests/support/tiers.py), never from a mark by hand."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bootstrap.playbook import run_playbook
from tests.support.tiers import cost_of, costly

ROOT = Path(__file__).resolve().parents[1]


@costly("a pretend costly helper")
def _costly_helper() -> int:
    return 1


def _calls_it() -> int:
    return _costly_helper() + 1


def _calls_it_through_another() -> int:
    return _calls_it() * 2


def _cheap(run: int) -> int:
    """Names a local and an attribute like the costly helper's, and calls nothing costly."""
    _costly_helper = run
    return _costly_helper + len("x".join(["a"]))


def test_a_helper_reached_through_the_suites_own_functions_is_costly() -> None:
    assert cost_of(_costly_helper) == "a pretend costly helper"
    assert cost_of(_calls_it) == "a pretend costly helper"
    assert cost_of(_calls_it_through_another) == "a pretend costly helper"
    assert cost_of(lambda: _calls_it()) == "a pretend costly helper"


def test_names_that_only_look_alike_are_not_costly() -> None:
    assert cost_of(_cheap) is None
    assert cost_of(len) is None


def _runs_a_play() -> object:
    return run_playbook


def test_the_labs_own_costly_functions_are_found() -> None:
    assert cost_of(_runs_a_play) == "a real playbook run by ansible-runner"


PLANTED = """
import pytest

from tests.support.local_play import run_tasks
from tests.support.tiers import costly


@pytest.fixture
@costly("a pretend daemon")
def daemon():
    return 1


def _play():
    return run_tasks


def test_plain():
    pass


def test_plays():
    assert _play()


def test_uses_the_daemon(daemon):
    assert daemon
"""


@pytest.mark.parametrize(
    ("select", "expected"),
    [("not slow", ["test_plain"]), ("slow", ["test_plays", "test_uses_the_daemon"])],
)
def test_collection_sorts_planted_tests_into_tiers(tmp_path: Path, select: str, expected: list[str]) -> None:
    """The suite's own conftest and support on a planted test folder: the tiers follow the rule."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "tests" / "support").symlink_to(ROOT / "tests" / "support")
    planted = tmp_path / "tests" / "planted"
    planted.mkdir()
    (planted / "__init__.py").touch()
    (planted / "test_planted.py").write_text(PLANTED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", select],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert sorted(re.findall(r"::(test_\w+)", done.stdout)) == expected, done.stdout + done.stderr


def test_no_test_is_marked_slow_or_integration_by_hand() -> None:
    hand = re.compile(r"pytest\.mark\.(slow|integration)\b")
    written = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "tiers.py" and hand.search(path.read_text())
    ]
    assert written == []
