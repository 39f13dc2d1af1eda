"""The arithmetic behind doctor's DDP advice, checked against numbers worked out by hand."""

from __future__ import annotations

import re

import pytest

from lab.cli.doctor.ddp_cost import GRADIENT_BYTES, MODELS, Advice, ddp_cost, ring_allreduce_seconds
from lab.config import Model
from lab.paths import ROOT

GBE = 1e9
RESNET9_BYTES = 6_573_120 * 4  # 26.3 MB of fp32 gradients


def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_gradient() -> None:
    # Two ranks: each sends the whole gradient once (2 * 1/2), 210 ms for 26.3 MB over 1 GbE.
    assert ring_allreduce_seconds(RESNET9_BYTES, 2, GBE) == pytest.approx(0.21034)
    assert ring_allreduce_seconds(RESNET9_BYTES, 2, 10 * GBE) == pytest.approx(0.021034)
    # Four ranks move 2 * 3/4 = 1.5 gradients.
    assert ring_allreduce_seconds(RESNET9_BYTES, 4, GBE) == pytest.approx(0.31551)
    assert ring_allreduce_seconds(RESNET9_BYTES, 1, GBE) == 0.0


def test_cpu_training_hides_a_gigabit_link() -> None:
    # airbench, 2 ranks, batch 512 on CPU: 256 images / 260 per s = 985 ms against 63 ms of all-reduce.
    cost = ddp_cost(Model.AIRBENCH, 2, 512, GBE, gpu=False, can_pack=False)
    assert cost.compute_seconds == pytest.approx(256 / 260)
    assert cost.allreduce_seconds == pytest.approx(0.063083, rel=1e-4)
    assert cost.advice is Advice.SPREAD
    assert cost.speedup == pytest.approx((512 / 260) / (256 / 260 + 0.063083), rel=1e-4)


def test_fast_gpus_on_a_gigabit_link_are_slower_than_one() -> None:
    cost = ddp_cost(Model.AIRBENCH, 2, 1024, GBE, gpu=True, can_pack=False)
    assert cost.ratio > 10 and cost.speedup < 1
    assert cost.advice is Advice.POWERSGD
    assert ddp_cost(Model.AIRBENCH, 2, 1024, GBE, gpu=True, can_pack=True).advice is Advice.PACK


def test_gpu_ranks_all_reduce_float16_gradients() -> None:
    # airbench on two H200s over 10 GbE: 3.94 MB of fp16 gradients in 3.15 ms against 512 images
    # / 223,999 per s = 2.29 ms of compute: x0.84, two nodes still lose to one.
    cost = ddp_cost(Model.AIRBENCH, 2, 1024, 10 * GBE, gpu=True, can_pack=False)
    assert cost.gradient_bytes == 1_971_352 * 2
    assert cost.allreduce_seconds == pytest.approx(0.0031542, rel=1e-4)
    assert cost.speedup == pytest.approx(0.8404, rel=1e-3)
    assert "3.9 MB of float16 gradients" in cost.explain()


def test_halving_the_bytes_is_advised_only_where_the_gradients_are_float32() -> None:
    # airbench on CPU ranks, batch 512, over 200 Mbit/s: 7.9 MB of fp32 gradients in 315 ms against
    # 985 ms of compute (ratio 0.32); halved, 0.16: compression suffices.
    cpu = ddp_cost(Model.AIRBENCH, 2, 512, 0.2 * GBE, gpu=False, can_pack=False)
    assert cpu.ratio == pytest.approx(0.3203, rel=1e-3) and cpu.advice is Advice.COMPRESS
    # ResNet-9 on GPUs, batch 512: 17.1 ms of compute per rank; its 13.1 MB of fp16 gradients take
    # 5.3 ms at 20 Gbit/s (ratio 0.31). They are 16-bit already, so nothing is left to halve.
    assert ddp_cost(Model.RESNET9, 2, 512, 20 * GBE, gpu=True, can_pack=False).advice is Advice.POWERSGD
    # At 40 Gbit/s: 2.6 ms (ratio 0.15), the link keeps up.
    assert ddp_cost(Model.RESNET9, 2, 512, 40 * GBE, gpu=True, can_pack=False).advice is Advice.SPREAD


@pytest.mark.parametrize("gpu", [True, False])
def test_the_gradient_width_is_the_trainers_own(gpu: bool) -> None:
    """The bytes doctor counts per parameter are those of the weights the trainer trains there."""
    import torch

    from trainer import precision

    device = torch.device("cuda" if gpu else "cpu")
    assert GRADIENT_BYTES[gpu] == precision.for_device(device, 1024).dtype.itemsize


@pytest.mark.parametrize("model", list(Model))
def test_the_gradient_bytes_are_the_trainers_own(model: Model) -> None:
    """The parameters doctor counts are those the trainer trains at its default width."""
    from trainer.model import Airbench, ResNet9

    net = {Model.AIRBENCH: Airbench, Model.RESNET9: ResNet9}[model](64)
    assert MODELS[model].parameters == sum(p.numel() for p in net.parameters() if p.requires_grad)


def test_the_gpu_rate_is_the_one_the_trainer_benchmark_measured() -> None:
    """airbench's GPU figure is the trainer's median in the GPU benchmark on record: a new run of
    benchmarks/trainer_bench.py --gpu that changes it changes doctor's estimate with it."""
    report = (ROOT / "docs" / "benchmarks" / "trainer-gpu.md").read_text()
    (median,) = re.findall(r"^\| trainer \| [\d, ]+ \| (\d+) \|$", report, re.MULTILINE)
    assert MODELS[Model.AIRBENCH].gpu_images_per_second == int(median)
