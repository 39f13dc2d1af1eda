"""A GPU's precision: float16 weights with BatchNorm in float32, the loss summed over the global
batch so float16 gradients keep their digits, and SGD's rate and decay folded so that a step is
the recipe's step on the batch-mean loss. Checked on CPU, where float16 runs too (slowly)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer import distributed, precision, train
from trainer.config import resolve
from trainer.contract import GENERATED
from trainer.data import Split
from trainer.loader import Normalise
from trainer.model import build, fit_to_data
from trainer.numerics import Lookahead
from trainer.pod import run_state
from trainer.records import checkpoint

BATCH = 1024  # the recipe's global batch: the mean's gradient is 1/BATCH of the sum's


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    return Split(rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8), np.arange(count) % 10)


def test_a_gpu_holds_the_net_in_float16_and_sums_the_loss_over_the_global_batch() -> None:
    chosen = precision.for_device(torch.device("cuda"), BATCH)
    assert chosen == precision.Precision(torch.float16, float(BATCH))
    assert precision.for_device(torch.device("cpu"), BATCH) == precision.Precision(torch.float32, 1.0)
    net = chosen.apply(build("airbench", 8))
    kinds = {
        type(module).__name__: {t.dtype for t in [*module.parameters(False), *module.buffers(False)]}
        for module in net.modules()
    }
    assert kinds["BatchNorm2d"] == {torch.float32, torch.int64}, "statistics and bias in float32"
    assert kinds["Conv2d"] == kinds["Linear"] == {torch.float16}


def _gradients(
    net: nn.Module, chosen: precision.Precision, images: torch.Tensor, labels: torch.Tensor
) -> dict:
    """The gradient of the batch-mean loss (over a nominal batch of BATCH) that `chosen` computes."""
    net = chosen.apply(copy.deepcopy(net)).to(memory_format=torch.channels_last)
    logits = net(Normalise(torch.device("cpu"), chosen.dtype, torch.channels_last)(images)).float()
    losses = F.cross_entropy(logits, labels, label_smoothing=0.2, reduction="none")
    (losses.sum() * chosen.loss_scale / BATCH).backward()
    return {
        name: p.grad.double() / chosen.loss_scale for name, p in net.named_parameters() if p.grad is not None
    }


def test_float16_gradients_keep_their_digits_only_with_the_summed_loss() -> None:
    """Against float32's, the biases' float16 gradients of the scaled loss err by about a tenth
    (float16's forward pass); of the batch mean they lose most of themselves to underflow."""
    torch.manual_seed(0)
    split = _split(64, 0)
    images, labels = torch.from_numpy(split.images), torch.from_numpy(split.labels)
    net = build("airbench", 8)
    fit_to_data(net, Normalise(torch.device("cpu"))(images))
    exact = _gradients(net, precision.Precision(torch.float32, 1.0), images, labels)

    def worst_bias_error(chosen: precision.Precision) -> float:
        found = _gradients(net, chosen, images, labels)
        return max(
            float((found[name] - exact[name]).norm() / exact[name].norm()) for name in exact if "bias" in name
        )

    assert worst_bias_error(precision.for_device(torch.device("cuda"), BATCH)) < 0.25
    assert worst_bias_error(precision.Precision(torch.float16, 1.0)) > 0.5, "the mean underflows"


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: precision.Precision, **options: bool
) -> train.Run:
    """A small one-rank run as `Run` builds it, on `chosen` precision, in a folder of its own."""
    monkeypatch.setattr(precision, "for_device", lambda device, batch: chosen)
    flags = {
        "model": "airbench", "width": 4, "batch_size": 16, "seed": 0, "cutout": 0, "tta": 0,
        "accumulate": 1, "compression": "none", "epochs": 2,
    }  # fmt: skip
    folder = tmp_path / f"{chosen.dtype}-scale-{chosen.loss_scale:g}"
    where = run_state.RunOptions(folder, "gloo", 60, 1, 0.94, "exit", **options)
    place = distributed.Topology(0, 1, 0, "127.0.0.1", 0)
    return train.Run(resolve(flags, 64, 64, GENERATED), where, place, (_split(64, 0), _split(64, 1)))


