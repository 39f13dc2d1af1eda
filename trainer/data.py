"""CIFAR-10 on disk: read and check the python pickle batches, download them, or write synthetic ones.

The batches are pickles, and a pickle can run code when it is loaded. Whoever can write the
dataset volume could otherwise run code in every rank, so a batch is read only after its bytes
match a recorded checksum (CIFAR-10's published MD5s, or the manifest the synthetic generator
writes), and then through an unpickler that can build only what CIFAR-10's files hold: dicts,
lists, strings, numbers and numpy uint8 arrays.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from trainer.contract import CIFAR10, DATASET_FOLDER, GENERATED, META_FILE, TEST_FILE, TRAIN_FILES
from trainer.errors import TrainerError
from trainer.hyperparameters import CIFAR10_TRAIN_IMAGES
from trainer.records import runfolders

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ROW = 3 * 32 * 32
# CIFAR-10's shape: 10000 images a batch, five training batches and one test batch.
BATCH_IMAGES = CIFAR10_TRAIN_IMAGES // len(TRAIN_FILES)
# The most bytes a batch of BATCH_IMAGES may take: each image's row, at most two bytes a pixel (a
# protocol-2 pickle written by Python 3 carries bytes as latin1 text in UTF-8), its label and file
# name (under 64 bytes together in CIFAR-10's pickles, whose batches are 31 035 526 to 31 035 704
# bytes), and the batch's keys. A larger file is refused before it is hashed or read.
MAX_BATCH_BYTES = BATCH_IMAGES * (2 * ROW + 64) + 64 * 1024
# A manifest line per batch: a sha256 and a file name.
MAX_MANIFEST_BYTES = 64 * 1024
# Written by `data synthetic` next to its batches: "<sha256>  <file name>" per line (sha256sum's format).
MANIFEST = "SYNTHETIC.sha256"


class DataError(TrainerError):
    """A dataset that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8, (N, 3, 32, 32)
    labels: np.ndarray  # int64, (N,)


# Per-channel mean and standard deviation of CIFAR-10's training split, on the 0-255 pixel scale:
# a fact of the data (the same for every model), which the input standardisation divides out.
PIXEL_MEAN = (125.31, 122.95, 113.87)
PIXEL_STD = (62.99, 62.09, 66.70)


def published_md5s() -> dict[str, str]:
    """CIFAR-10's batch files and their published MD5 sums, as torchvision records them."""
    from torchvision.datasets import CIFAR10

    return {name: md5 for name, md5 in CIFAR10.train_list + CIFAR10.test_list}


def load(root: Path, train: bool, require_published: bool = False) -> Split:
    """The training or test split under `root/cifar-10-batches-py`, checksum-verified, checked row by row.

    `require_published`: accept only CIFAR-10's own files, never a synthetic set's manifest
    (whoever can write the folder can write a manifest too).
    """
    folder = root / DATASET_FOLDER
    if not folder.is_dir():
        raise DataError(
            f"no CIFAR-10 dataset at {folder}; fetch it with `python -m trainer data download --dir {root}`"
            f" (or write a synthetic one with `python -m trainer data synthetic --dir {root}`)"
        )
    sums = _expected_sums(folder, require_published)
    names = TRAIN_FILES if train else (TEST_FILE,)
    parts = [_read_batch(folder / name, sums) for name in names]
    split = Split(
        images=np.concatenate([p.images for p in parts]),
        labels=np.concatenate([p.labels for p in parts]),
    )
    if not len(split.labels):
        where = folder / names[0] if len(names) == 1 else f"{folder}/{names[0][:-1]}*"
        role = "train on" if train else "measure accuracy on"
        raise DataError(
            f"{where} holds no images, and the trainer needs some to {role}; fetch the dataset again"
            f" (`python -m trainer data download --dir {root}`) or write a synthetic one with images in"
            f" both splits (`python -m trainer data synthetic --dir {root}`)"
        )
    return split


def provenance(root: Path, require_published: bool = False) -> str:
    """What `load` reads under `root`: CIFAR-10 (held to its published sums) or a generated set
    (held to the manifest `data synthetic` writes beside it)."""
    manifest = root / DATASET_FOLDER / MANIFEST
    # Whatever the manifest is, a pipe or a link among them, it is there: `load` then names it.
    return CIFAR10 if require_published or not os.path.lexists(manifest) else GENERATED


