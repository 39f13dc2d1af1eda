"""The step loop as a GPU would run it: nothing in a step waits on the host, training time is the
step loop's alone, and checkpoints are written beside training, never before a metrics line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from trainer import distributed, train
from trainer.batchnorm import GlobalBatchNorm
from trainer.config import resolve
from trainer.contract import GENERATED
from trainer.data import Split
from trainer.pod import run_state
from trainer.records import checkpoint

# Calls that cross between host and device on a GPU: a copy to or from the device (`to` with a
# device, `cpu`, `cuda`, a tensor made from host data on the device), or a read of a device value
# by the host (`item`, `tolist`, `bool`, ...), each of which makes the host wait for the device's
# queue to drain (torch.cuda.set_sync_debug_mode names the same calls on a GPU).
HOST_CALLS = {
    "tensor",
    "as_tensor",
    "cpu",
    "cuda",
    "item",
    "tolist",
    "numpy",
    "__bool__",
    "__float__",
    "__int__",
}


class HostBoundary(TorchFunctionMode):
    """Counts the torch calls that would copy between host and device, or wait for the device."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        moves = name == "to" and any(
            isinstance(a, torch.device | str) for a in (*args[1:], kwargs.get("device"))
        )
        if name in HOST_CALLS or moves:
            self.calls[name] += 1
        return func(*args, **kwargs)


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    return Split(rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8), np.arange(count) % 10)


def _run(tmp_path: Path, train_images: int, batchnorm: str = "global", **options: Any) -> train.Run:
    splits = (_split(train_images, 0), _split(64, 1))
    flags = {
        "model": "airbench", "width": 4, "batch_size": 16, "seed": 0, "cutout": 0, "tta": 0,
        "accumulate": 1, "compression": "none", "epochs": 2, "batchnorm": batchnorm,
    }  # fmt: skip
    config = resolve(flags, train_images, 64, GENERATED)
    where = run_state.RunOptions(tmp_path / f"run-{train_images}", "gloo", 60, 3, 0.94, "exit", **options)
    place = distributed.Topology(0, 1, 0, "127.0.0.1", 0)
    run = train.Run(config, where, place, splits)
    run.folder.prepare(fresh=True)
    return run


def _host_calls(run: train.Run) -> Counter[str]:
    with HostBoundary() as boundary:
        run.train_epoch(0, run_state.StopSignal())
        run.writer.wait()
    return boundary.calls


def test_no_step_copies_between_host_and_device_or_waits_for_it(tmp_path: Path) -> None:
    """An epoch of 8 steps and one of 16 cross the host boundary equally often: only at the epoch's
    edges (its plan onto the device, its sums back), never once per step."""
    short, long = _run(tmp_path, 8 * 16), _run(tmp_path, 16 * 16)
    assert (short.loader.steps_per_epoch, long.loader.steps_per_epoch) == (8, 16)
    few, many = _host_calls(short), _host_calls(long)
    per_step = {name: (many[name] - few[name]) / 8 for name in many | few if many[name] != few[name]}
    assert per_step == {}, f"host crossings per step: {per_step}"


