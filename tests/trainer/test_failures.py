"""Failures the trainer must not hide: divergence, unusable checkpoints, an unwritable run folder,
bad labels. Each ends with one line naming what is wrong, and a run folder of strict JSON."""

from __future__ import annotations

import argparse
import math
import os
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.conftest import SMALL, read_json, run, strict_json, torchrun, trainer
from trainer import atomic, checkpoint, data
from trainer.hyperparameters import RULES

TINY = ["--width", "8", "--batch-size", "128", "--tta", "0", "--epochs", "1"]


def _one_error_line(stderr: str, start: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {start}"), stderr[-3000:]


def _all_strict_json(run_dir: Path) -> None:
    for path in [*run_dir.glob("*.json"), run_dir / "checkpoints" / "latest"]:
        if path.exists():
            read_json(path)
    metrics = run_dir / "metrics.jsonl"
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        strict_json(line)


def test_strict_json_is_written_or_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        atomic.write_json(tmp_path / "x.json", {"loss": math.nan})
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(ValueError, match="NaN is not JSON"):
        strict_json('{"loss": NaN}')


def diverge_after_first_epoch(run_dir: Path) -> None:
    """Make a finished two-epoch run one that resumes after epoch 1 into weights that are NaN: a
    run that diverged (no learning rate the flags accept makes these small nets blow up at will)."""
    folder = run_dir / "checkpoints"
    first, *later = sorted(folder.glob("ckpt-*.pt"))
    state = torch.load(first, weights_only=True)
    for tensor in state["model"].values():
        if tensor.is_floating_point():
            tensor.fill_(math.nan)
    for path in later:
        path.unlink()
        path.with_name(path.name + ".sha256").unlink()
    checkpoint.save(folder, state["progress"]["step"], state, keep=3)
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    (run_dir / "summary.json").unlink()


def test_a_diverging_run_fails_with_its_reason_said_once(dataset: Path, tmp_path: Path) -> None:
    """Under torchrun every rank sees the same non-finite loss (it is summed over them): rank 0
    says so, and each rank's exit code and line reach torchrun's summary."""
    args = ["train", "--data", dataset, "--runs", tmp_path, "--run-name", "nan", *TINY, "--epochs", "2"]
    assert run(torchrun(2, *args)).returncode == 0
    run_dir = tmp_path / "nan"
    diverge_after_first_epoch(run_dir)
    result = run(torchrun(2, *args))
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1, result.stderr[-4000:]
    assert said[0].startswith("error: training diverged in epoch 2 (step 24): train loss nan")
    root_cause = result.stderr.split("Root Cause (first observed failure):")[1]
    assert "exitcode  : 1 " in root_cause and "traceback : error: training diverged" in root_cause
    assert "done:" not in result.stdout
    status = read_json(run_dir / "status.json")
    assert status["state"] == "failed" and "training diverged" in status["error"]
    assert not (run_dir / "summary.json").exists(), "a failed run has no summary"
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt")] == ["ckpt-000000012.pt"], (
        "no checkpoint of non-finite weights"
    )
    _all_strict_json(run_dir)


def test_the_largest_learning_rate_the_flag_accepts_fails_as_diverged(dataset: Path, tmp_path: Path) -> None:
    """At --lr 100 the small net's loss grows by orders of magnitude while its accuracy sits at
    chance; with only NaN and inf counting as divergence that run ended "done", exit 0."""
    highest = RULES["lr"].high
    args = ["train", "--data", dataset, "--runs", tmp_path, "--run-name", "hot", *SMALL, "--lr", str(highest)]
    result = run(torchrun(2, *args))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1, result.stderr[-4000:]
    assert re.match(
        rf"error: training diverged in epoch 2 \(step 24\): train loss [\d.e+]+ is at least 23\.0,"
        rf" 10 times a uniform guess's \(ln 10\); lower --lr \(it is {highest:g}\)",
        said[0],
    ), said[0]
    assert "done:" not in result.stdout
    run_dir = tmp_path / "hot"
    status = read_json(run_dir / "status.json")
    assert status["state"] == "failed" and status["error"] == f"Diverged: {said[0].removeprefix('error: ')}"
    assert not (run_dir / "summary.json").exists(), "a failed run has no summary"
    assert [line["epoch"] for line in _metrics(run_dir)] == [1], "the diverged epoch is not recorded"
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt")] == ["ckpt-000000012.pt"]
    _all_strict_json(run_dir)


