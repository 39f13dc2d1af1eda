"""The epoch on the device: images held as uint8 tensors, shuffled and augmented by (seed, epoch).

Every random choice of an epoch (order, translations, cutout) is drawn from a generator seeded by
(seed, epoch) for the whole dataset at once, and its flips from the seed and the epoch's parity,
so a rank's batches depend only on the step, the rank and the world size: a run resumed
mid-epoch sees exactly the batches it would have.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from trainer.config import ConfigurationError
from trainer.data import PIXEL_MEAN, PIXEL_STD, Split
from trainer.hyperparameters import MAX_EPOCHS

# The generator stream of the first epoch's flips: an epoch number no run reaches.
FLIP_STREAM = MAX_EPOCHS + 1


@dataclass(frozen=True)
class Shard:
    rank: int
    world_size: int


def to_device(split: Split, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(split.images).to(device), torch.from_numpy(split.labels).to(device)


class Normalise:
    """uint8 images to the net's input: per-channel standardised, in `dtype` and `memory_format`.

    The statistics are device tensors made once, so a step copies nothing from the host.
    """

    def __init__(
        self,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        memory_format: torch.memory_format = torch.contiguous_format,
    ) -> None:
        self.mean = torch.tensor(PIXEL_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(PIXEL_STD, device=device).view(1, 3, 1, 1)
        self.dtype = dtype
        self.memory_format = memory_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = ((images.float() - self.mean) / self.std).to(self.dtype)
        return x.contiguous(memory_format=self.memory_format)


class TrainLoader:
    """Batches of one rank's share of a fixed global batch, augmented on the device."""

    def __init__(
        self,
        split: Split,
        device: torch.device,
        batch_size: int,
        shard: Shard,
        seed: int,
        cutout: int,
        translate: int,
    ) -> None:
        if batch_size % shard.world_size:
            raise ConfigurationError(
                f"the global batch size {batch_size} must divide evenly over {shard.world_size} ranks"
            )
        if batch_size > len(split.labels):
            raise ConfigurationError(
                f"the batch size {batch_size} exceeds the {len(split.labels)} training images"
            )
        images, self.labels = to_device(split, device)
        # Padded once for the whole set (reflect padding needs floats), so a step only crops.
        self.padded = _reflect_pad(images, translate)
        self.device = device
        self.batch_size = batch_size
        self.local = batch_size // shard.world_size
        self.shard = shard
        self.seed = seed
        self.cutout = cutout
        self.translate = translate
        # The last partial batch is dropped so every step has the same global batch.
        self.steps_per_epoch = len(split.labels) // batch_size

    def batches(
        self, epoch: int, start_step: int = 0, steps: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batches of steps `start_step` to `steps` (default: the whole epoch) of `epoch`.

        A partial epoch (a run's step budget ending partway) takes the first steps of the whole
        epoch's plan, as airbench94 breaks out of its last epoch's loop.
        """
        # The plan crosses to the device once an epoch, and this rank's images of every step left
        # are augmented together, so a step only takes a slice: it neither waits on the host nor
        # launches a kernel (a GPU step is bound by launching its kernels).
        steps = self.steps_per_epoch if steps is None else min(steps, self.steps_per_epoch)
        if start_step >= steps:
            return  # resumed at its end: no step left (split would make one empty batch)
        plan = _EpochPlan(len(self.labels), self.seed, epoch, self.cutout, self.translate)
        plan = plan.to(self.device)
        # Step s takes the global batch order[s * batch : (s + 1) * batch], rank r its r-th share.
        shares = plan.order[: steps * self.batch_size].view(steps, self.shard.world_size, self.local)
        chosen = shares[start_step:, self.shard.rank].flatten()
        images = plan.augment(self.padded[chosen], chosen)
        yield from zip(images.split(self.local), self.labels[chosen].split(self.local), strict=True)


def _generator(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + stream)


def flips(count: int, seed: int, epoch: int) -> torch.Tensor:
    """Which images an epoch mirrors: a random half in even epochs and the other half in odd ones.

    airbench's alternating flip (Jordan, "94% on CIFAR-10 in 3.29 seconds on a single GPU",
    arXiv:2404.00498, "alternating flip"): over any two consecutive epochs every image is seen in
    both orientations, where independent coin flips show a quarter of them the same way twice.
    """
    first = torch.randint(0, 2, (count,), generator=_generator(seed, FLIP_STREAM)).bool()
    return first ^ bool(epoch % 2)


class _EpochPlan:
    """Every random choice of one epoch, indexed by image so it is the same on every rank."""

    def __init__(self, count: int, seed: int, epoch: int, cutout: int, translate: int) -> None:
        generator = _generator(seed, epoch)
        self.order = torch.randperm(count, generator=generator)
        self.flip = flips(count, seed, epoch)
        self.shift = torch.randint(0, 2 * translate + 1, (count, 2), generator=generator)
        self.cutout = cutout
        self.corner = torch.randint(0, 32 - cutout + 1, (count, 2), generator=generator) if cutout else None

    def to(self, device: torch.device) -> _EpochPlan:
        self.order, self.flip, self.shift = (t.to(device) for t in (self.order, self.flip, self.shift))
        self.corner = self.corner.to(device) if self.corner is not None else None
        return self

    def augment(self, padded: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Padded images of `chosen` mirrored, moved and cut out by the plan (mirroring the padded
        image equals padding the mirrored one: reflection padding is symmetric)."""
        padded = torch.where(self.flip[chosen].view(-1, 1, 1, 1), padded.flip(3), padded)
        images = _crop(padded, self.shift[chosen])
        if self.corner is not None:
            images = _cut_out(images, self.corner[chosen], self.cutout)
        return images


def _reflect_pad(images: torch.Tensor, pad: int) -> torch.Tensor:
    return torch.nn.functional.pad(images.float(), (pad,) * 4, mode="reflect").to(images.dtype)


def translate(images: torch.Tensor, shift: torch.Tensor, pad: int) -> torch.Tensor:
    """Each image moved by its own (dy, dx) in 0..2*pad within a reflection-padded border of `pad`."""
    return _crop(_reflect_pad(images, pad), shift)


def _crop(padded: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """The 32x32 window of each padded image at its own (dy, dx) offset."""
    span = torch.arange(32, device=padded.device)
    rows = (shift[:, 0:1] + span).view(-1, 1, 32, 1)
    cols = (shift[:, 1:2] + span).view(-1, 1, 1, 32)
    batch = torch.arange(len(padded), device=padded.device).view(-1, 1, 1, 1)
    channels = torch.arange(3, device=padded.device).view(1, 3, 1, 1)
    return padded[batch, channels, rows, cols]


def _cut_out(images: torch.Tensor, corner: torch.Tensor, size: int) -> torch.Tensor:
    span = torch.arange(32, device=images.device)
    rows = (span >= corner[:, 0:1]) & (span < corner[:, 0:1] + size)
    cols = (span >= corner[:, 1:2]) & (span < corner[:, 1:2] + size)
    mask = rows.view(-1, 1, 32, 1) & cols.view(-1, 1, 1, 32)
    return images.masked_fill(mask, 0)


# Fewer optimizer steps than this per epoch cannot learn: the warm-up, the lookahead (every 5
# steps) and BatchNorm's running statistics all need steps, not epochs.
MIN_STEPS_PER_EPOCH = 10


def few_steps_warning(images: int, batch_size: int) -> str | None:
    """A warning when `batch_size` leaves too few steps per epoch on `images` to learn from."""
    steps = images // batch_size
    if steps >= MIN_STEPS_PER_EPOCH:
        return None
    fits = 2 ** int(math.log2(max(images // MIN_STEPS_PER_EPOCH, 1)))
    return (
        f"--batch-size {batch_size} leaves {steps} step(s) per epoch on {images:,} training images,"
        f" too few to learn; use --batch-size {fits} or less (or more data)"
    )
