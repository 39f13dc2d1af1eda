"""The dataset on disk: the synthetic writer's exact CIFAR-10 layout, and the loader's checks."""

from __future__ import annotations

import pickle
import time
import tracemalloc
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


class _Reduced:
    """Pickles as a call of `function(*args)`, then `state` set on what it returns, as a batch may."""

    def __init__(self, function: object, args: tuple, state: object = None) -> None:
        self.reduced = (function, args) if state is None else (function, args, state)

    def __reduce__(self) -> tuple:
        return self.reduced


def _hostile_batches(root: Path, data_value: object) -> Path:
    """A synthetic set whose every training batch is `data_value` with one label, its manifest
    rewritten to match: what whoever writes the share can make."""
    folder = data.write_synthetic(root, train=50, test=20, seed=0)
    for name in data.TRAIN_FILES:
        with open(folder / name, "wb") as handle:
            pickle.dump({"data": data_value, "labels": [0]}, handle, protocol=2)
    data.record_manifest(folder)
    return folder


def _refusal_and_peak(root: Path) -> tuple[str, int]:
    """load's one-line refusal and the most bytes numpy and Python held while it ran."""
    tracemalloc.start()
    try:
        with pytest.raises(data.DataError) as caught:
            data.load(root, train=True)
        return str(caught.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# (what the batch's data is, the refusal): each claims far more than its file holds.
CLAIMING = [
    pytest.param(
        # numpy.ndarray((10**6, 3072), 'u1', b'\0', 0, (0, 0)): 3 GB over one byte, by zero strides.
        _Reduced(np.ndarray, ((10**6, 3072), "u1", b"\0", 0, (0, 0))),
        "never calls numpy.ndarray",
        id="zero-strides",
    ),
    pytest.param(
        _Reduced(np.ndarray, ((349525, 3072), "u1")), "never calls numpy.ndarray", id="ndarray-call"
    ),
    pytest.param(
        _Reduced(
            np._core.multiarray._reconstruct,
            (np.ndarray, (10**6, 3072), b"b"),
            (1, (10**6, 3072), np.dtype("u1"), False, b"\0"),
        ),
        "claims other than the 1 bytes it carries",
        id="reconstruct-shape",
    ),
]


@pytest.mark.parametrize(("value", "refusal"), CLAIMING)
def test_a_batch_that_claims_more_than_it_holds_is_refused_before_numpy_allocates(
    value: object, refusal: str, tmp_path: Path
) -> None:
    folder = _hostile_batches(tmp_path, value)
    assert (folder / "data_batch_1").stat().st_size < 300
    message, peak = _refusal_and_peak(tmp_path)
    assert "data_batch_1 is corrupt" in message and refusal in message and "\n" not in message
    assert peak < 16 * 2**20, f"{peak} bytes held to refuse a {refusal!r} batch"


# (a batch's data, its labels): each refers to one small row or list over and over, which a
# pickle's memo writes in two bytes a reference, so that numpy would build far more than the file holds.
REFERRING = [
    pytest.param([np.zeros(data.ROW, np.uint8)] * 30_000, [0] * 30_000, id="one-array-as-every-row"),
    pytest.param([[0] * data.ROW] * 3_000, [0] * 3_000, id="one-list-as-every-row"),
    pytest.param(np.zeros((10, data.ROW), np.uint8), [[0] * 1_000] * 10_000, id="one-list-as-every-label"),
]


@pytest.mark.parametrize(("images", "labels"), REFERRING)
def test_a_batch_that_refers_to_one_row_many_times_is_refused_before_numpy_builds_it(
    images: object, labels: object, tmp_path: Path
) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    with open(folder / "data_batch_1", "wb") as handle:
        pickle.dump({"data": images, "labels": labels}, handle, protocol=2)
    data.record_manifest(folder)
    assert (folder / "data_batch_1").stat().st_size < 2**17
    message, peak = _refusal_and_peak(tmp_path)
    assert "data_batch_1 " in message and "\n" not in message, message
    assert peak < 16 * 2**20, f"{peak} bytes held to refuse a batch that refers to one row many times"


def test_an_arrays_type_state_cannot_make_its_bytes_anything_but_pixels(tmp_path: Path) -> None:
    # The state numpy would take for the array's dtype sets the flag that reads its bytes as object
    # pointers; the batch's bytes stay uint8 pixels.
    dtype = _Reduced(np.dtype, ("u1", False, True), (3, "|", None, None, None, -1, -1, 63))
    rows = np.zeros((10, data.ROW), np.uint8)
    array = _Reduced(
        np._core.multiarray._reconstruct,
        (np.ndarray, (0,), b"b"),
        (1, rows.shape, dtype, False, rows.tobytes()),
    )
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump({"data": array, "labels": [0] * 10}, handle, protocol=2)
    data.record_manifest(folder)
    images = data.load(tmp_path, train=False).images
    assert images.dtype == np.uint8 and not images.dtype.hasobject and images.shape == (10, 3, 32, 32)


def test_a_batch_larger_than_cifar10s_is_refused_by_its_size_before_it_is_hashed(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    sparse = folder / "data_batch_2"
    with open(sparse, "r+b") as handle:
        handle.truncate(3 * 2**29)  # 1.5 GiB of holes: no disk, but 25 s to hash
    started = time.monotonic()
    with pytest.raises(data.DataError, match=r"data_batch_2: holds 1610612736 bytes, more than the \d+ such"):
        data.load(tmp_path, train=True)
    assert time.monotonic() - started < 5


def test_the_largest_batch_a_set_has_fits_the_bound(tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=len(data.TRAIN_FILES), test=data.BATCH_IMAGES, seed=0)
    assert (folder / "test_batch").stat().st_size <= data.MAX_BATCH_BYTES
    assert len(data.load(tmp_path, train=False).labels) == data.BATCH_IMAGES
    # CIFAR-10's largest published batch.
    assert data.MAX_BATCH_BYTES > 31_035_704


@pytest.mark.parametrize(("train", "test"), [(10**11, 20), (50, 10**6)])
def test_a_synthetic_set_larger_than_cifar10_is_refused_in_one_line(
    train: int, test: int, tmp_path: Path
) -> None:
    with pytest.raises(data.DataError, match=r"at most CIFAR-10's 50000 training and 10000 test images"):
        data.write_synthetic(tmp_path, train=train, test=test, seed=0)
    assert not (tmp_path / "cifar-10-batches-py").exists()
