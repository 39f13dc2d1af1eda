"""The numbers of a run, from a batch to its metrics: the learning-rate schedule, the step, the
lookahead, evaluation with test-time augmentation, and the divergence checks.

Nothing here reads a file, a signal or the pod; `trainer.train` drives it through a run's life.
Nothing here waits for the device inside an epoch either: a step leaves its sums on the device,
counters stay on the host, and the host reads the sums once, at the epoch's end.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer import data, distributed
from trainer.errors import RunFailed
from trainer.loader import Normalise, translate
from trainer.model import Recipe
from trainer.precision import Precision

# The cross-entropy of a uniform guess over the classes (ln 10): what an untrained net scores,
# with or without label smoothing. An epoch whose mean train loss is DIVERGENCE_FACTOR times that
# has diverged (docs/trainer.md, "Divergence").
CHANCE_LOSS = math.log(len(data.CLASSES))
DIVERGENCE_FACTOR = 10
DIVERGED_LOSS = DIVERGENCE_FACTOR * CHANCE_LOSS


class Diverged(RunFailed):
    """The loss stopped being a number, or grew far past a uniform guess's; the run is marked failed."""


def schedule(step: int, total: int, shape: tuple[float, float, float]) -> float:
    """Piecewise-linear learning-rate multiplier before step `step` of `total` (from 0): `start`
    -> 1 at step int(peak x total) -> `end` at `total`. The peak falls on a whole step, as in
    airbench94's `triangle` (airbench/utils.py; 109 of 476 steps)."""
    start, peak, end = shape
    warmup = int(peak * total)
    if step < warmup:
        return start + (1 - start) * step / warmup
    return 1 + (end - 1) * (step - warmup) / (total - warmup)


