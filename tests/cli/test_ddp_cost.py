"""The arithmetic behind doctor's DDP advice, checked against numbers worked out by hand."""

from __future__ import annotations

import pytest

from lab.cli.support.ddp_cost import Advice, ddp_cost, ring_allreduce_seconds
from lab.config import Model

GBE = 1e9
RESNET9_BYTES = 6_600_000 * 4  # 26.4 MB of fp32 gradients


def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_gradient() -> None:
    # Two ranks: each sends the whole gradient once (2 * 1/2), 211 ms for 26.4 MB over 1 GbE.
    assert ring_allreduce_seconds(RESNET9_BYTES, 2, GBE) == pytest.approx(0.2112)
    assert ring_allreduce_seconds(RESNET9_BYTES, 2, 10 * GBE) == pytest.approx(0.02112)
    # Four ranks move 2 * 3/4 = 1.5 gradients.
    assert ring_allreduce_seconds(RESNET9_BYTES, 4, GBE) == pytest.approx(0.3168)
    assert ring_allreduce_seconds(RESNET9_BYTES, 1, GBE) == 0.0


def test_cpu_training_hides_a_gigabit_link() -> None:
    # airbench, 2 ranks, batch 512 on CPU: 256 images / 260 per s = 985 ms against 64 ms of all-reduce.
    cost = ddp_cost(Model.AIRBENCH, 2, 512, GBE, gpu=False, can_pack=False)
    assert cost.compute_seconds == pytest.approx(256 / 260)
    assert cost.allreduce_seconds == pytest.approx(0.064)
    assert cost.advice is Advice.SPREAD
    assert cost.speedup == pytest.approx((512 / 260) / (256 / 260 + 0.064))


def test_fast_gpus_on_a_gigabit_link_are_slower_than_one() -> None:
    cost = ddp_cost(Model.AIRBENCH, 2, 1024, GBE, gpu=True, can_pack=False)
    assert cost.ratio > 10 and cost.speedup < 1
    assert cost.advice is Advice.POWERSGD
    assert ddp_cost(Model.AIRBENCH, 2, 1024, GBE, gpu=True, can_pack=True).advice is Advice.PACK


def test_halving_the_bytes_is_enough_on_a_fast_link() -> None:
    # ResNet-9 on GPUs, batch 512: 17.1 ms of compute per rank; 20 Gbit/s all-reduces in 10.6 ms (ratio 0.62),
    # and fp16/bf16 gradients would take 5.3 ms (0.31): still above a quarter.
    assert ddp_cost(Model.RESNET9, 2, 512, 20 * GBE, gpu=True, can_pack=False).advice is Advice.POWERSGD
    # At 40 Gbit/s: 5.3 ms (ratio 0.31) full, 2.6 ms compressed: compression suffices.
    assert ddp_cost(Model.RESNET9, 2, 512, 40 * GBE, gpu=True, can_pack=False).advice is Advice.COMPRESS
    assert ddp_cost(Model.RESNET9, 2, 512, 100 * GBE, gpu=True, can_pack=False).advice is Advice.SPREAD
