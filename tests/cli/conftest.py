"""Fixtures for the CLI tests: a runs folder the real trainer wrote. `labctl` as the operator runs
it and the stack files that point at the test sshd are tests/support/labctl.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trainer_runs import TINY_NET, trainer_ok


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder written by the real trainer: one run and a two-set learning-rate sweep.

    Synthetic CIFAR-format data and a narrow network keep it to seconds on two cores.
    """
    base = tmp_path_factory.mktemp("trainer")
    data, runs = base / "data", base / "runs"
    trainer_ok("data", "synthetic", "--dir", data, "--train", "512", "--test", "256")
    trainer_ok("train", "--data", data, "--runs", runs, "--run-name", "single", "--epochs", "2", *TINY_NET)
    (base / "space.json").write_text('{"strategy": "grid", "parameters": {"lr": [0.02, 1.5]}}')
    trainer_ok("sweep", "generate", "--space", base / "space.json", "--out", base / "sweep.json")
    for index in ("0", "1"):
        sweep = ("--run-name", "lrsweep", "--sweep", base / "sweep.json", "--index", index)
        trainer_ok("train", "--data", data, "--runs", runs, *sweep, "--epochs", "2", *TINY_NET)
    trainer_ok("sweep", "report", "--dir", runs / "lrsweep", "--plot", runs / "lrsweep" / "sweep.png")
    return runs