class Lookahead:
    """airbench's lookahead: every few steps the weights move to an average that trails them.

    It averages every floating-point tensor of the net's state, BatchNorm's running statistics
    included, as airbench does (`LookaheadState` in airbench/utils.py keeps the whole state_dict).
    """

    def __init__(self, net: nn.Module, every: int, decay: float) -> None:
        self.every, self.decay = every, decay
        self.fast = [t for t in net.state_dict(keep_vars=False).values() if t.is_floating_point()]
        self.slow = [t.detach().clone() for t in self.fast]
        # CUDA's multi-tensor kernels take lists of one dtype; mixed ones fall back to a kernel per
        # tensor (ATen ForeachUtils.h, `_check_tensors_share_device_and_dtype`). float16 weights
        # and float32 BatchNorm state are therefore averaged in a call each.
        by_type: dict[torch.dtype, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for fast, slow in zip(self.fast, self.slow, strict=True):
            fasts, slows = by_type.setdefault(fast.dtype, ([], []))
            fasts.append(fast)
            slows.append(slow)
        self.groups = list(by_type.values())

    @torch.no_grad()
    def after_step(self, step: int, total: int) -> None:
        """airbench's rule after step `step` of `total` (`train` in airbench/utils.py): every
        `every` steps the average moves towards the weights and the weights take it; after the
        last step the weights take the average, which holds a share of the last steps only when
        that step is itself a multiple of `every` (airbench94's 476 end on step 475's average)."""
        if step % self.every == 0:
            decay = self.decay**self.every * (step / total) ** 3
            for fast, slow in self.groups:
                torch._foreach_lerp_(slow, fast, 1 - decay)
                torch._foreach_copy_(fast, slow)
        elif step == total:
            for fast, slow in self.groups:
                torch._foreach_copy_(fast, slow)


class Numerics:
    """The net, its optimizer and its input pipeline on one device, stepped and evaluated."""

    def __init__(
        self,
        net: nn.Module,
        recipe: Recipe,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        precision: Precision,
        label_smoothing: float,
    ) -> None:
        self.net = net
        self.model = net  # the module a step runs: DDP's wrapper or a compiled net, once chosen
        self.recipe = recipe
        self.optimizer = optimizer
        self.device = device
        self.label_smoothing = label_smoothing
        # channels_last on every device: CPU convolutions (oneDNN) gain as much as cuDNN's.
        self.normalise = Normalise(device, precision.dtype, torch.channels_last)
        self.lookahead = (
            Lookahead(net, recipe.lookahead_every, recipe.lookahead_decay) if recipe.lookahead else None
        )

    def set_learning_rates(self, step: int, total: int, epoch: int) -> None:
        multiplier = schedule(step, total, self.recipe.schedule)
        for group in self.optimizer.param_groups:
            # A frozen whitening bias keeps its value: SGD's update is the rate times its buffer.
            frozen = group["name"] == "whiten_bias" and epoch >= self.recipe.whiten_bias_epochs
            group["lr"] = 0.0 if frozen else group["base_lr"] * multiplier

    def step(
        self, images: torch.Tensor, labels: torch.Tensor, parts: int, scale: float, sums: torch.Tensor
    ) -> None:
        """One optimizer step over a rank's batch in `parts` micro-batches; the loss is summed and
        multiplied by `scale` (DDP averages it over the ranks; trainer.precision says why a GPU sums).
        Adds the batch's loss sum and correct count to `sums` (float64, on the device)."""
        # A GPU step is bound by launching its kernels, so the sums take as few as they can: each
        # an in-place add that casts as it adds, and no multiply by a scale of 1.
        loss_sum, correct = sums.unbind()
        for index, (x, y) in enumerate(zip(images.chunk(parts), labels.chunk(parts), strict=True)):
            syncing = index == parts - 1 or not hasattr(self.model, "no_sync")
            context = contextlib.nullcontext() if syncing else self.model.no_sync()
            with context:
                logits = self.model(self.normalise(x)).float()
                loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing, reduction="sum")
                (loss if scale == 1 else loss * scale).backward()
            loss_sum += loss.detach()
            correct += (logits.argmax(1) == y).sum()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def evaluate(self, test: tuple[torch.Tensor, torch.Tensor], tta: int, batch: int) -> tuple[float, float]:
        """Test loss and accuracy over every rank's shard of the test set, with `tta` augmentation."""
        distributed.broadcast_buffers(self.net)
        self.net.eval()
        images, labels = test
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)
        for x, y in zip(images.split(batch), labels.split(batch), strict=True):
            logits = self.tta_logits(self.normalise(x), tta).float()
            correct = (logits.argmax(1) == y).sum()
            sums += torch.stack([F.cross_entropy(logits, y, reduction="sum").double(), correct.double()])
        self.net.train()
        loss, correct, seen = distributed.sum_all([*sums.tolist(), float(len(labels))])
        return loss / seen, correct / seen

    def tta_logits(self, x: torch.Tensor, level: int) -> torch.Tensor:
        """Level 0: the image; 1: averaged with its mirror; 2: also with one-pixel shifts of both."""

        def mirrored(batch: torch.Tensor) -> torch.Tensor:
            return self.net(batch) if level == 0 else 0.5 * (self.net(batch) + self.net(batch.flip(3)))

        logits = mirrored(x)
        if level < 2:
            return logits
        pad = self.recipe.translate
        shifts = [torch.full((len(x), 2), pad + d, device=x.device) for d in (-1, 1)]
        return 0.5 * logits + 0.25 * sum(mirrored(translate(x, s, pad)) for s in shifts)


def check_finite(where: str, lr: float, rank: int, **losses: float) -> None:
    """Raise on every rank alike when a loss (summed over the ranks) is not a number."""
    if not all(math.isfinite(value) for value in losses.values()):
        _diverged(where, ", ".join(f"{name} loss {value}" for name, value in losses.items()), lr, rank)


def check_below_divergence(where: str, lr: float, rank: int, train_loss: float) -> None:
    """Raise on every rank alike when an epoch's mean train loss (the same sum on every rank) is
    DIVERGENCE_FACTOR times a uniform guess's or more."""
    if train_loss >= DIVERGED_LOSS:
        reason = (
            f"train loss {train_loss:.4g} is at least {DIVERGED_LOSS:.1f}, {DIVERGENCE_FACTOR} times a"
            f" uniform guess's (ln {len(data.CLASSES)})"
        )
        _diverged(where, reason, lr, rank)


def _diverged(where: str, reason: str, lr: float, rank: int) -> None:
    error = Diverged(
        f"training diverged in {where}: {reason}; lower --lr (it is {lr:g}) or check the data, then"
        " start again with --fresh (the checkpoints hold only the epochs before)"
    )
    error.echo = rank != 0
    raise error
