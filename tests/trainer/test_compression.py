"""Gradient compression: the DDP hooks the flag names really act on the gradients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainer.distributed import wrap


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _gradient(compression: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(0)
    net = torch.nn.Linear(64, 64).to(dtype)
    model = wrap(net, torch.device("cpu"), compression, dtype)
    model(torch.randn(16, 64, dtype=dtype)).pow(2).sum().backward()
    return net.weight.grad.clone()


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize(("compression", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_hooks_round_the_gradients(compression: str, dtype: torch.dtype) -> None:
    exact = _gradient("none")
    compressed = _gradient(compression)
    assert not torch.equal(compressed, exact), "the hook did not touch the gradient"
    torch.testing.assert_close(compressed, exact.to(dtype).float(), rtol=0, atol=0)


@pytest.mark.usefixtures("one_rank_group")
def test_powersgd_trains_uncompressed_for_its_warm_up_steps() -> None:
    # PowerSGD starts compressing after 10 steps; before, it all-reduces the exact gradient.
    torch.testing.assert_close(_gradient("powersgd"), _gradient("none"))


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_float16_gradients_are_not_cast_again(compression: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU's gradients are float16 (trainer.precision): a 16-bit hook would save no bytes."""
    exact = _gradient("none", torch.float16)
    capsys.readouterr()
    torch.testing.assert_close(_gradient(compression, torch.float16), exact, rtol=0, atol=0)
    assert (
        f"--compression {compression} left out: the gradients on cpu are torch.float16"
        in capsys.readouterr().out
    )