def _trained_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: precision.Precision) -> tuple:
    run = _run(tmp_path, monkeypatch, chosen, epoch_eval=False)
    run.folder.prepare(fresh=True)
    run.fit(run_state.StopSignal(), run_state.Start())
    rates = [json.loads(line)["lr"] for line in (run.folder.path / "metrics.jsonl").read_text().splitlines()]
    return [p.detach().clone() for p in run.net.parameters()], rates


def test_a_scaled_loss_takes_the_recipes_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run as `Run` builds it (its optimizer, schedule, lookahead), in float32 so the two agree
    to rounding: scaling the loss by 512 changes neither the weights nor the rates it reports."""
    plain, plain_rates = _trained_weights(tmp_path, monkeypatch, precision.Precision(torch.float32, 1.0))
    scaled, scaled_rates = _trained_weights(tmp_path, monkeypatch, precision.Precision(torch.float32, 512.0))
    assert scaled_rates == pytest.approx(plain_rates)
    for before, after in zip(plain, scaled, strict=True):
        torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)


def test_the_lookahead_averages_each_dtype_in_one_multi_tensor_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's foreach kernels take one dtype a call and fall back to a kernel per tensor on mixed
    lists (ATen ForeachUtils.h): float16 weights and float32 BatchNorm state go in a call each."""
    net = precision.for_device(torch.device("cuda"), BATCH).apply(build("airbench", 8))
    lookahead = Lookahead(net, every=5, decay=0.95)
    for tensor in lookahead.fast:
        tensor.add_(1)
    weight = 1 - 0.95**5 * (5 / 10) ** 3  # after_step's at step 5 of 10
    expected = [slow.lerp(fast, weight) for slow, fast in zip(lookahead.slow, lookahead.fast, strict=True)]
    calls: list[set[torch.dtype]] = []
    lerp = torch._foreach_lerp_

    def recorded(slow: list[torch.Tensor], fast: list[torch.Tensor], weight: float) -> None:
        calls.append({t.dtype for t in (*slow, *fast)})
        lerp(slow, fast, weight)

    monkeypatch.setattr(torch, "_foreach_lerp_", recorded)
    lookahead.after_step(step=5, total=10)
    assert sorted(calls, key=str) == [{torch.float16}, {torch.float32}]
    for slow, fast, want in zip(lookahead.slow, lookahead.fast, expected, strict=True):
        torch.testing.assert_close(slow, want)
        assert torch.equal(fast, slow)


def _layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: precision.Precision) -> tuple:
    run = _run(tmp_path, monkeypatch, chosen)
    return run.state(emergency=False), run.layout()


def test_a_checkpoint_from_the_other_kind_of_device_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its weights are float16 (a GPU's) or float32 (a CPU's), and so are all its run's others."""
    real = precision.for_device
    on_gpu, gpu_layout = _layout(tmp_path, monkeypatch, real(torch.device("cuda"), 16))
    on_cpu, cpu_layout = _layout(tmp_path, monkeypatch, real(torch.device("cpu"), 16))
    monkeypatch.setattr(precision, "for_device", real)
    path = tmp_path / "ckpt-000000004.pt"
    refusal = (
        r"written on a GPU \(its weights are torch.float16\) and this run is on a CPU: resume it on a GPU,"
        r" or start this run again here with --fresh"
    )
    with pytest.raises(checkpoint.CheckpointError, match=refusal):
        checkpoint.check(path, on_gpu, cpu_layout)
    with pytest.raises(checkpoint.CheckpointError, match=r"written on a CPU .* resume it on a CPU"):
        checkpoint.check(path, on_cpu, gpu_layout)
    checkpoint.check(path, on_gpu, gpu_layout)
