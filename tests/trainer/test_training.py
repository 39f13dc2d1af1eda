"""Real DDP training under torchrun on CPU: outputs, 1-rank/2-rank equivalence, kill -9, SIGTERM."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest
import torch

from tests.support.processes import children
from tests.support.trainer_runs import (
    ROOT,
    SMALL,
    epochs_logged,
    read_json,
    run,
    start,
    strict_json,
    torchrun,
    trainer,
    wait_for,
)
from trainer.records import checkpoint


def _metrics(run_dir: Path) -> list[dict]:
    return [strict_json(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _final(run_dir: Path) -> tuple[float, float]:
    summary = read_json(run_dir / "summary.json")
    return summary["final_test_acc"], summary["final_test_loss"]


# Rank 0's curves made slower than the collective timeout below, in the real worker processes.
SLOW_CURVES = """
import time
from trainer.records import plots
_curves = plots.curves
def curves(*args, **kwargs):
    time.sleep(25)
    return _curves(*args, **kwargs)
plots.curves = curves
"""


def test_a_slow_rank_0_write_holds_no_peer_at_the_final_barrier(dataset: Path, tmp_path: Path) -> None:
    """Rank 0 writes its summary and plots after the ranks have left the group: on a new machine
    matplotlib's first import (its font cache) can outlast the collective timeout that the other
    ranks would otherwise spend waiting for rank 0 at the final barrier."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_CURVES)
    flags = [*SMALL, "--epochs", "1", "--timeout-seconds", "15"]
    result = run(
        torchrun(2, "train", "--data", dataset, "--runs", tmp_path, "--run-name", "slow", *flags),
        PYTHONPATH=f"{hooks}:{ROOT}",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert read_json(tmp_path / "slow" / "status.json")["state"] == "complete"
    assert (tmp_path / "slow" / "curves.png").is_file()


def test_two_ranks_write_every_output_with_sane_contents(reference: Path) -> None:
    lines = _metrics(reference)
    assert [line["epoch"] for line in lines] == [1, 2, 3]
    assert [line["step"] for line in lines] == [12, 24, 36]
    for line in lines:
        assert set(line) >= {
            "train_loss",
            "train_acc",
            "test_loss",
            "test_acc",
            "lr",
            "epoch_seconds",
            "images_per_second",
        }
        assert 0 <= line["test_acc"] <= 1 and line["images_per_second"] > 0 and line["restarts"] == 0
    assert lines[-1]["train_loss"] < lines[0]["train_loss"], "training did not lower the loss"
    summary = read_json(reference / "summary.json")
    assert summary["world_size"] == 2 and summary["backend"] == "gloo" and len(summary["devices"]) == 2
    assert summary["final_test_acc"] > 0.5, "a learnable synthetic set should be learnt"
    assert summary["best_test_acc"] == max([summary["final_test_acc"], *(line["test_acc"] for line in lines)])
    assert summary["hyperparameters"]["lr"] == 1.5, "no --lr: the airbench recipe's rate"
    assert summary["torch_version"] == torch.__version__ and len(summary["code_hash"]) == 16
    status = read_json(reference / "status.json")
    assert status["state"] == "complete" and status["epoch"] == status["epochs"] == 3
    assert status["world_size"] == status["rank_count"] == 2
    assert (reference / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pointed = read_json(reference / "checkpoints" / "latest")["file"]
    assert pointed == "ckpt-000000036.pt"
    assert len(list((reference / "checkpoints").glob("ckpt-*.pt"))) == 3, "--checkpoint-keep defaults to 3"


def _parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    path = checkpoint.latest_verified(run_dir / "checkpoints")
    assert path is not None
    state = torch.load(path, weights_only=True)["model"]
    return {name: value for name, value in state.items() if "num_batches" not in name}


def test_two_ranks_match_one_rank_with_the_same_global_batch(dataset: Path, tmp_path: Path) -> None:
    """BatchNorm takes its statistics over the global batch (the default): two ranks of 64 images
    train what one rank of 128 trains, running statistics included, to float rounding. With each
    rank's own statistics (`--batchnorm rank`) two ranks are one rank accumulating two halves.

    At a rate of 0.2: at the recipe's 1.5 (its BatchNorm biases at 96) this small net's 12 steps
    grow rounding (the global statistics sum in another order than one rank's) from 1e-7 after
    one step to 1e-2 (measured); `--batchnorm rank` and accumulation sum the same numbers alike.
    """
    flags = [
        "--data",
        dataset,
        "--runs",
        tmp_path,
        "--width",
        "8",
        "--batch-size",
        "128",
        "--epochs",
        "1",
        "--tta",
        "0",
        "--lr",
        "0.2",
    ]
    results = {
        name: run(command)
        for name, command in {
            "two": torchrun(2, "train", *flags, "--run-name", "two"),
            "one": trainer("train", *flags, "--run-name", "one"),
            "two-own": torchrun(2, "train", *flags, "--run-name", "two-own", "--batchnorm", "rank"),
            "one-halves": trainer("train", *flags, "--run-name", "one-halves", "--accumulate", "2"),
        }.items()
    }
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
    two, one = _parameters(tmp_path / "two"), _parameters(tmp_path / "one")
    own, halves = _parameters(tmp_path / "two-own"), _parameters(tmp_path / "one-halves")
    assert two.keys() == one.keys()
    for name in two:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=f"{name} differs")
        if "running" not in name:  # each rank's own statistics: rank 0's are kept, accumulation all parts'
            torch.testing.assert_close(own[name], halves[name], rtol=1e-4, atol=1e-5, msg=f"{name} differs")
    # The comparison can fail: each rank's own statistics are over 64 images, not 128.
    assert any(not torch.allclose(own[name], one[name], rtol=1e-4, atol=1e-5) for name in one)


def test_kill_9_of_one_rank_restarts_and_ends_with_the_undisturbed_figures(
    dataset: Path, reference: Path, tmp_path: Path, processes: list
) -> None:
    run_dir = tmp_path / "killed"
    process = start(
        torchrun(
            2, "train", "--data", dataset, "--runs", tmp_path, "--run-name", "killed", *SMALL, restarts=2
        ),
        tmp_path / "log",
    )
    processes.append(process)
    wait_for(lambda: epochs_logged(run_dir) >= 1, "the first epoch")
    workers = children(process.pid)
    assert len(workers) == 2
    os.kill(workers[-1], signal.SIGKILL)
    assert process.wait(timeout=240) == 0, (tmp_path / "log").read_text()[-3000:]
    log = (tmp_path / "log").read_text()
    assert "resumed from" in log and "(restart 1)" in log
    lines = _metrics(run_dir)
    assert [line["epoch"] for line in lines] == [1, 2, 3], "each epoch once, in order"
    assert lines[0]["restarts"] == 0 and lines[-1]["restarts"] == 1, "the metrics show the resume"
    assert read_json(run_dir / "summary.json")["restarts"] == 1
    assert _final(run_dir) == pytest.approx(_final(reference), rel=1e-6)


def test_sigterm_writes_a_loadable_emergency_checkpoint_and_the_resumed_run_matches(
    dataset: Path, reference: Path, tmp_path: Path, processes: list
) -> None:
    run_dir = tmp_path / "stopped"
    command = torchrun(2, "train", "--data", dataset, "--runs", tmp_path, "--run-name", "stopped", *SMALL)
    process = start(command, tmp_path / "log")
    processes.append(process)
    wait_for(lambda: epochs_logged(run_dir) >= 1, "the first epoch")
    process.send_signal(signal.SIGTERM)
    # torchrun kills its workers 30 s after forwarding SIGTERM; they must be done well before.
    process.wait(timeout=25)
    log = (tmp_path / "log").read_text()
    assert "emergency checkpoint written at step" in log, log[-3000:]
    path = checkpoint.latest_verified(run_dir / "checkpoints")
    assert path is not None
    state = checkpoint.load(path, read_json(reference / "summary.json")["config_hash"], torch.device("cpu"))
    assert state["emergency"] is True
    assert 12 <= state["progress"]["step"] < 36
    assert read_json(run_dir / "status.json")["state"] == "running"
    resumed = run(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_json(run_dir / "summary.json")["restarts"] == 1
    assert _final(run_dir) == pytest.approx(_final(reference), rel=1e-6)
    # The interrupted epoch's totals combine both sessions: they equal the undisturbed epoch's.
    lines = _metrics(run_dir)
    expected = _metrics(reference)
    for got, want in zip(lines, expected, strict=True):
        assert math.isclose(got["train_loss"], want["train_loss"], rel_tol=1e-6), got["epoch"]


def test_resnet9_with_cutout_and_full_test_time_augmentation_learns(dataset: Path, tmp_path: Path) -> None:
    flags = ["--model", "resnet9", "--width", "4", "--batch-size", "128", "--epochs", "3", "--cutout", "8"]
    result = run(
        trainer("train", "--data", dataset, "--runs", tmp_path, "--run-name", "r9", *flags, "--tta", "2")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_json(tmp_path / "r9" / "summary.json")
    used = summary["hyperparameters"]
    assert (used["model"], used["tta"], used["cutout"]) == ("resnet9", 2, 8)
    assert (used["lr"], used["momentum"], used["epochs"]) == (0.4, 0.9, 3), "the ResNet-9 recipe, flags win"
    lines = _metrics(tmp_path / "r9")
    assert lines[-1]["train_loss"] < lines[0]["train_loss"], "ResNet-9 did not lower the loss"
    assert 0 <= summary["final_test_acc"] <= 1 and summary["final_test_loss"] > 0
