"""What `labctl` and the docs generator load: the operator's commands stay clear of the trainer's
torch and of pulumi_kubernetes (which only the Pulumi program needs), and lab.config.reference of the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.labctl import commands
from tests.support.tiers import costly

ROOT = Path(__file__).resolve().parents[2]
# torch is the trainer's, not in an operator's install; pulumi_kubernetes takes a second to load.
HEAVY = ("torch", "pulumi_kubernetes")


@costly("a fresh interpreter tracing its imports")
def imported(*args: str) -> set[str]:
    """Every module a fresh interpreter imports for `python ARGS`, read from -X importtime."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[-1].strip() for line in lines} - {"imported package"}


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


@pytest.mark.parametrize("command", ["", *commands()])
def test_help_of_every_command_loads_neither_torch_nor_pulumi_kubernetes(command: str) -> None:
    modules = imported("-m", "lab.cli", *command.split(), "--help")
    assert "lab.cli" in modules
    assert heavy(modules) == set(), f"`labctl {command} --help` imports {sorted(heavy(modules))}"


def test_the_check_sees_a_heavy_import() -> None:
    assert heavy(imported("-c", "import lab.cluster.component")) >= {"pulumi_kubernetes"}


def test_the_docs_generator_does_not_load_the_cli() -> None:
    modules = imported("-c", "import lab.config.reference")
    assert "lab.config.reference" in modules
    assert {m for m in modules if m.startswith("lab.cli")} == set()
