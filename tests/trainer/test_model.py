"""The recipes against airbench94's published values, and the unit conversion between them."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.model import RECIPES, from_airbench94

# airbench94's `hyp['opt']` (KellerJordan/cifar10-airbench, airbench94.py): lr and weight decay per
# 1024 examples, its batch, momentum, bias scaler, label smoothing, epochs, whitening-bias epochs;
# the schedule is its `triangle(start=0.2, end=0.07, peak=0.23)`.
AIRBENCH94 = {
    "lr": 11.5,
    "weight_decay": 0.0153,
    "momentum": 0.85,
    "batch_size": 1024,
    "bias_scaler": 64.0,
    "label_smoothing": 0.2,
    "train_epochs": 9.9,
    "whiten_bias_epochs": 3,
    "schedule": (0.2, 0.23, 0.07),
}


def test_airbench_recipe_is_airbench94_converted() -> None:
    recipe = RECIPES["airbench"]
    lr, weight_decay = from_airbench94(
        AIRBENCH94["lr"], AIRBENCH94["weight_decay"], AIRBENCH94["momentum"], AIRBENCH94["batch_size"]
    )
    # The recipe states three significant figures of the converted values.
    assert recipe.lr == pytest.approx(lr, rel=5e-3)
    assert recipe.weight_decay == pytest.approx(weight_decay, rel=5e-3)
    assert recipe.momentum == AIRBENCH94["momentum"]
    assert recipe.bias_scale == AIRBENCH94["bias_scaler"]
    assert recipe.label_smoothing == AIRBENCH94["label_smoothing"]
    assert recipe.epochs == math.ceil(AIRBENCH94["train_epochs"])
    assert recipe.whiten_bias_epochs == AIRBENCH94["whiten_bias_epochs"]
    assert recipe.schedule == AIRBENCH94["schedule"]


@pytest.mark.parametrize("batch_size", [1024, 256])
def test_converted_rates_take_airbench94s_steps(batch_size: int) -> None:
    """SGD as airbench94 drives it (summed loss, its rate and decay) and SGD on the batch-mean loss
    with the converted values move the weights identically, step after step."""
    lr, weight_decay, momentum = AIRBENCH94["lr"], AIRBENCH94["weight_decay"], AIRBENCH94["momentum"]
    torch.manual_seed(0)
    start = torch.randn(8, 4, dtype=torch.float64)
    inputs = torch.randn(batch_size, 4, dtype=torch.float64)
    targets = torch.randn(batch_size, 8, dtype=torch.float64)
    # airbench94's `main`: rate lr / s, decay (weight_decay * batch / s) / (lr / s).
    scale = 1024 * (1 + 1 / (1 - momentum))
    theirs = start.clone().requires_grad_()
    their_sgd = torch.optim.SGD(
        [theirs], lr=lr / scale, weight_decay=weight_decay * batch_size / lr, momentum=momentum, nesterov=True
    )
    ours = start.clone().requires_grad_()
    our_lr, our_decay = from_airbench94(lr, weight_decay, momentum, batch_size)
    our_sgd = torch.optim.SGD([ours], lr=our_lr, weight_decay=our_decay, momentum=momentum, nesterov=True)
    for _ in range(5):
        for weights, optimizer, reduce in ((theirs, their_sgd, torch.sum), (ours, our_sgd, torch.mean)):
            optimizer.zero_grad()
            reduce(((inputs @ weights.T - targets) ** 2).sum(1)).backward()
            optimizer.step()
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)
    assert not torch.equal(ours, start)
