"""The operator's install, as docs/reproducibility.md gives it: a fresh virtual environment with the
operator's lock from PyPI and the project, no torch. labctl and every command's help run, the
Pulumi program's imports load, and the whole environment stays under 1.5 GB."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.cli.doctor.locks import OPERATOR_LOCK
from lab.paths import ROOT
from tests.support.labctl import commands
from tests.support.tiers import costly

MAX_BYTES = 1_500_000_000
# The orchestrator's packages beside what the Pulumi program (__main__.py) imports itself.
ORCHESTRATOR = ("import lab", "import lab.cluster", "import lab.bootstrap.resource", "import lab.cli")


def _pypi_only() -> dict[str, str]:
    """This machine's environment less its pip settings (local indexes, find-links) and PYTHONPATH,
    so the install reads what a user's machine reads: PyPI, and the lock's hashes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_pypi_only(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def program_imports() -> list[str]:
    """The Pulumi program's own import statements, as written in __main__.py."""
    tree = ast.parse((ROOT / "__main__.py").read_text())
    return [ast.unparse(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]


def size(root: Path) -> int:
    return sum(path.lstat().st_size for path in root.rglob("*") if not path.is_dir() or path.is_symlink())


@pytest.fixture
@costly("a package install from PyPI")
def operator_venv(tmp_path: Path) -> Path:
    """A fresh virtual environment with the operator's lock and the project, as the docs install it."""
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    # This environment's pip installs into the new one: no pip of its own to bootstrap first.
    pip = (sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--quiet")
    _run(*pip, "install", "--no-compile", "--require-hashes", "-r", OPERATOR_LOCK, cwd=tmp_path)
    _run(*pip, "install", "--no-compile", "--no-deps", "-e", ROOT, cwd=tmp_path)
    _run(*pip, "check", cwd=tmp_path)
    return venv


def test_the_operator_install_runs_labctl_and_the_program_imports_without_torch(
    operator_venv: Path, tmp_path: Path
) -> None:
    venv = operator_venv
    labctl = venv / "bin" / "labctl"
    assert "COMMAND" in _run(labctl, "--help", cwd=tmp_path)
    for command in commands():
        assert f"labctl {command}" in _run(labctl, command, "--help", cwd=tmp_path)

    script = "\n".join(
        [
            *ORCHESTRATOR,
            *program_imports(),
            "import importlib.util, sys",
            "assert 'torch' not in sys.modules, 'torch was imported'",
            "assert importlib.util.find_spec('torch') is None, 'torch is installed'",
        ]
    )
    _run(venv / "bin" / "python", "-c", script, cwd=tmp_path)
    assert size(venv) < MAX_BYTES, f"{size(venv) / 1e9:.2f} GB installed"


def test_the_program_imports_are_read_from_main() -> None:
    imports = program_imports()
    assert "import pulumi" in imports and any(line.startswith("from lab") for line in imports)
