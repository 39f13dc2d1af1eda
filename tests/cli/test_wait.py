"""`labctl wait` on run folders the real trainer writes: a run followed while it trains exits 0 when
it completes, a failed run exits 1 with the trainer's own reason, a run that never appears times out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.cluster.build_context import build_context
from lab.cluster.training import run_name
from lab.config import load_stack
from lab.config import stack_file as stack_path
from tests.support.labctl import labctl
from tests.support.trainer_runs import TINY_NET, diverge_after_first_epoch, trainer_ok

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wait") / "data"
    trainer_ok("data", "synthetic", "--dir", folder, "--train", "512", "--test", "256")
    return folder


def _train(data: Path, runs: Path, name: str, *flags: str) -> list[str]:
    command = ["train", "--data", str(data), "--runs", str(runs), "--run-name", name, *TINY_NET, *flags]
    return [sys.executable, "-m", "trainer", *command]


def test_wait_follows_a_training_run_to_completion(data: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()  # the export's runs folder exists before any run does
    trainer = subprocess.Popen(_train(data, runs, "followed", "--epochs", "4"), stdout=subprocess.DEVNULL)
    try:
        result = labctl(
            "wait", "--stack", "example-cpu", "--runs-dir", runs, "--run", "followed", "--interval", "0.5"
        )
    finally:
        assert trainer.wait(timeout=300) == 0
    assert result.code == 0, result.err
    summary = json.loads((runs / "followed" / "summary.json").read_text())
    assert f"run followed is complete: best test accuracy {summary['best_test_acc']:.2%}" in result.out
    assert "epoch 4/4" in result.out and "restarts 0" in result.out and "img/s" in result.out


def test_wait_reports_a_failed_run_with_the_trainers_reason(data: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = subprocess.run(_train(data, runs, "diverged", "--epochs", "2"), capture_output=True, check=False)
    assert first.returncode == 0, first.stderr
    # Resumed after epoch 1 into NaN weights, the run diverges: the trainer records it as failed.
    diverge_after_first_epoch(runs / "diverged")
    second = subprocess.run(_train(data, runs, "diverged", "--epochs", "2"), capture_output=True)
    assert second.returncode != 0
    assert json.loads((runs / "diverged" / "status.json").read_text())["state"] == "failed"
    result = labctl(
        "wait", "--stack", "example-cpu", "--runs-dir", runs, "--run", "diverged",
        "--interval", "0.2", "--failed-after", "1",
    )  # fmt: skip
    assert result.code == 1, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labctl: run diverged failed at epoch"), result.err
    assert "training diverged" in lines[0] and "Traceback" not in result.err


def test_wait_names_the_run_the_stack_starts_and_gives_up_after_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    expected = run_name(load_stack("example-cpu"), build_context().tag)
    result = labctl(
        "wait",
        "--stack",
        "example-cpu",
        "--runs-dir",
        tmp_path / "runs",
        "--timeout",
        "1",
        "--interval",
        "0.2",
    )
    assert result.code == 1
    assert f"labctl: run {expected} did not finish within 1 s (last state: no run folder yet)" in result.err


@pytest.mark.parametrize("stack_file", [True, False], ids=["beside a stack file", "with no stack file"])
def test_wait_on_a_local_runs_folder_follows_its_newest_run_as_status_shows_it(
    trained_runs: Path, tmp_path: Path, stack_file: bool
) -> None:
    """What `labctl try` leaves is followed as `status --runs-dir` reads it: the stack file a
    newcomer made with `init` (stack `lab`) neither names the run nor is needed."""
    if stack_file:
        shutil.copy(stack_path("example-cpu"), tmp_path / "Pulumi.lab.yaml")
    runs = ("--runs-dir", trained_runs, "--stacks-dir", tmp_path)
    shown = labctl("status", *runs)
    assert shown.code == 0, shown.err
    result = labctl("wait", *runs, "--interval", "0.2", "--timeout", "20")
    assert result.code == 0, (result.out, result.err)
    (newest,) = re.findall(r"run (\S+)", shown.out)[:1]
    assert f"run {newest} is complete" in result.out, (shown.out, result.out)
