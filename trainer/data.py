"""CIFAR-10 on disk: read and check the python pickle batches, download them, or write synthetic ones."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.errors import TrainerError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ROW = 3 * 32 * 32


class DataError(TrainerError):
    """A dataset that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8, (N, 3, 32, 32)
    labels: np.ndarray  # int64, (N,)


def load(root: Path, train: bool) -> Split:
    """The training or test split under `root/cifar-10-batches-py`, checked row by row."""
    folder = root / FOLDER
    if not folder.is_dir():
        raise DataError(
            f"no CIFAR-10 dataset at {folder}; fetch it with `python -m trainer data download --dir {root}`"
            f" (or write a synthetic one with `python -m trainer data synthetic --dir {root}`)"
        )
    parts = [_read_batch(folder / name) for name in (TRAIN_FILES if train else (TEST_FILE,))]
    return Split(
        images=np.concatenate([p.images for p in parts]),
        labels=np.concatenate([p.labels for p in parts]),
    )


def _read_batch(path: Path) -> Split:
    root = path.parent.parent
    fix = f"delete it and fetch the dataset again (`python -m trainer data download --dir {root}`)"
    if not path.is_file():
        raise DataError(f"{path} is missing; {fix}")
    try:
        with open(path, "rb") as handle:
            batch = pickle.load(handle, encoding="latin1")
        data = np.asarray(batch["data"])
        labels = np.asarray(batch["labels"])
    except Exception as err:  # a truncated pickle raises any of several types
        raise DataError(f"{path} is corrupt or truncated ({type(err).__name__}: {err}); {fix}") from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW:
        raise DataError(
            f"{path} holds {data.dtype} rows of shape {data.shape}, not uint8 rows of {ROW}; {fix}"
        )
    # Checked before the cast: int64 would truncate 2.7 to 2 without a word.
    if labels.size and labels.dtype.kind not in "iu":
        raise DataError(f"{path} has {labels.dtype} labels, not integers from 0 to 9; {fix}")
    labels = labels.astype(np.int64)
    if len(labels) != len(data) or labels.min(initial=0) < 0 or labels.max(initial=0) >= len(CLASSES):
        raise DataError(
            f"{path} has {len(labels)} labels for {len(data)} images or labels outside 0-9; {fix}"
        )
    return Split(images=data.reshape(-1, 3, 32, 32), labels=labels)


def write_synthetic(root: Path, train: int, test: int, seed: int) -> Path:
    """A learnable stand-in in the exact CIFAR-10 pickle layout: each class is a colour pattern plus noise."""
    if train < len(TRAIN_FILES) or test < 1:
        raise DataError(f"synthetic data needs at least {len(TRAIN_FILES)} training and 1 test image")
    rng = np.random.default_rng(seed)
    patterns = rng.uniform(40, 215, size=(len(CLASSES), 3, 4, 4))
    folder = root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    chunks = np.array_split(np.arange(train), len(TRAIN_FILES))
    for number, (name, chunk) in enumerate(zip(TRAIN_FILES, chunks, strict=True), start=1):
        _write_batch(folder / name, f"training batch {number} of 5", _images(rng, patterns, len(chunk)))
    _write_batch(folder / TEST_FILE, "testing batch 1 of 1", _images(rng, patterns, test))
    meta = {"num_cases_per_batch": len(chunks[0]), "label_names": list(CLASSES), "num_vis": ROW}
    _pickle(folder / META_FILE, meta)
    return folder


def _images(rng: np.random.Generator, patterns: np.ndarray, count: int) -> Split:
    labels = rng.permutation(np.arange(count) % len(CLASSES))
    base = patterns[labels].repeat(8, axis=2).repeat(8, axis=3)
    noisy = base + rng.normal(0, 90, size=base.shape)
    return Split(images=np.clip(noisy, 0, 255).astype(np.uint8), labels=labels.astype(np.int64))


def _write_batch(path: Path, label: str, split: Split) -> None:
    batch = {
        "batch_label": label,
        "labels": [int(v) for v in split.labels],
        "data": split.images.reshape(len(split.labels), ROW),
        "filenames": [f"synthetic_{i:06d}.png" for i in range(len(split.labels))],
    }
    _pickle(path, batch)


def _pickle(path: Path, content: dict) -> None:
    # Protocol 2 is what the original batches use; every reader of CIFAR-10 understands it.
    with open(path, "wb") as handle:
        pickle.dump(content, handle, protocol=2)


def verify(root: Path) -> list[str]:
    """Files under `root` that are missing or fail torchvision's MD5 sums (empty: all verified)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    folder = root / FOLDER
    return [
        name
        for name, md5 in CIFAR10.train_list + CIFAR10.test_list
        if not check_integrity(str(folder / name), md5)
    ]


def download(root: Path) -> str:
    """Fetch CIFAR-10 into `root` unless it is already there and verified; returns what happened."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import download_and_extract_archive

    if not verify(root):
        return f"CIFAR-10 at {root / FOLDER} is present and verified; nothing to do"
    root.mkdir(parents=True, exist_ok=True)
    try:
        download_and_extract_archive(CIFAR10.url, str(root), filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)
    except Exception as err:
        raise DataError(
            f"downloading {CIFAR10.url} into {root} failed ({err}); check the network or proxy"
        ) from None
    bad = verify(root)
    if bad:
        raise DataError(
            f"downloaded CIFAR-10 fails its checksums for {', '.join(bad)}; delete {root} and retry"
        )
    return f"CIFAR-10 downloaded into {root / FOLDER} and verified"
