"""The recipe table against airbench94's published values, and the unit conversion between them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from trainer.contract import AIRBENCH
from trainer.hyperparameters import from_airbench94, value
from trainer.model import RECIPES, Airbench, param_groups
from trainer.numerics import Lookahead, schedule

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
    def ours(name: str) -> float:
        return value(name, AIRBENCH)

    lr, weight_decay = from_airbench94(
        AIRBENCH94["lr"], AIRBENCH94["weight_decay"], AIRBENCH94["momentum"], AIRBENCH94["batch_size"]
    )
    # The table states three significant figures of the converted values.
    assert ours("lr") == pytest.approx(lr, rel=5e-3)
    assert ours("weight_decay") == pytest.approx(weight_decay, rel=5e-3)
    assert ours("momentum") == AIRBENCH94["momentum"]
    assert ours("batch_size") == AIRBENCH94["batch_size"]
    assert ours("bias_scale") == AIRBENCH94["bias_scaler"]
    assert ours("label_smoothing") == AIRBENCH94["label_smoothing"]
    assert ours("epochs") == AIRBENCH94["train_epochs"]
    assert ours("whiten_bias_epochs") == AIRBENCH94["whiten_bias_epochs"]
    assert ours("schedule") == AIRBENCH94["schedule"]


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


def _airbench(width: int = 8) -> Airbench:
    torch.manual_seed(0)
    return Airbench(width)


def test_3x3_convolutions_start_as_the_identity_on_their_inputs() -> None:
    """airbench94's `Conv.reset_parameters`: dirac on the first `in_channels` filters."""
    convs = [m for m in _airbench().modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 6
    assert any(conv.out_channels > conv.in_channels for conv in convs)
    for conv in convs:
        n = min(conv.in_channels, conv.out_channels)
        identity = torch.zeros(n, conv.in_channels, 3, 3)
        identity[range(n), range(n), 1, 1] = 1
        assert torch.equal(conv.weight[:n].detach(), identity)
        if conv.out_channels > n:
            assert conv.weight[n:].abs().sum() > 0, "the other filters keep torch's random draw"


def test_the_whitening_bias_starts_at_zero_and_trains_at_the_weights_rate() -> None:
    net = _airbench()
    assert torch.equal(net.whiten.bias.detach(), torch.zeros(24))
    recipe, lr = RECIPES[AIRBENCH], value("lr", AIRBENCH)
    groups = {g["name"]: g for g in param_groups(net, recipe, lr, value("weight_decay", AIRBENCH))}
    assert groups["whiten_bias"]["lr"] == groups["weights"]["lr"] == lr
    assert groups["biases"]["lr"] == lr * recipe.bias_scale


def test_whitening_uses_the_uncentred_second_moment_of_the_patches() -> None:
    """Filters that whiten the uncentred moment: F M Fᵀ = λ / (λ + eps) for each +/- pair."""
    torch.manual_seed(1)
    images = torch.randn(64, 3, 8, 8) + 2.0  # far from centred, where the two covariances differ
    net = _airbench()
    net.init_whitening(images)
    patches = images.double().unfold(2, 2, 1).unfold(3, 2, 1).transpose(1, 3).reshape(-1, 12)
    moment = patches.T @ patches / len(patches)
    filters = net.whiten.weight.detach().double().flatten(1)[:12]
    eigenvalues = torch.linalg.eigvalsh(moment)
    expected = torch.diag(eigenvalues / (eigenvalues + net.whiten_eps))
    torch.testing.assert_close(filters @ moment @ filters.T, expected, rtol=1e-4, atol=1e-4)


def test_the_lookahead_averages_batchnorm_running_statistics_too() -> None:
    net = _airbench()
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    lookahead = Lookahead(net, every=5, decay=0.95)
    before = [n.running_mean.clone() for n in norms]
    for norm in norms:
        norm.running_mean.add_(1.0)
    lookahead.after_step(step=9, total=9)  # the last step: the net takes the average
    for norm, start in zip(norms, before, strict=True):
        torch.testing.assert_close(norm.running_mean, start)


@pytest.mark.parametrize("total", [476, 480])
def test_the_schedule_is_airbench94s_triangle_peaking_on_a_whole_step(total: int) -> None:
    """airbench94's `triangle(total, start=0.2, end=0.07, peak=0.23)`: linear through
    (0, 0.2), (int(0.23 x total), 1), (total, 0.07), read at the step about to be taken."""
    peak = int(AIRBENCH94["schedule"][1] * total)
    assert peak == {476: 109, 480: 110}[total]
    start, _, end = AIRBENCH94["schedule"]
    for step in range(total):
        expected = float(np.interp(step, [0, peak, total], [start, 1.0, end]))
        assert schedule(step, total, RECIPES[AIRBENCH].schedule) == pytest.approx(expected, abs=1e-12), step