def test_unverifiable_checkpoints_refuse_a_silent_restart_unless_fresh(dataset: Path, tmp_path: Path) -> None:
    base = [
        "train",
        "--data",
        dataset,
        "--runs",
        tmp_path,
        "--run-name",
        "cut",
        *TINY,
        "--checkpoint-keep",
        "1",
    ]
    assert run(trainer(*base)).returncode == 0
    run_dir = tmp_path / "cut"
    # As if killed before the end (no summary), with every checkpoint cut short.
    (run_dir / "summary.json").unlink()
    for path in (run_dir / "checkpoints").glob("ckpt-*.pt"):
        path.write_bytes(path.read_bytes()[:1000])
    refused = run(trainer(*base))
    assert refused.returncode == 2
    assert "skipped: its contents do not match its sha256" in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ") and "--fresh" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert [line["epoch"] for line in _metrics(run_dir)] == [1], "the records are untouched"
    fresh = run(trainer(*base, "--fresh"))
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert [(line["epoch"], line["restarts"]) for line in _metrics(run_dir)] == [(1, 0)], "each epoch once"
    assert read_json(run_dir / "summary.json")["restarts"] == 0
    _all_strict_json(run_dir)


def _metrics(run_dir: Path) -> list[dict]:
    return [strict_json(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _read_only(folder: Path) -> list[str]:
    """A command prefix under which `folder` is read-only (root ignores file modes: a private
    read-only bind mount, gone with the process; others: the mode)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    assert shutil.which("unshare"), "util-linux's unshare is needed to make a read-only mount as root"
    script = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "sh"]


def test_a_read_only_runs_folder_is_one_line(dataset: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    command = _read_only(runs) + trainer("train", "--data", dataset, "--runs", runs, "--run-name", "x", *TINY)
    result = run(command)
    assert result.returncode == 2, result.stderr[-3000:]
    _one_error_line(result.stderr, f"cannot write the run folder {runs / 'x'} (")
    assert "choose a --runs folder" in result.stderr


def test_float_labels_are_refused_not_truncated(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    with open(folder / "test_batch", "rb") as handle:
        batch = pickle.load(handle, encoding="latin1")
    batch["labels"] = [label + 0.5 for label in batch["labels"]]
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump(batch, handle, protocol=2)
    # Recorded as the generator records its files: the labels, not the checksum, are what is wrong.
    data.record_manifest(folder)
    with pytest.raises(data.DataError, match=r"test_batch has float64 labels, not integers from 0 to 9"):
        data.load(tmp_path, train=False)
    assert data.load(tmp_path, train=True).labels.dtype == np.int64


def test_a_checkpoint_that_verifies_but_will_not_load_safely_is_one_line_without_unsafe_advice(
    tmp_path: Path,
) -> None:
    state = {"config_hash": "abc", "options": argparse.Namespace(lr=1.0)}
    path = checkpoint.save(tmp_path, 1, state, keep=2)
    assert checkpoint.latest_verified(tmp_path) == path, "its sha256 matches"
    with pytest.raises(checkpoint.CheckpointError) as refused:
        checkpoint.load(path, "abc", torch.device("cpu"))
    message = str(refused.value)
    assert "\n" not in message and "weights_only" not in message and "trust" not in message
    assert (
        "matches its sha256 but is not a checkpoint this trainer wrote (it holds argparse.Namespace)"
        in message
    )
    assert "--fresh" in message