class FakeClock:
    """time.monotonic for the trainer: a step takes 1 s, an evaluation 100 s, anything else 0 s."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_training_seconds_count_the_step_loop_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path, 4 * 16)
    clock = FakeClock()
    monkeypatch.setattr(train.time, "monotonic", clock.monotonic)
    step, evaluate = run.numerics.step, run.numerics.evaluate

    def timed_step(*args: Any) -> None:
        clock.now += 1
        step(*args)

    def timed_evaluate(*args: Any) -> tuple[float, float]:
        clock.now += 100
        return evaluate(*args)

    monkeypatch.setattr(run.numerics, "step", timed_step)
    monkeypatch.setattr(run.numerics, "evaluate", timed_evaluate)
    summary = run.fit(run_state.StopSignal(), run_state.Start())
    assert summary["wall_seconds"] == 2 * 4, "two epochs of four 1 s steps"
    assert summary["eval_seconds"] == 3 * 100, "two epochs' evaluations and the final one"
    lines = [json.loads(line) for line in (run.folder.path / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch_seconds"] for line in lines] == [4, 4]
    assert [line["images_per_second"] for line in lines] == [16.0, 16.0]


def test_a_run_is_timed_as_airbench94_times_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """airbench94's total_time_seconds: the whitening stem's fit (on the device), the step loops and
    the final evaluation with TTA; not the per-epoch evaluations, not loading or building."""
    run = _run(tmp_path, 4 * 16)
    clock = FakeClock()
    monkeypatch.setattr(train.time, "monotonic", clock.monotonic)
    step, evaluate, fit = run.numerics.step, run.numerics.evaluate, train.fit_to_data
    fitted: list[tuple[torch.device, torch.dtype]] = []

    def timed_step(*args: Any) -> None:
        clock.now += 1
        step(*args)

    evaluations: list[int] = []

    def timed_evaluate(*args: Any) -> tuple[float, float]:
        clock.now += 1000 if len(evaluations) == 2 else 100  # two epochs' evaluations, then the final
        evaluations.append(1)
        return evaluate(*args)

    def timed_fit(net: torch.nn.Module, images: torch.Tensor) -> None:
        clock.now += 10
        fitted.append((images.device, images.dtype))
        fit(net, images)

    monkeypatch.setattr(run.numerics, "step", timed_step)
    monkeypatch.setattr(run.numerics, "evaluate", timed_evaluate)
    monkeypatch.setattr(train, "fit_to_data", timed_fit)
    summary = run.fit(run_state.StopSignal(), run_state.Start())
    assert fitted == [(run.device, run.precision.dtype)], "once, on the run's device, as the steps see images"
    assert summary["whiten_seconds"] == 10 and summary["wall_seconds"] == 2 * 4
    assert summary["final_eval_seconds"] == 1000 and summary["eval_seconds"] == 2 * 100 + 1000
    assert summary["airbench_seconds"] == 10 + 2 * 4 + 1000


def test_without_epoch_evaluation_only_the_final_one_runs(tmp_path: Path) -> None:
    run = _run(tmp_path, 4 * 16, epoch_eval=False)
    summary = run.fit(run_state.StopSignal(), run_state.Start())
    lines = [json.loads(line) for line in (run.folder.path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and not any("test_acc" in line for line in lines)
    assert summary["best_test_acc"] == summary["final_test_acc"]
    assert checkpoint.latest_verified(run.folder.checkpoints) is not None


def test_a_checkpoint_is_written_beside_training_and_before_its_metrics_line(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    writer = checkpoint.Writer(folder, keep=2)
    weights = torch.ones(3)
    order: list[str] = []
    writer.submit(5, {"w": weights}, lambda: order.append(str(checkpoint.latest_verified(folder))))
    weights.add_(1)  # training goes on changing the tensors: the copy taken at submit is written
    writer.wait()
    assert order == [str(folder / "ckpt-000000005.pt")], "the line came after its checkpoint"
    saved = torch.load(folder / "ckpt-000000005.pt", weights_only=True)
    assert torch.equal(saved["w"], torch.ones(3))


def test_a_failed_checkpoint_write_is_raised_in_the_training_thread(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    writer = checkpoint.Writer(blocked / "checkpoints", keep=2)
    lines: list[int] = []
    writer.submit(1, {"w": torch.ones(1)}, lambda: lines.append(1))
    with pytest.raises(OSError):
        writer.wait()
    assert lines == [], "no metrics line without its checkpoint"
    writer.wait()  # raised once


def test_global_batchnorm_replaces_every_batchnorm_by_default(tmp_path: Path) -> None:
    run = _run(tmp_path, 4 * 16)
    norms = [m for m in run.net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == 6 and all(isinstance(m, GlobalBatchNorm) for m in norms)
    assert run.config.hyperparameters()["batchnorm"] == "global"
    assert all(not m.weight.requires_grad for m in norms), "airbench's BatchNorm scales stay frozen"
    # The optimizer and the lookahead hold the converted net's tensors.
    assert {id(p) for p in run.net.parameters() if p.requires_grad} == {
        id(p) for group in run.optimizer.param_groups for p in group["params"]
    }
    kept = _run(tmp_path / "rank", 4 * 16, batchnorm="rank")
    assert not any(isinstance(m, GlobalBatchNorm) for m in kept.net.modules())
