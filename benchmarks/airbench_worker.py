"""airbench94's own training code (the pinned `airbench` package) on a dataset in CIFAR-10's format.

    python benchmarks/airbench_worker.py --data DIR --epochs 3 --batch-size 512 --threads 1
        [--tta 0|1|2] [--seed N] [--airbench DIR]

Prints one JSON line: the training seconds of each epoch as airbench itself times them (its
`train` in airbench/utils.py, version 0.1.8, records a CUDA event pair around each epoch's step
loop and leaves evaluation out), its total_time_seconds (the whitening, the epochs and the final
evaluation with TTA: the figure airbench94 publishes), its final TTA accuracy and the torch it ran
on. The package is found where Python finds it, or in `--airbench DIR`, a folder holding the
`airbench` package (a copy of the pinned package, or a checkout of KellerJordan/cifar10-airbench:
its `airbench/` is the package), put first on the path; the repository holds none of its code.
It is written for one CUDA GPU; on a machine without one this worker makes its CUDA calls mean
the CPU, and nothing else:

- `nn.Module.cuda` and `.half` leave the net on the CPU in float32 (`make_net94` calls both);
- the loaders read their tensors onto the CPU (`CifarLoader` maps its file to `torch.device(gpu)`
  with `gpu=0` by default) and hold the images in float32, as the CPU convolutions need;
- `torch.cuda.Event` is a wall clock and `torch.cuda.synchronize` does nothing: on the CPU every
  operation has finished when it returns.

None of airbench's numerics, network or loop is changed or copied.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer import data  # noqa: E402

# CIFAR-10's class names, as airbench's loader stores them beside the tensors.
CLASSES = list(data.CLASSES)


class _WallClockEvent:
    """torch.cuda.Event's timing interface on the host clock."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: _WallClockEvent) -> float:
        return 1000 * (end.at - self.at)


def _on_cpu() -> None:
    import airbench.utils

    nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    nn.Module.half = lambda self: self  # type: ignore[method-assign]
    torch.cuda.Event = _WallClockEvent  # type: ignore[misc, assignment]
    torch.cuda.synchronize = lambda *args: None  # type: ignore[assignment]
    defaults = airbench.utils.CifarLoader.__init__.__defaults__
    assert defaults is not None and defaults[-1] == 0, "airbench's CifarLoader changed: check gpu=0"
    airbench.utils.CifarLoader.__init__.__defaults__ = (*defaults[:-1], "cpu")
    original = airbench.utils.CifarLoader.__init__

    def float_images(self: airbench.utils.CifarLoader, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        self.images = self.images.float()

    airbench.utils.CifarLoader.__init__ = float_images  # type: ignore[method-assign]


def _write_tensors(source: Path, folder: Path) -> None:
    """The dataset as airbench's loader caches it: `train.pt` and `test.pt` of NHWC uint8 images."""
    folder.mkdir(parents=True, exist_ok=True)
    for train, name in ((True, "train.pt"), (False, "test.pt")):
        if (folder / name).exists():
            continue  # written by an earlier round from the same data
        split = data.load(source, train)
        images = torch.from_numpy(split.images).permute(0, 2, 3, 1).contiguous()
        labels = torch.from_numpy(split.labels)
        torch.save({"images": images, "labels": labels, "classes": CLASSES}, folder / name)


def _rows(table: str) -> list[list[str]]:
    """The cells of airbench's printed table: run, epoch, train_loss, train_acc, val_acc,
    tta_val_acc, total_time_seconds (cumulative: the whitening, then each epoch)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()]
    return [row for row in rows if len(row) == 7]


def epoch_seconds(table: str) -> list[float]:
    """Each epoch's training seconds from airbench's printed table (its cumulative last column;
    the first epoch's holds the whitening too)."""
    totals = [float(row[6]) for row in _rows(table) if row[1].isdigit()]
    return [later - earlier for earlier, later in zip([0.0, *totals], totals, strict=False)]


def total(table: str) -> tuple[float, float]:
    """airbench's total_time_seconds and TTA accuracy, from its last row (`eval`)."""
    (final,) = [row for row in _rows(table) if row[1] == "eval"]
    return float(final[6]), float(final[5])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder holding cifar-10-batches-py/")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder for airbench's tensors")
    parser.add_argument("--epochs", type=float, required=True, help="airbench's: 9.9 ends partway")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--tta", type=int, choices=(0, 1, 2), default=0, help="the final evaluation's")
    parser.add_argument("--seed", type=int, help="torch's seed before the run (airbench takes none)")
    parser.add_argument("--airbench", type=Path, help="a folder holding the airbench package")
    args = parser.parse_args()
    if args.airbench:
        sys.path.insert(0, str(args.airbench.resolve()))
    torch.set_num_threads(args.threads)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    cuda = torch.cuda.is_available()
    if not cuda:
        _on_cpu()
    import airbench
    from airbench.lib_airbench94 import hyp

    _write_tensors(args.data, args.work / "cifar10")
    # train94 builds its test loader from ./cifar10 (airbench/utils.py, `train`).
    os.chdir(args.work)
    loader = airbench.CifarLoader(
        "cifar10", train=True, batch_size=args.batch_size, aug=hyp["aug"], altflip=True
    )
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        airbench.train94(loader, epochs=args.epochs, tta_level=args.tta)
    seconds, accuracy = total(table.getvalue())
    print(
        json.dumps(
            {
                "epoch_seconds": epoch_seconds(table.getvalue()),
                "total_seconds": seconds,
                "tta_accuracy": accuracy,
                "steps_per_epoch": len(loader),
                "device": torch.cuda.get_device_name() if cuda else "cpu",
                "torch": torch.__version__,
                "airbench": str(Path(airbench.__file__).parent),
            }
        )
    )


if __name__ == "__main__":
    main()
