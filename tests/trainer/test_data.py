"""The dataset on disk: the synthetic writer's exact CIFAR-10 layout, and the loader's checks."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.conftest import run, trainer
from trainer import data


def test_synthetic_data_has_cifar10s_pickle_layout(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=3)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*data.TRAIN_FILES, "test_batch", "batches.meta"]
    )
    with open(folder / "data_batch_1", "rb") as handle:
        batch = pickle.load(handle, encoding="latin1")
    assert set(batch) == {"batch_label", "labels", "data", "filenames"}
    assert batch["data"].dtype == np.uint8 and batch["data"].shape == (10, 3072)
    assert isinstance(batch["labels"], list) and all(0 <= v < 10 for v in batch["labels"])
    with open(folder / "batches.meta", "rb") as handle:
        meta = pickle.load(handle, encoding="latin1")
    assert meta["label_names"] == list(data.CLASSES) and meta["num_vis"] == 3072
    train, test = data.load(tmp_path, train=True), data.load(tmp_path, train=False)
    assert train.images.shape == (50, 3, 32, 32) and len(test.labels) == 20
    assert np.array_equal(train.images, data.load(tmp_path, train=True).images)
    again = tmp_path / "again"
    data.write_synthetic(again, train=50, test=20, seed=3)
    assert np.array_equal(data.load(again, train=True).images, train.images), "same seed, same data"


def test_synthetic_data_fails_the_real_checksums(tmp_path: Path) -> None:
    """`data download` must not take a synthetic set for the real one."""
    data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    assert data.verify(tmp_path) == [*data.TRAIN_FILES, "test_batch"]


def test_a_missing_dataset_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    with pytest.raises(data.DataError, match=rf"python -m trainer data download --dir {tmp_path}"):
        data.load(tmp_path, train=True)


def test_a_truncated_batch_names_the_file(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    target = folder / "data_batch_3"
    target.write_bytes(target.read_bytes()[:1000])
    with pytest.raises(data.DataError, match=r"data_batch_3 is corrupt or truncated"):
        data.load(tmp_path, train=True)
    assert data.load(tmp_path, train=False).labels.shape == (20,), "the test split is intact"


def test_a_missing_or_malformed_batch_names_the_file(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    (folder / "data_batch_5").unlink()
    with pytest.raises(data.DataError, match=r"data_batch_5 is missing"):
        data.load(tmp_path, train=True)
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump({"data": np.zeros((4, 100), np.uint8), "labels": [0, 1, 2, 3]}, handle)
    with pytest.raises(data.DataError, match=r"test_batch holds uint8 rows of shape \(4, 100\)"):
        data.load(tmp_path, train=False)


def test_the_cli_reports_a_data_error_in_one_line(tmp_path: Path) -> None:
    result = run(trainer("train", "--data", tmp_path, "--runs", tmp_path / "runs", "--run-name", "x"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: no CIFAR-10 dataset at") and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "nothing is written before the input is checked"
