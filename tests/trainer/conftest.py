"""Fixtures for the trainer tests: a small synthetic dataset, a reference run, and background
processes cleaned up after a failed test. Their helpers are tests/support/trainer_runs.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.trainer_runs import SMALL, run, stop, torchrun, trainer


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    result = run(
        trainer("data", "synthetic", "--dir", root, "--train", "1536", "--test", "256", "--seed", "1")
    )
    assert result.returncode == 0, result.stderr
    return root


@pytest.fixture(scope="session")
def reference(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An undisturbed 2-rank run of SMALL under torchrun: the figures the disturbed runs must match."""
    runs = tmp_path_factory.mktemp("runs")
    result = run(torchrun(2, "train", "--data", dataset, "--runs", runs, "--run-name", "reference", *SMALL))
    assert result.returncode == 0, result.stdout + result.stderr
    return runs / "reference"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Background processes a test starts; killed if the test fails before they end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        stop(process)