def _expected_sums(folder: Path, require_published: bool) -> dict[str, tuple[str, str]]:
    """File name to (hash algorithm, hex digest) the batches must match."""
    if provenance(folder.parent, require_published) == CIFAR10:
        return {name: ("md5", md5) for name, md5 in published_md5s().items()}
    fix = f"write the set again (`python -m trainer data synthetic --dir {folder.parent}`)"
    try:
        raw = runfolders.read_in(str(folder), MANIFEST, MAX_MANIFEST_BYTES)
        text = raw.decode("utf-8")
    except runfolders.Unfit as err:
        raise DataError(f"{err}; {fix}") from None
    except OSError as err:
        raise DataError(f"{folder / MANIFEST} cannot be read ({err.strerror}); {fix}") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{folder / MANIFEST} is not UTF-8 text (byte {err.start}); {fix}") from None
    sums = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        sums[name] = ("sha256", digest)
    return sums


def _file_digest(path: Path, algorithm: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    # Protocol-2 pickles written by Python 3 store bytes as `_codecs.encode(text, "latin1")`.
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"refusing to decode bytes as {encoding!r}")
    return codecs.encode(text, "latin1")


def _no_bytes(*args: Any) -> bytes:
    if args:
        raise pickle.UnpicklingError("a CIFAR-10 batch calls bytes() only for an empty array")
    return b""


class _ArrayType:
    """numpy.ndarray as a batch names it: the type numpy's _reconstruct builds, never called itself.
    Called, it takes a shape and strides over a buffer of any size: 150 bytes that ask for 14 GiB."""

    def __call__(self, *args: Any) -> NoReturn:
        raise pickle.UnpicklingError(
            "a CIFAR-10 batch never calls numpy.ndarray; it builds arrays by _reconstruct"
        )


class _Uint8:
    """numpy.dtype as a batch calls it: CIFAR-10's arrays hold pixels, uint8. A real dtype would take
    whatever state the pickle gives it next, a subarray shape or the flag that reads bytes as object
    pointers among them."""

    def __setstate__(self, state: Any) -> None:
        pass  # whatever the pickle says of it, an array of this type is read as uint8


# numpy's name for uint8, as Python 2 and numpy 2 write it (`b` in _reconstruct's placeholder).
_UINT8_NAMES = frozenset({"u1", "|u1", "b"})


def _uint8(name: Any, *args: Any) -> _Uint8:
    text = name.decode("latin1") if isinstance(name, bytes) else name
    if text not in _UINT8_NAMES:
        raise pickle.UnpicklingError(f"a CIFAR-10 batch holds uint8 arrays, not {str(name)[:40]!r}")
    return _Uint8()


class _Array:
    """An array as a batch's pickle builds it, by _reconstruct and then its state: made only once its
    bytes are known, of exactly those bytes, so a batch makes numpy allocate no more than it carries
    (a shape that claims more is refused) and its bytes are read as nothing but pixels."""

    def __init__(self) -> None:
        self._array: np.ndarray = np.zeros(0, np.uint8)

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], _Uint8)):
            raise pickle.UnpicklingError("an array's state is not that of a numpy uint8 array")
        _, shape, _, fortran, raw = state
        if isinstance(raw, str):  # Python 2's str, read as latin1
            raw = raw.encode("latin1")
        if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0 for n in shape)):
            raise pickle.UnpicklingError(f"an array's shape {str(shape)[:40]} is no shape")
        if not isinstance(raw, bytes) or math.prod(shape) != len(raw):
            raise pickle.UnpicklingError(
                f"an array of shape {str(shape)[:40]} claims other than the {len(raw)} bytes it carries"
            )
        self._array = np.frombuffer(raw, np.uint8).reshape(shape, order="F" if fortran else "C")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array

    @property
    def rows(self) -> int:
        """How many rows the array has (a 0-d array is one value)."""
        return len(self._array) if self._array.ndim else 1


_ARRAY_TYPE = _ArrayType()


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> _Array:
    if subtype is not _ARRAY_TYPE:
        raise pickle.UnpicklingError("a CIFAR-10 batch reconstructs plain numpy arrays only")
    _uint8(dtype)
    return _Array()


# The only globals CIFAR-10's batches name: numpy's array reconstruction (numpy.core in the
# Python 2 originals, numpy._core in files numpy 2 writes) and, in protocol-2 files written by
# Python 3, the bytes decoder. Anything else (os.system, builtins.eval, ...) is refused, and numpy's
# own are stood in for by what builds a uint8 array of the bytes the file carries.
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): _ARRAY_TYPE,
    ("numpy", "dtype"): _uint8,
    ("_codecs", "encode"): _latin1_encode,
    # numpy writes an empty array's data as a call of bytes() with no argument.
    ("__builtin__", "bytes"): _no_bytes,
    ("builtins", "bytes"): _no_bytes,
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"a CIFAR-10 batch never refers to {module}.{name}") from None


def _unpickle(raw: bytes) -> Any:
    # latin1 turns Python 2's str (keys, labels' names) into str and leaves numpy's raw bytes intact.
    return _BatchUnpickler(io.BytesIO(raw), encoding="latin1").load()


