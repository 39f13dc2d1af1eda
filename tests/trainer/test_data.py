"""The dataset on disk: the synthetic writer's exact CIFAR-10 layout, and the loader's checks."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.support.trainer_runs import run, trainer
from trainer import data


def test_synthetic_data_has_cifar10s_pickle_layout(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=3)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*data.TRAIN_FILES, "test_batch", "batches.meta", data.MANIFEST]
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
    data.record_manifest(folder)  # past the checksum, to the reader's own checks
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
    data.record_manifest(folder)
    with pytest.raises(data.DataError, match=r"test_batch holds uint8 rows of shape \(4, 100\)"):
        data.load(tmp_path, train=False)


def test_the_cli_reports_a_data_error_in_one_line(tmp_path: Path) -> None:
    result = run(trainer("train", "--data", tmp_path, "--runs", tmp_path / "runs", "--run-name", "x"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: no CIFAR-10 dataset at") and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "nothing is written before the input is checked"


class _Payload:
    """A pickle that runs a command when it is loaded: what a writer of the share could plant."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("touch pwned",))


def test_a_tampered_batch_is_refused_before_it_is_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    marker = tmp_path / "pwned"
    with open(folder / "data_batch_2", "wb") as handle:
        pickle.dump({"data": _Payload(), "labels": []}, handle, protocol=2)
    with pytest.raises(data.DataError, match=r"data_batch_2 does not match its recorded sha256") as err:
        data.load(tmp_path, train=True)
    assert "\n" not in str(err.value)
    assert not marker.exists()


def test_a_batch_that_names_any_other_global_is_refused_even_with_a_matching_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever writes the share can write the manifest too: the unpickler is the last line."""
    monkeypatch.chdir(tmp_path)
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump({"data": _Payload(), "labels": []}, handle, protocol=2)
    data.record_manifest(folder)
    with pytest.raises(data.DataError, match=r"test_batch is corrupt.*never refers to posix.system"):
        data.load(tmp_path, train=False)
    assert not (tmp_path / "pwned").exists()


def test_only_the_published_files_pass_when_they_are_required(tmp_path: Path) -> None:
    data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    assert len(data.load(tmp_path, train=False).labels) == 20
    with pytest.raises(data.DataError, match=r"test_batch does not match its recorded md5"):
        data.load(tmp_path, train=False, require_published=True)


def test_python2_batches_load_through_the_restricted_unpickler(tmp_path: Path) -> None:
    """CIFAR-10's own files were written by Python 2's numpy, which names numpy.core.multiarray."""
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    target = folder / "test_batch"
    raw = target.read_bytes()
    assert b"numpy._core.multiarray\n" in raw
    target.write_bytes(raw.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    data.record_manifest(folder)
    assert data.load(tmp_path, train=False).images.shape == (20, 3, 32, 32)


def test_the_cli_refuses_a_tampered_batch_in_one_line(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    (folder / "test_batch").write_bytes(b"\x80\x02}q\x00.")
    result = run(trainer("train", "--data", tmp_path, "--runs", tmp_path / "runs", "--run-name", "x"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "does not match its recorded sha256" in result.stderr
    assert not (tmp_path / "runs").exists()
