"""The slow tier, and the xdist groups of what tests share machine-wide, follow from what a test
uses (tests/support/tiers.py), never from a mark by hand."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bootstrap.playbook import run_playbook
from tests.support.tiers import TEST_MACHINES, cost_of, costly

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


def test_no_test_is_marked_slow_integration_or_grouped_by_hand() -> None:
    hand = re.compile(r"pytest\.mark\.(slow|integration|xdist_group)\b")
    written = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "tiers.py" and hand.search(path.read_text())
    ]
    assert written == []


PLANTED_SHARING = """
import pytest

from tests.support.tiers import costly


@costly("a pretend daemon on a fixed port", shares="pretend")
def _pretend_daemon():
    return 1


def _pretend():
    return _pretend_daemon()


@pytest.fixture
@costly("a pretend machine-wide folder", shares="other")
def other():
    return 1


def test_plain():
    pass


def test_logs_in(sshd):
    pass


def test_uses_pretend():
    assert _pretend()


def test_uses_other(other):
    pass


def test_uses_both(other):
    assert _pretend()
"""
# Records each collected test's xdist groups once the suite's own conftest has applied its rule.
RECORDER = """
import json

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    groups = {item.name: [m.args[0] for m in item.iter_markers("xdist_group")] for item in items}
    (config.rootpath / "groups.json").write_text(json.dumps(groups))
"""


def test_tests_sharing_something_machine_wide_share_an_xdist_group(tmp_path: Path) -> None:
    """The integration tier is one group; the test sshd and what a costly helper declares it shares
    are reached as costs are; two things one test uses together become one group."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "conftest.py").write_text(RECORDER)
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "tests" / "support").symlink_to(ROOT / "tests" / "support")
    for folder, text in (("planted", PLANTED_SHARING), ("integration", "def test_boots():\n    pass\n")):
        (tmp_path / "tests" / folder).mkdir()
        (tmp_path / "tests" / folder / "__init__.py").touch()
        (tmp_path / "tests" / folder / f"test_{folder}.py").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "groups.json").read_text()) == {
        "test_plain": [],
        "test_logs_in": ["sshd"],
        "test_uses_pretend": ["other+pretend"],
        "test_uses_other": ["other+pretend"],
        "test_uses_both": ["other+pretend"],
        "test_boots": [TEST_MACHINES],
    }


PLANTED_TURNS = """
import os

import pytest

from tests.support.tiers import costly


@pytest.fixture
@costly("a pretend machine-wide daemon", shares="pretend")
def daemon(request):
    yield
    (request.config.rootpath / "workers" / request.node.name).write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("n", range(6))
def test_shares(daemon, n):
    pass


@pytest.mark.parametrize("n", range(6))
def test_alone(n):
    pass
"""


def test_a_group_runs_on_one_worker_of_a_loadgroup_run(tmp_path: Path) -> None:
    """As scripts/test.sh runs the slow tier: the group reaches pytest-xdist's scheduler."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "workers").mkdir()
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "tests" / "support").symlink_to(ROOT / "tests" / "support")
    (tmp_path / "tests" / "planted").mkdir()
    (tmp_path / "tests" / "planted" / "__init__.py").touch()
    (tmp_path / "tests" / "planted" / "test_planted.py").write_text(PLANTED_TURNS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {path.name: path.read_text() for path in (tmp_path / "workers").iterdir()}
    assert len(workers) == 6 and len(set(workers.values())) == 1, workers
