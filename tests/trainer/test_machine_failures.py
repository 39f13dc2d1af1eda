"""The machine's own failures reach the trainer's operator as one line naming the path and the fix,
with nothing half-written: a test or training set of zero images, a full or read-only runs disk."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np

from tests.support.tmpfs import fill, tmpfs
from tests.support.trainer_runs import run, trainer

TINY = ["--width", "8", "--batch-size", "128", "--tta", "0", "--epochs", "1", "--threads", "1"]


def _emptied(dataset: Path, tmp_path: Path, names: tuple[str, ...]) -> Path:
    """A copy of `dataset` whose batches `names` hold no images, its manifest updated to match."""
    from trainer import data

    root = tmp_path / "data"
    shutil.copytree(dataset, root)
    folder = root / data.DATASET_FOLDER
    empty = data.Split(images=np.zeros((0, 3, 32, 32), np.uint8), labels=np.zeros(0, np.int64))
    for name in names:
        data._write_batch(folder / name, name, empty)
    manifest = folder / data.MANIFEST
    lines = []
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name in names:
            digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}")
    manifest.write_text("\n".join(lines) + "\n")
    return root


def _one_line(result: object) -> str:
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert result.returncode == 2, err  # type: ignore[attr-defined]
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_test_set_of_zero_images_is_one_line(dataset: Path, tmp_path: Path) -> None:
    root = _emptied(dataset, tmp_path, ("test_batch",))
    line = _one_line(
        run(trainer("train", "--data", root, "--runs", tmp_path / "runs", "--run-name", "z", *TINY))
    )
    assert f"{root}/cifar-10-batches-py/test_batch holds no images" in line and "data download" in line
    assert not (tmp_path / "runs").exists()


def test_a_training_set_of_zero_images_is_one_line(dataset: Path, tmp_path: Path) -> None:
    from trainer.data import TRAIN_FILES

    root = _emptied(dataset, tmp_path, TRAIN_FILES)
    line = _one_line(
        run(trainer("train", "--data", root, "--runs", tmp_path / "runs", "--run-name", "z", *TINY))
    )
    assert "data_batch_* holds no images, and the trainer needs some to train on" in line


def test_a_full_runs_disk_is_one_line_and_leaves_no_half_written_file(dataset: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "runs", size="256k") as runs:
        (runs / "z").mkdir()
        fill(runs)
        result = run(trainer("train", "--data", dataset, "--runs", runs, "--run-name", "z", *TINY))
        line = _one_line(result)
        assert "No space left on device; the disk is full" in line and str(runs) in line, line
        assert not [p for p in runs.rglob("*") if ".tmp-" in p.name], "a half-written file was left"


def test_a_read_only_runs_disk_is_one_line(dataset: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "runs", read_only=True) as runs:
        line = _one_line(run(trainer("train", "--data", dataset, "--runs", runs, "--run-name", "z", *TINY)))
    assert "Read-only file system" in line and str(runs) in line
