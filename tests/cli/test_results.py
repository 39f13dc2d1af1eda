"""`labctl results` and `labctl status` on run folders the real trainer wrote, read from a local copy
and from the export over SSH; a missing cluster or run is one line that says what to do."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.cli.common.runsource import LocalRuns
from tests.support.labctl import assert_one_line_error, labctl, loopback_values, write_stack
from tests.support.sshd import SERVER, Sshd
from tests.support.trainer_runs import TINY_NET

pytestmark = pytest.mark.timeout(600)


def _summary(runs: Path, run: str) -> dict[str, float]:
    return json.loads((runs / run / "summary.json").read_text())


def _loopback_stack(sshd: Sshd, tmp_path: Path, export: Path) -> Path:
    stacks = tmp_path / "stacks"
    write_stack(stacks, "loop", loopback_values(sshd, export))
    return stacks


def test_results_lists_runs_and_the_sweep_leaderboard(trained_runs: Path) -> None:
    result = labctl("results", "--stack", "example-cpu", "--runs-dir", trained_runs)
    assert result.code == 0, result.err
    single = _summary(trained_runs, "single")
    row = next(line for line in result.out.splitlines() if "│ single " in line)
    assert f"{single['best_test_acc']:.2%}" in row and "complete" in row and "1 x gloo" in row
    # The leaderboard puts the better learning rate first, whatever its index.
    sets = [_summary(trained_runs, f"lrsweep/{i}") for i in (0, 1)]
    best = max(range(2), key=lambda i: sets[i]["best_test_acc"])
    board = [line for line in result.out.splitlines() if line.startswith("│ ") and "lr=" in line]
    assert len(board) == 2
    assert board[0].split("│")[2].strip() == str(best) and f"{sets[best]['best_test_acc']:.2%}" in board[0]
    for plot in ("single/curves.png", "lrsweep/0/curves.png", "lrsweep/sweep.png"):
        assert f"  {plot}" in result.out


def test_results_fetch_copies_results_and_plots_without_checkpoints(
    trained_runs: Path, tmp_path: Path
) -> None:
    result = labctl(
        "results", "--stack", "example-cpu", "--runs-dir", trained_runs, "--fetch", tmp_path / "copy"
    )
    assert result.code == 0, result.err
    copied = {
        p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file()
    }
    assert {
        "single/summary.json",
        "single/curves.png",
        "lrsweep/1/metrics.jsonl",
        "lrsweep/sweep.png",
    } <= copied
    assert not any("checkpoints" in p for p in copied)


def test_results_over_ssh_read_the_export_and_fetch_it(
    sshd: Sshd, trained_runs: Path, tmp_path: Path
) -> None:
    # The test sshd's "NFS server" keeps the runs folder at <exportPath>/runs, as the lab's export does.
    export = trained_runs.parent
    stacks = _loopback_stack(sshd, tmp_path, export)
    result = labctl("results", "--stack", "loop", "--stacks-dir", stacks, "--fetch", tmp_path / "fetched")
    assert result.code == 0, result.err
    assert f"plots under node-a:{export}/runs" in result.out

    def readable(root: Path) -> list[dict[str, object]]:
        return [
            {k: v for k, v in run.items() if k != "modified"} for run in LocalRuns(root).collect()["runs"]
        ]

    assert readable(tmp_path / "fetched") == readable(trained_runs)
    assert not list((tmp_path / "fetched").rglob("checkpoints"))


def test_results_with_no_runs_says_so(sshd: Sshd, tmp_path: Path) -> None:
    stacks = _loopback_stack(sshd, tmp_path, tmp_path / "empty-export")
    assert_one_line_error(
        labctl("results", "--stack", "loop", "--stacks-dir", stacks), "no runs under node-a:"
    )


def test_status_shows_the_latest_run(trained_runs: Path) -> None:
    result = labctl("status", "--stack", "example-cpu", "--runs-dir", trained_runs, "--run", "single")
    assert result.code == 0, result.err
    status = json.loads((trained_runs / "single" / "status.json").read_text())
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.out.splitlines()
        if "│" in line
    }
    assert rows["state"] == "complete" and rows["epoch"] == "2" and rows["epochs"] == "2"
    assert rows["test acc"] == f"{status['test_acc']:.2%}" and rows["restarts"] == "0"
    latest = labctl("status", "--stack", "example-cpu", "--runs-dir", trained_runs)
    assert "run lrsweep/1" in latest.out  # the last one the fixture trained


def test_status_names_an_unknown_run(trained_runs: Path) -> None:
    result = labctl("status", "--stack", "example-cpu", "--runs-dir", trained_runs, "--run", "nope")
    assert_one_line_error(result, "no run 'nope'", "single")


def test_status_without_a_cluster_is_one_line(sshd: Sshd, tmp_path: Path) -> None:
    stacks = _loopback_stack(sshd, tmp_path, tmp_path / "export")
    result = labctl("status", "--stack", "loop", "--stacks-dir", stacks)
    assert_one_line_error(
        result, f"no cluster on node-a ({SERVER}) yet", f"labctl hosts up --stack loop --stacks-dir {stacks}"
    )


def test_status_with_an_unreachable_server_is_one_line(sshd: Sshd, tmp_path: Path) -> None:
    values = {"nodes": [{"name": "far", "address": "127.0.0.3", "user": "root", "role": "server"}],
              "ssh": {"keyPath": str(sshd.key), "port": 9, "hostKeyPolicy": "off"}}  # fmt: skip
    write_stack(tmp_path, "far", values)
    result = labctl("status", "--stack", "far", "--stacks-dir", tmp_path)
    assert_one_line_error(result, "far (root@127.0.0.3, port 9): cannot log in over SSH")


def test_status_follows_a_run_in_progress(trained_runs: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    status_file = runs / "live" / "status.json"
    # Many epochs of the tiny recipe: the run is still going when status reads it.
    train = [sys.executable, "-m", "trainer", "train", "--data", trained_runs.parent / "data", "--runs", runs,
             "--run-name", "live", "--epochs", "500", *TINY_NET]  # fmt: skip
    trainer = subprocess.Popen(list(map(str, train)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _epoch_done(status_file):
            assert trainer.poll() is None and time.monotonic() < deadline, "the trainer did not get going"
            time.sleep(0.5)
        result = labctl("status", "--stack", "example-cpu", "--runs-dir", runs)
    finally:
        trainer.terminate()
        trainer.wait(timeout=60)
    assert result.code == 0, result.err
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.out.splitlines()
        if "│" in line
    }
    assert rows["state"] == "running" and rows["epochs"] == "500"
    assert re.fullmatch(r"\d+ min \d\d s", rows["eta"]) and rows["images per second"] != "-"


def _epoch_done(status_file: Path) -> bool:
    try:
        status = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return False
    return status.get("state") == "running" and status.get("epoch", 0) >= 1 and "eta_seconds" in status
