"""The data of a `labctl try`: the CIFAR-10 folder named with --data, else CIFAR-10 downloaded
into the test machines' cache, else a generated CIFAR-format set, and what the user is told."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lab.cli.common.console import CliError
from lab.testbed import ddp
from lab.testbed.layout import CACHE_ROOT
from trainer.contract import DATASET_FOLDER, TEST_FILE, TRAIN_FILES

DOWNLOAD_TIMEOUT_S = 900
DOWNLOADED = CACHE_ROOT / "cifar-10"  # kept between runs, like the machines' package cache
GENERATED_IMAGES = (2048, 512)  # training, test


@dataclass(frozen=True)
class Dataset:
    root: Path  # holds cifar-10-batches-py/
    real: bool
    note: str  # what the user is told about it

    @property
    def images(self) -> int:
        return 50_000 if self.real else GENERATED_IMAGES[0]


def given(path: Path) -> Path:
    """The folder holding cifar-10-batches-py/ with every batch, whichever of the two was named."""
    root = path.parent if path.name == DATASET_FOLDER else path
    missing = [name for name in (*TRAIN_FILES, TEST_FILE) if not (root / DATASET_FOLDER / name).is_file()]
    if missing:
        raise CliError(
            f"--data {path}: no CIFAR-10 python batches there (missing {DATASET_FOLDER}/{missing[0]});"
            " name the folder that holds cifar-10-batches-py/ (from cifar-10-python.tar.gz)"
        )
    return root


def choose(named: Path | None, generated: bool, work: Path) -> Dataset:
    """The set named with --data; else CIFAR-10, downloaded unless `generated`; else a generated
    set in `work`, with the reason it is not CIFAR-10."""
    if named:
        root = given(named)
        return Dataset(root, True, f"CIFAR-10 from {root / DATASET_FOLDER}")
    reason = "--generated asked for it" if generated else _download()
    if reason is None:
        return Dataset(DOWNLOADED, True, f"CIFAR-10, downloaded into {DOWNLOADED / DATASET_FOLDER}")
    train, test = GENERATED_IMAGES
    root = ddp.make_dataset(work / "data", train, test)
    return Dataset(
        root,
        False,
        f"NOT real CIFAR-10: a generated CIFAR-format set ({train} training, {test} test images of"
        f" learnable patterns): {reason}; pass --data DIR to train on the real set",
    )


def _download() -> str | None:
    """Fetch CIFAR-10 into the cache (a no-op when it is there); why it failed, or None."""
    download = [sys.executable, "-m", "trainer", "data", "download", "--dir", str(DOWNLOADED)]
    try:
        done = subprocess.run(
            download, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"CIFAR-10 did not download within {DOWNLOAD_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
    return f"the download failed ({last.removeprefix('error: ')})"
