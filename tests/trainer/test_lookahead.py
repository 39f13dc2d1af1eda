"""The lookahead's rule, step by step, against airbench's on a toy sequence of weights.

airbench (the pinned package's `train` in airbench/utils.py, as legacy/airbench94.py in
KellerJordan/cifar10-airbench) does, after each step s of a run of T:

- when s is a multiple of 5, the average moves towards the weights by 1 - d(s), with
  d(s) = 0.95**5 * (s / T)**3, and the weights take the average;
- when s is T, the weights take the average (airbench's `update` with decay 1).

So a run whose last step is a multiple of 5 keeps a share 1 - 0.95**5 (about 23 %) of its last
five steps; one whose last step is not ends on the average of its last multiple of 5 (airbench94's
476 steps end on the average of step 475).
"""

from __future__ import annotations

import pytest
import torch
from airbench.utils import LookaheadState
from torch import nn

from trainer.numerics import Lookahead

EVERY, DECAY = 5, 0.95


def _toy() -> nn.Module:
    net = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(-1.0)
    return net


def _weights(step: int) -> float:
    """What a step leaves in the toy net before the lookahead acts: any sequence that moves."""
    return float(step * step)


def _by_the_rule(total: int) -> float:
    """The net's last weight under airbench's rule (the module docstring), by hand."""
    weight, average = -1.0, -1.0
    for step in range(1, total + 1):
        weight = _weights(step)
        if step % EVERY == 0:
            decay = DECAY**EVERY * (step / total) ** 3
            average += (1 - decay) * (weight - average)
            weight = average
        if step == total:
            weight = average
    return weight


def _with_airbenchs_state(total: int) -> float:
    """The same sequence through the pinned package's own LookaheadState, called as its `train` does."""
    net = _toy()
    state = LookaheadState(net)
    schedule = DECAY**EVERY * (torch.arange(total + 1) / total) ** 3
    for step in range(1, total + 1):
        with torch.no_grad():
            net.weight.fill_(_weights(step))
        if step % EVERY == 0:
            state.update(net, decay=schedule[step].item())
        if step >= total:
            state.update(net, decay=1.0)
    return net.weight.item()


def _with_the_trainers(total: int) -> float:
    net = _toy()
    lookahead = Lookahead(net, EVERY, DECAY)
    for step in range(1, total + 1):
        with torch.no_grad():
            net.weight.fill_(_weights(step))
        lookahead.after_step(step, total)
    return net.weight.item()


@pytest.mark.parametrize("total", [10, 11, 475, 476, 480])
def test_the_last_step_follows_airbenchs_rule(total: int) -> None:
    expected = _by_the_rule(total)
    assert _with_airbenchs_state(total) == pytest.approx(expected, rel=1e-6), "the rule as airbench runs it"
    assert _with_the_trainers(total) == pytest.approx(expected, rel=1e-6)


def test_a_last_step_on_a_multiple_of_five_keeps_a_share_of_the_last_steps() -> None:
    """T = 10: the net ends between step 5's average and step 10's weights, not on step 5's average."""
    average_at_5 = -1.0 + (1 - DECAY**EVERY * (5 / 10) ** 3) * (_weights(5) + 1.0)
    kept = 1 - DECAY**EVERY  # at s = T, d(T) = 0.95**5
    assert _with_the_trainers(10) == pytest.approx(average_at_5 + kept * (_weights(10) - average_at_5))
