"""BatchNorm at 1, 2, 4 and 8 ranks: one global batch, the trainer's default, one rank's net.

Each world is real processes (spawned, gloo on CPU) that build the trainer's run as a rank does,
wrap the net in DDP as `Run.fit` does and take two steps of `Numerics.step` on their shares of one
global batch of 64 images (rank r of W takes images r*64/W to (r+1)*64/W, as the loader shares a
batch). Every BatchNorm layer's output in the first step, gathered in rank order, the logits, every
rank's weights and running statistics after the two steps, and the evaluation after them must be
one rank's with the whole batch, to float rounding. `--batchnorm rank` (each rank's own share,
torch's BatchNorm2d) is the input that fails it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.network import free_port
from tests.support.tiers import costly
from trainer import distributed, train
from trainer.config import resolve
from trainer.contract import GENERATED
from trainer.data import Split
from trainer.pod import run_state

GLOBAL_BATCH = 64
STEPS = 2
# float32 sums over the same images in another order and another formula (the variance as
# E[x^2] - E[x]^2, torch's BatchNorm2d centres first): outputs of a few units agree to about 2e-5.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8)
    return Split(images, (np.arange(count) % 10).astype(np.int64))


def _rank(rank: int, world: int, port: int, folder: Path, batchnorm: str) -> None:
    """One rank: the trainer's run, two steps on its share of the global batch, its figures saved."""
    torch.set_num_threads(1)
    place = distributed.Topology(rank, world, 0, "127.0.0.1", port)
    distributed.join(place, "gloo", 120)
    splits = (_split(GLOBAL_BATCH, 0), _split(32, 1))
    options = {
        "model": "airbench", "width": 4, "batch_size": GLOBAL_BATCH, "seed": 0, "cutout": 0, "tta": 0,
        "accumulate": 1, "compression": "none", "steps": STEPS, "batchnorm": batchnorm,
    }  # fmt: skip
    config = resolve(options, GLOBAL_BATCH, 32, GENERATED)
    where = run_state.RunOptions(folder / f"run-{rank}", "gloo", 120, 2, 0.94, "exit")
    run = train.Run(config, where, place, splits)
    run.fit_to_data()  # what `Run.fit` does first on a fresh run
    numerics = run.numerics
    numerics.model = distributed.wrap(run.net, run.device, config.compression, run.precision.dtype)
    norms = [m for m in run.net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    outputs: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda m, i, out: outputs.append(out.detach())) for m in norms]
    hooks.append(run.net.register_forward_hook(lambda m, i, out: outputs.append(out.detach())))
    share = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    images = torch.from_numpy(splits[0].images[share])
    labels = torch.from_numpy(splits[0].labels[share])
    scale = run.precision.loss_scale * world / GLOBAL_BATCH  # as Run.train_epoch scales the loss
    sums = torch.zeros(2, dtype=torch.float64)
    for step in range(STEPS):
        numerics.set_learning_rates(step, run.total_steps, 0)
        numerics.step(images, labels, 1, scale, sums)
        if step == 0:
            for hook in hooks:
                hook.remove()
    first = [_gathered(output, world) for output in outputs]
    loss, accuracy = numerics.evaluate(run.test, 0, 16)
    figures = {"outputs": first, "state": run.net.state_dict(), "sums": distributed.sum_all(sums.tolist())}
    torch.save(figures | {"evaluation": (loss, accuracy)}, folder / f"rank-{rank}.pt")
    distributed.leave(finished=True)


def _gathered(tensor: torch.Tensor, world: int) -> torch.Tensor:
    """Every rank's `tensor`, concatenated in rank order: the global batch's rows."""
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


@costly("a process per rank (torch on CPU) for each world size")
def _world(folder: Path, world: int, batchnorm: str) -> list[dict[str, Any]]:
    """The figures each rank of a world of `world` saved."""
    folder = folder / f"{batchnorm}-{world}"
    folder.mkdir()
    mp.spawn(_rank, args=(world, free_port(), folder, batchnorm), nprocs=world, join=True)
    return [torch.load(folder / f"rank-{rank}.pt", weights_only=True) for rank in range(world)]


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One rank with the whole batch, in this process (no process group: torch's BatchNorm2d)."""
    folder = tmp_path_factory.mktemp("one")
    threads = torch.get_num_threads()
    try:
        _rank(0, 1, 0, folder, "global")
    finally:
        torch.set_num_threads(threads)
    return torch.load(folder / "rank-0.pt", weights_only=True)


def _differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """What of `got` is not `want` to float rounding: a BatchNorm output, a weight or statistic."""
    found = []
    for index, (a, b) in enumerate(zip(got["outputs"], want["outputs"], strict=True)):
        if not torch.allclose(a, b, **TOLERANCE):
            found.append(f"output {index} (max difference {(a - b).abs().max():.2e})")
    for name, tensor in want["state"].items():
        if tensor.is_floating_point() and not torch.allclose(got["state"][name], tensor, **TOLERANCE):
            found.append(name)
    if not np.allclose(got["evaluation"], want["evaluation"], rtol=1e-4):
        found.append(f"evaluation {got['evaluation']} against {want['evaluation']}")
    return found


def test_the_default_keeps_one_ranks_batchnorm_at_2_4_and_8_ranks(
    one: dict[str, Any], tmp_path: Path
) -> None:
    assert len(one["outputs"]) == 7, "six BatchNorm layers and the logits"
    assert one["state"]["2.2.num_batches_tracked"] == STEPS
    for world in (2, 4, 8):
        ranks = _world(tmp_path, world, "global")
        for rank, figures in enumerate(ranks):
            assert _differences(figures, one) == [], f"rank {rank} of {world}"
        assert ranks[0]["sums"] == pytest.approx(one["sums"], rel=1e-5), f"the loss sums at {world} ranks"


def test_each_ranks_own_statistics_are_not_one_ranks(one: dict[str, Any], tmp_path: Path) -> None:
    """The comparison above can fail: at 2 ranks torch's BatchNorm2d normalises over 32 images."""
    first, second = _world(tmp_path, 2, "rank")
    assert any(name.startswith("output") for name in _differences(first, one))
    assert any("running_mean" in name for name in _differences(second, one))


def test_one_rank_in_a_process_group_uses_torchs_kernel_and_no_collective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.batchnorm import GlobalBatchNorm

    calls: list[str] = []
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, *args, **kwargs: calls.append("all_reduce"))
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        layer, plain = GlobalBatchNorm(3).train(), torch.nn.BatchNorm2d(3).train()
        x = torch.randn(4, 3, 5, 5)
        torch.testing.assert_close(layer(x), plain(x), rtol=0, atol=0)
        torch.testing.assert_close(layer.running_var, plain.running_var, rtol=0, atol=0)
    finally:
        dist.destroy_process_group()
    assert calls == [], "a group of one has nothing to add up"