def _not_cifar10_shaped(batch: Any) -> str | None:
    """Why an unpickled batch is not shaped as CIFAR-10's batches are, or None: its data one uint8
    array made of the file's own bytes, of at most BATCH_IMAGES rows, and its labels a list of at
    most BATCH_IMAGES numbers. Checked before numpy builds either: a pickle's memo writes a
    reference to one row or one list in two bytes, so a list of such references, however short its
    file, would have numpy build an array of every one."""
    if not isinstance(batch, dict):
        return f"is a pickled {type(batch).__name__}, not a CIFAR-10 batch (a dict of data and labels)"
    images, labels = batch.get("data"), batch.get("labels")
    if not isinstance(images, _Array):
        return f"holds its data as a {type(images).__name__}, not as one numpy uint8 array"
    if images.rows > BATCH_IMAGES:
        return f"holds {images.rows} images, more than the {BATCH_IMAGES} of a CIFAR-10 batch"
    if isinstance(labels, _Array):
        count = labels.rows  # of the file's own bytes, as the data
    elif isinstance(labels, list) and all(isinstance(label, int | float) for label in labels):
        count = len(labels)
    else:
        return "holds its labels as other than a list of numbers"
    if count > BATCH_IMAGES:
        return f"holds {count} labels, more than the {BATCH_IMAGES} of a CIFAR-10 batch"
    return None


def _read_batch(path: Path, sums: dict[str, tuple[str, str]]) -> Split:
    root = path.parent.parent
    fix = f"delete it and fetch the dataset again (`python -m trainer data download --dir {root}`)"
    # The dataset sits on the shared export: read as a run's files are (no link, no pipe or
    # device), and refused by its size before a byte is read or hashed.
    try:
        raw = runfolders.read_in(str(path.parent), path.name, MAX_BATCH_BYTES)
    except FileNotFoundError:
        raise DataError(f"{path} is missing; {fix}") from None
    except runfolders.Unfit as err:
        raise DataError(f"{err}; {fix}") from None
    except OSError as err:
        raise DataError(f"{path} cannot be read ({err.strerror}); {fix}") from None
    algorithm, expected = sums.get(path.name, ("sha256", ""))
    if hashlib.new(algorithm, raw).hexdigest() != expected:
        raise DataError(
            f"{path} does not match its recorded {algorithm} checksum (tampered or corrupt),"
            f" so it is not unpickled; {fix}"
        )
    try:
        batch = _unpickle(raw)
    except Exception as err:  # a truncated pickle raises any of several types
        raise DataError(f"{path} is corrupt or truncated ({type(err).__name__}: {err}); {fix}") from None
    why = _not_cifar10_shaped(batch)
    if why is not None:
        raise DataError(f"{path} {why}; {fix}")
    data, labels = np.asarray(batch["data"]), np.asarray(batch["labels"])
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
    if train > CIFAR10_TRAIN_IMAGES or test > BATCH_IMAGES:
        raise DataError(
            f"synthetic data holds at most CIFAR-10's {CIFAR10_TRAIN_IMAGES} training and {BATCH_IMAGES}"
            f" test images (asked for {str(train)[:12]} and {str(test)[:12]}); give --train and --test"
            " at most those"
        )
    rng = np.random.default_rng(seed)
    patterns = rng.uniform(40, 215, size=(len(CLASSES), 3, 4, 4))
    folder = root / DATASET_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    chunks = np.array_split(np.arange(train), len(TRAIN_FILES))
    for number, (name, chunk) in enumerate(zip(TRAIN_FILES, chunks, strict=True), start=1):
        _write_batch(folder / name, f"training batch {number} of 5", _images(rng, patterns, len(chunk)))
    _write_batch(folder / TEST_FILE, "testing batch 1 of 1", _images(rng, patterns, test))
    meta = {"num_cases_per_batch": len(chunks[0]), "label_names": list(CLASSES), "num_vis": ROW}
    _pickle(folder / META_FILE, meta)
    record_manifest(folder)
    return folder


def record_manifest(folder: Path) -> None:
    """Record the batches' sha256 sums in `folder`'s manifest, which `load` then holds them to."""
    names = [name for name in (*TRAIN_FILES, TEST_FILE) if (folder / name).is_file()]
    lines = [f"{_file_digest(folder / name, 'sha256')}  {name}" for name in names]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")


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
    folder = root / DATASET_FOLDER
    return [
        name
        for name, md5 in published_md5s().items()
        if not (folder / name).is_file() or _file_digest(folder / name, "md5") != md5
    ]


def download(root: Path) -> str:
    """Fetch CIFAR-10 into `root` unless it is already there and verified; returns what happened."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import download_and_extract_archive

    if not verify(root):
        return f"CIFAR-10 at {root / DATASET_FOLDER} is present and verified; nothing to do"
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
    return f"CIFAR-10 downloaded into {root / DATASET_FOLDER} and verified"
