"""A run's budget: whole epochs or a number of steps, airbench94's 9.9 epochs (476 steps) by
default, and a last epoch that ends partway, stated in the metrics, the status and the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainer import distributed, train
from trainer.cli import main
from trainer.config import ConfigurationError, resolve
from trainer.contract import GENERATED
from trainer.data import Split
from trainer.hyperparameters import CIFAR10_TRAIN_IMAGES, MAX_EPOCHS
from trainer.pod import run_state
from trainer.records import checkpoint


def _options(**budget: Any) -> dict[str, Any]:
    return {
        "model": "airbench", "width": 4, "batch_size": 1024, "seed": 0, "cutout": 0, "tta": 0,
        "accumulate": 1, "compression": "none", "epochs": None, "steps": None, **budget,
    }  # fmt: skip


def test_the_default_budget_is_airbench94s_476_steps_at_its_batch() -> None:
    """airbench94: ceil(48 steps an epoch x 9.9) = 476 (`total_train_steps` in its `train`)."""
    config = resolve(_options(), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)
    assert (config.steps, config.epochs) == (476, 10), "9.9 epochs: the tenth ends after 44 of its 48 steps"
    whole = resolve(_options(epochs=10), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)
    assert (whole.steps, whole.epochs) == (480, 10)
    given = resolve(_options(steps=100), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)
    assert (given.steps, given.epochs) == (100, 3)
    resnet = resolve(_options(model="resnet9", batch_size=512), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)
    assert (resnet.steps, resnet.epochs) == (24 * 97, 24), "ResNet-9's 24 whole epochs"
    assert whole.hash() != config.hash(), "another budget is another run"


def test_two_budgets_or_one_past_the_epoch_limit_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="--epochs 2 and --steps 5 both set the budget"):
        resolve(_options(epochs=2, steps=5), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)
    with pytest.raises(ConfigurationError, match=f"more than the {MAX_EPOCHS} a run may take"):
        resolve(_options(steps=48 * MAX_EPOCHS + 1), CIFAR10_TRAIN_IMAGES, 10000, GENERATED)


def test_the_command_line_takes_one_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["train", "--data", str(tmp_path), "--runs", str(tmp_path), "--run-name", "x"]
    with pytest.raises(SystemExit) as exit_:
        main([*flags, "--epochs", "2", "--steps", "5"])
    assert exit_.value.code == 2
    assert "argument --steps: not allowed with argument --epochs" in capsys.readouterr().err


def _split(count: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    return Split(rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8), np.arange(count) % 10)


def _run(tmp_path: Path, steps: int) -> train.Run:
    """4 steps of 16 an epoch on 64 images, with a budget of `steps`."""
    splits = (_split(64, 0), _split(32, 1))
    config = resolve(_options(batch_size=16, steps=steps), 64, 32, GENERATED)
    where = run_state.RunOptions(tmp_path / "run", "gloo", 60, 5, 0.94, "exit")
    run = train.Run(config, where, distributed.Topology(0, 1, 0, "127.0.0.1", 0), splits)
    run.folder.prepare(fresh=True)
    return run


def test_a_budget_ending_partway_trains_a_partial_last_epoch_and_says_so(tmp_path: Path) -> None:
    run = _run(tmp_path, steps=10)
    summary = run.fit(run_state.StopSignal(), run_state.Start())
    run.writer.wait()
    lines = [json.loads(line) for line in (run.folder.path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["epoch"], line["step"]) for line in lines] == [(1, 4), (2, 8), (3, 10)]
    assert "epoch_fraction" not in lines[0] and lines[-1]["epoch_fraction"] == 0.5
    assert lines[-1]["images_per_second"] > 0
    budget = {"steps_planned": 10, "steps_per_epoch": 4, "epochs_planned": 2.5}
    assert summary["steps"] == 10 and summary["epochs"] == 3 and summary.items() >= budget.items()
    status = json.loads((run.folder.path / "status.json").read_text())
    assert status["step"] == 10 and status.items() >= budget.items()


def test_a_partial_epochs_checkpoints_fit_the_run_and_no_step_past_its_end(tmp_path: Path) -> None:
    run = _run(tmp_path, steps=10)
    run.fit(run_state.StopSignal(), run_state.Start())
    run.writer.wait()
    path = checkpoint.latest_verified(run.folder.checkpoints)
    assert path is not None
    state = checkpoint.load(path, run.config.hash(), torch.device("cpu"))
    checkpoint.check(path, state, run.layout())  # the finished run, 10 steps: epoch 3 of 3
    # Within the partial epoch: epoch index 2 has steps 8 and 9 only.
    state["progress"] |= {
        "epoch": 2,
        "step_in_epoch": 1,
        "step": 9,
        "history": state["progress"]["history"][:2],
    }
    checkpoint.check(path, state, run.layout())
    state["progress"] |= {"step_in_epoch": 2, "step": 10}
    with pytest.raises(checkpoint.CheckpointError, match="its step within the epoch 2 is outside 0 to 1"):
        checkpoint.check(path, state, run.layout())
