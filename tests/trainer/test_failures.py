"""Failures the trainer must not hide: divergence, unusable checkpoints, an unwritable run folder,
bad labels. Each ends with one line naming what is wrong, and a run folder of strict JSON."""

from __future__ import annotations

import argparse
import math
import os
import pickle
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.trainer_runs import (
    SMALL,
    diverge_after_first_epoch,
    read_json,
    run,
    strict_json,
    torchrun,
    trainer,
)
from trainer import data
from trainer.hyperparameters import HYPERPARAMETERS
from trainer.records import atomic, checkpoint

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
    highest = HYPERPARAMETERS["lr"].rule.high
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


@pytest.fixture(scope="module")
def finished(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-epoch run to doctor: each test resumes a copy of it from its first epoch."""
    runs = tmp_path_factory.mktemp("finished")
    result = run(trainer(*_train_args(dataset, runs)))
    assert result.returncode == 0, result.stderr[-3000:]
    return runs / "r"


def _first_layer(state: dict) -> str:
    return next(iter(state["model"]))


def _bigger(state: dict) -> None:
    key = _first_layer(state)
    state["model"][key] = torch.zeros(*(n + 1 for n in state["model"][key].shape))


def _at(state: dict, path: tuple[object, ...]) -> tuple[dict, object]:
    *parents, last = path
    for key in parents:
        state = state[key]
    return state, last


def _set(path: tuple[object, ...], value: object) -> Callable[[dict], None]:
    def change(state: dict) -> None:
        parent, key = _at(state, path)
        parent[key] = value

    return change


def _drop(path: tuple[object, ...]) -> Callable[[dict], None]:
    def change(state: dict) -> None:
        parent, key = _at(state, path)
        del parent[key]

    return change


def _drop_first_layer(state: dict) -> None:
    del state["model"][_first_layer(state)]


# Each: the change, and what the one line must say is wrong. Without the checks a tensor of
# another shape or a missing or extra key was a traceback after the rendezvous (a crash loop in a
# pod), an optimizer buffer of another shape one at the first step, and an epoch past the end a
# run marked complete without training.
MISFITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a tensor of another shape": (
        _bigger,
        r"its model's '[\w.]+' is torch.float32 of shape \[\d+, \d+, \d+, \d+\], where this run's is"
        r" torch.float32 of shape \[\d+, \d+, \d+, \d+\]",
    ),
    "a missing model key": (_drop_first_layer, r"its model lacks the key '[\w.]+'"),
    "an extra model key": (
        _set(("model", "head.extra"), torch.zeros(1)),
        r"its model has the key 'head.extra' that this trainer never writes",
    ),
    "a missing top-level key": (_drop(("lookahead",)), r"it lacks the key 'lookahead'"),
    "an extra top-level key": (
        _set(("notes",), "x"),
        r"it has the key 'notes' that this trainer never writes",
    ),
    "an optimizer buffer of another shape": (
        _set(("optimizer", "state", 0, "momentum_buffer"), torch.zeros(3)),
        r"its optimizer's momentum_buffer of parameter 0 is torch.float32 of shape \[3\]",
    ),
    "an epoch of 1e9": (_set(("progress", "epoch"), 10**9), r"its epoch 1000000000 is outside 0 to 2"),
    "an epoch of 1e9 as a float": (
        _set(("progress", "epoch"), 1e9),
        r"its epoch 1000000000.0 is not an integer",
    ),
    "an epoch below zero": (_set(("progress", "epoch"), -1), r"its epoch -1 is outside 0 to 2"),
    "a step that disagrees with the epoch": (
        _set(("progress", "step"), 13),
        r"its step 13 is not 12, where its epoch and step within it put it",
    ),
}


def _resume_from_first_epoch(finished: Path, tmp_path: Path, change: Callable[[dict], None] | None) -> Path:
    """A copy of `finished` as if killed after epoch 1, its checkpoint changed and summed again."""
    run_dir = tmp_path / "r"
    shutil.copytree(finished, run_dir)
    for name in ("summary.json", "status.json", "curves.png"):
        (run_dir / name).unlink()
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    folder = run_dir / "checkpoints"
    first, *later = sorted(folder.glob("ckpt-*.pt"))
    state = torch.load(first, weights_only=True)
    for path in [first, *later]:
        path.unlink()
        path.with_name(path.name + ".sha256").unlink()
    if change is not None:
        change(state)
    checkpoint.save(folder, 12, state, keep=3)
    return run_dir


def _train_args(dataset: Path, runs: Path) -> list[str | Path]:
    return ["train", "--data", dataset, "--runs", runs, "--run-name", "r", *TINY, "--epochs", "2"]


@pytest.fixture(scope="module")
def layout(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> checkpoint.Layout:
    """What a checkpoint must hold to resume `finished`: from a run built as the trainer builds it."""
    from trainer import cli, distributed, train
    from trainer.config import resolve
    from trainer.pod import run_state

    args = cli._parser().parse_args([str(a) for a in _train_args(dataset, tmp_path_factory.mktemp("x"))])
    splits = (data.load(dataset, True), data.load(dataset, False))
    config = resolve(vars(args), len(splits[0].labels), len(splits[1].labels), data.provenance(dataset))
    where = run_state.RunOptions(args.runs / "r", "gloo", 60, 3, 0.94, "exit")
    return train.Run(config, where, distributed.topology({}), splits).layout()


def _refused(case: str, path: Path, state: dict, layout: checkpoint.Layout) -> None:
    change, problem = MISFITS[case]
    change(state)
    with pytest.raises(checkpoint.CheckpointError) as refused:
        checkpoint.check(path, state, layout)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path} matches its sha256 and this run's hyperparameters but ")
    assert re.search(problem, message), message
    assert message.endswith(
        f"so it cannot resume this run: move it out of {path.parent} to resume from an older"
        " checkpoint, or start again with --fresh"
    )


@pytest.mark.parametrize("case", MISFITS)
def test_a_checkpoint_that_does_not_fit_the_run_is_named_with_its_fix(
    case: str, finished: Path, layout: checkpoint.Layout
) -> None:
    path = finished / "checkpoints" / "ckpt-000000012.pt"
    state = torch.load(path, weights_only=True)
    checkpoint.check(path, state, layout)  # as the trainer wrote it, it fits
    _refused(case, path, state, layout)


@pytest.mark.parametrize("case", ["a tensor of another shape", "a missing top-level key", "an epoch of 1e9"])
def test_a_checkpoint_that_verifies_but_does_not_fit_the_run_is_one_line(
    case: str, dataset: Path, finished: Path, tmp_path: Path
) -> None:
    """Through the trainer: the line, exit 2, and nothing of the run changed."""
    change, problem = MISFITS[case]
    run_dir = _resume_from_first_epoch(finished, tmp_path, change)
    result = run(trainer(*_train_args(dataset, tmp_path)))
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    path = run_dir / "checkpoints" / "ckpt-000000012.pt"
    _one_error_line(result.stderr, f"{path} matches its sha256 and this run's hyperparameters but ")
    assert re.search(problem, result.stderr), result.stderr
    assert "done:" not in result.stdout
    assert [line["epoch"] for line in _metrics(run_dir)] == [1], "the records are untouched"
    assert not (run_dir / "summary.json").exists() and not (run_dir / "status.json").exists()


def test_a_checkpoint_summed_again_unchanged_resumes(dataset: Path, finished: Path, tmp_path: Path) -> None:
    """The checks above refuse what is wrong, not what the trainer wrote."""
    run_dir = _resume_from_first_epoch(finished, tmp_path, None)
    result = run(trainer(*_train_args(dataset, tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stdout and "at epoch 2, step 12" in result.stdout
    assert [line["epoch"] for line in _metrics(run_dir)] == [1, 2]
    assert (
        read_json(run_dir / "summary.json")["final_test_acc"]
        == read_json(finished / "summary.json")["final_test_acc"]
    )


def test_a_checkpoint_that_does_not_fit_is_refused_before_the_rendezvous(
    dataset: Path, finished: Path, tmp_path: Path
) -> None:
    """Under torchrun rank 0 refuses it while rank 1 still waits to meet it: one line, not a
    traceback from each rank after they met."""
    run_dir = _resume_from_first_epoch(finished, tmp_path, _bigger)
    result = run(torchrun(2, *_train_args(dataset, tmp_path)))
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and "matches its sha256 and this run's hyperparameters but its model's" in said[0]
    # One traceback: torchrun's own. Rank 1 was waiting and ends at torchrun's SIGTERM, quietly.
    assert result.stderr.count("Traceback (most recent call last)") == 1
    assert "rank      : 0 (local_rank: 0)" in result.stderr.split("Root Cause")[1]
    assert [line["epoch"] for line in _metrics(run_dir)] == [1]
