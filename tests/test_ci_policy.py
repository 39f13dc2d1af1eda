"""The CI policy in conftest.py turns a skipped test into a failed run when CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\n"
        "def test_skips():\n    pytest.skip('nothing to check here')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_skip_fails_the_run_in_ci(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "test_one.py::test_skips: Skipped: nothing to check here" in result.stdout


def test_a_skip_is_allowed_outside_ci(tmp_path: Path) -> None:
    result = _pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped" in result.stdout


def test_ci_runs_every_test_the_fast_loop_leaves_out() -> None:
    """`.ci/run` ends with the README's test command as it is: no `--fast`, no marker selection,
    here or in pytest's own options."""
    lines = (ROOT / ".ci/run").read_text().splitlines()
    commands = [line.split() for line in lines if line.startswith("scripts/")]
    assert commands[-1] == ["scripts/test.sh"], commands
    readme = (ROOT / "README.md").read_text()
    assert "scripts/test.sh               # linters and the whole test suite" in readme
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m" not in options["addopts"].split(), options["addopts"]
