"""The epoch on the device: rank shards, mid-epoch resume and augmentation depend only on (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.config import ConfigurationError
from trainer.data import Split
from trainer.loader import Shard, TrainLoader, flips, translate
from trainer.model import RECIPES

IMAGES = Split(
    images=np.random.default_rng(0).integers(0, 256, size=(96, 3, 32, 32), dtype=np.uint8),
    labels=np.arange(96) % 10,
)
PAD = RECIPES["airbench"].translate


def _loader(rank: int, world: int, cutout: int = 0) -> TrainLoader:
    return TrainLoader(IMAGES, torch.device("cpu"), 32, Shard(rank, world), 5, cutout, PAD)


def test_two_ranks_together_see_exactly_the_one_rank_batches() -> None:
    single = list(_loader(0, 1, cutout=6).batches(epoch=3))
    halves = zip(
        _loader(0, 2, cutout=6).batches(epoch=3), _loader(1, 2, cutout=6).batches(epoch=3), strict=True
    )
    assert len(single) == 3
    for (images, labels), ((a, la), (b, lb)) in zip(single, halves, strict=True):
        assert torch.equal(images, torch.cat([a, b])) and torch.equal(labels, torch.cat([la, lb]))


def test_a_resumed_epoch_continues_with_the_same_batches() -> None:
    full = list(_loader(1, 2).batches(epoch=2))
    tail = list(_loader(1, 2).batches(epoch=2, start_step=1))
    assert len(tail) == 2
    for (images, labels), (again, labels_again) in zip(full[1:], tail, strict=True):
        assert torch.equal(images, again) and torch.equal(labels, labels_again)
    assert list(_loader(1, 2).batches(epoch=2, start_step=3)) == [], "an epoch resumed at its end"


def test_epochs_shuffle_and_augment_differently() -> None:
    first = next(_loader(0, 1).batches(epoch=0))[0]
    second = next(_loader(0, 1).batches(epoch=1))[0]
    assert not torch.equal(first, second)


def test_translation_moves_each_image_by_its_own_offset() -> None:
    images = torch.from_numpy(IMAGES.images[:2])
    centred = torch.full((2, 2), PAD)
    assert torch.equal(translate(images, centred, PAD), images)
    moved = translate(images, torch.tensor([[PAD + 1, PAD], [PAD, PAD - 1]]), PAD)
    assert torch.equal(moved[0, :, :-1], images[0, :, 1:]), "image 0 shifted up by one row"
    assert torch.equal(moved[1, :, :, 1:], images[1, :, :, :-1]), "image 1 shifted right by one column"


def test_a_batch_that_does_not_divide_over_the_ranks_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="global batch size 32 must divide evenly over 3 ranks"):
        _loader(0, 3)
    with pytest.raises(ConfigurationError, match="exceeds the 96 training images"):
        TrainLoader(IMAGES, torch.device("cpu"), 128, Shard(0, 1), 0, 0, PAD)


def test_alternating_flips_show_every_image_both_ways_across_two_epochs() -> None:
    count = 1000
    for epoch in (0, 1, 6):
        this, following = flips(count, seed=5, epoch=epoch), flips(count, seed=5, epoch=epoch + 1)
        assert torch.equal(this, ~following), f"epochs {epoch} and {epoch + 1} mirror complementary halves"
        assert 400 < int(this.sum()) < 600, "a random half of the images, not all or none"
    assert torch.equal(flips(count, seed=5, epoch=0), flips(count, seed=5, epoch=2))
    assert not torch.equal(flips(count, seed=5, epoch=0), flips(count, seed=6, epoch=0)), (
        "the half follows the seed"
    )


def test_the_loader_mirrors_by_the_alternating_plan() -> None:
    """Two epochs' batches, translations undone by comparing the centre, hold each image once mirrored."""
    # Every centre each image shows, mirrored or not, at every translation, found by its bytes.
    views: dict[bytes, set[tuple[int, bool]]] = {}
    for index, original in enumerate(torch.from_numpy(IMAGES.images)):
        for mirrored in (False, True):
            view = original.flip(2) if mirrored else original
            for dy in range(2 * PAD + 1):
                for dx in range(2 * PAD + 1):
                    crop = view[:, PAD + dy : PAD + dy + 24, PAD + dx : PAD + dx + 24]
                    views.setdefault(crop.contiguous().numpy().tobytes(), set()).add((index, mirrored))
    seen: dict[int, set[bool]] = {}
    loader = _loader(0, 1)
    for epoch in (4, 5):
        for images, _ in loader.batches(epoch):
            for image in images:
                centre = image[:, PAD * 2 : -PAD * 2, PAD * 2 : -PAD * 2]
                for index, mirrored in views.get(centre.contiguous().numpy().tobytes(), ()):
                    seen.setdefault(index, set()).add(mirrored)
    assert {index: sides for index, sides in seen.items() if sides != {False, True}} == {}
    assert len(seen) == len(IMAGES.images)
