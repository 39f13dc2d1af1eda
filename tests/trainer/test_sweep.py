"""Sweep spaces: grid and random expansion, index selection, and the file format both sides read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.config import Sweep
from trainer.sweep import SweepError, expand, select, write_sweep_file

GRID = {
    "strategy": "grid",
    "samples": None,
    "seed": 0,
    "parameters": {"lr": [0.2, 0.4, 0.8], "batch_size": [256, 512], "model": ["airbench"]},
}
RANDOM = {
    "strategy": "random",
    "samples": 20,
    "seed": 7,
    "parameters": {
        "lr": {"min": 1.0, "max": 20.0, "log": True},
        "epochs": {"min": 5, "max": 12, "log": False},
        "momentum": [0.8, 0.85, 0.9],
    },
}


def test_grid_is_the_full_product_in_a_fixed_order() -> None:
    sets = expand(GRID)
    assert len(sets) == 6
    assert {(s["lr"], s["batch_size"]) for s in sets} == {
        (lr, b) for lr in (0.2, 0.4, 0.8) for b in (256, 512)
    }
    assert all(s["model"] == "airbench" for s in sets)
    assert sets == expand(json.loads(json.dumps(GRID)))


def test_random_draws_are_deterministic_in_range_and_typed() -> None:
    sets = expand(RANDOM)
    assert len(sets) == 20
    assert sets == expand(RANDOM)
    assert sets != expand({**RANDOM, "seed": 8})
    assert all(1.0 <= s["lr"] <= 20.0 for s in sets)
    assert all(isinstance(s["epochs"], int) and 5 <= s["epochs"] <= 12 for s in sets)
    assert {s["momentum"] for s in sets} <= {0.8, 0.85, 0.9}
    assert len({s["lr"] for s in sets}) == 20


def test_log_range_spreads_over_decades() -> None:
    space = {
        "strategy": "random",
        "samples": 400,
        "seed": 0,
        "parameters": {"lr": {"min": 0.01, "max": 100.0, "log": True}},
    }
    values = [s["lr"] for s in expand(space)]
    # Uniform in log space puts about half the draws below the geometric mean (1.0).
    below = sum(v < 1.0 for v in values) / len(values)
    assert 0.4 < below < 0.6


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({**GRID, "parameters": {"lr": {"min": 1, "max": 2}}}, "ranges need strategy random"),
        ({**RANDOM, "samples": None}, "random search needs 'samples'"),
        ({**GRID, "strategy": "bayes"}, "unknown strategy 'bayes'"),
        ({**GRID, "parameters": {"dropout": [0.1]}}, "unknown parameter 'dropout'"),
        ({**GRID, "parameters": {"lr": []}}, "has no values"),
        ({**RANDOM, "parameters": {"lr": {"min": 2, "max": 1}}}, "min (2) must be below max (1)"),
        ({**RANDOM, "parameters": {"lr": {"min": 0, "max": 1, "log": True}}}, "needs min > 0"),
        ({**GRID, "parameters": {}}, "needs 'parameters'"),
        # Values are held to the trainer's own flag rules (trainer.hyperparameters).
        (
            {**GRID, "parameters": {"batch_size": [256, 0]}},
            "'batch_size' value 1: must be an integer in [1, 50000]",
        ),
        ({**GRID, "parameters": {"lr": [float("nan")]}}, "'lr' value 0: must be a finite number in (0, 100]"),
        (
            {**GRID, "parameters": {"weight_decay": [-1e-4]}},
            "'weight_decay' value 0: must be a finite number",
        ),
        ({**GRID, "parameters": {"epochs": ["ten"]}}, "'epochs' value 0: must be an integer in [1, 1000]"),
        (
            {**GRID, "parameters": {"momentum": [True]}},
            "'momentum' value 0: must be a finite number in [0, 1), got the boolean",
        ),
        ({**GRID, "parameters": {"model": ["vit"]}}, "'model' value 0: must be one of airbench, resnet9"),
        (
            {**RANDOM, "parameters": {"lr": {"min": 0.1, "max": float("inf")}}},
            "'lr' max: must be a finite number",
        ),
        (
            {**GRID, "parameters": {"lr": [0.1] * 400, "momentum": [0.5] * 400}},
            "160000 sets, more than the 100000",
        ),
    ],
)
def test_bad_spaces_are_named(space: dict, message: str) -> None:
    with pytest.raises(SweepError, match=re.escape(message)):
        expand(space)


def test_lab_config_space_expands_to_its_declared_size() -> None:
    """The contract with the Pulumi program: what `Sweep.space()` returns is what `expand` takes."""
    grid = Sweep.model_validate(
        {"strategy": "grid", "parameters": {"learningRate": [0.2, 0.4], "batchSize": [256, 512, 1024]}}
    )
    assert len(expand(grid.space())) == grid.size() == 6
    rand = Sweep.model_validate(
        {
            "strategy": "random",
            "samples": 5,
            "parameters": {"weightDecay": {"min": 1e-4, "max": 1e-2, "log": True}},
        }
    )
    assert len(expand(rand.space())) == rand.size() == 5


def test_sweep_file_round_trip_and_index_selection(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    assert write_sweep_file(GRID, path) == 6
    content = json.loads(path.read_text())
    assert content == {"space": GRID, "sets": expand(GRID)}
    assert select(path, 5) == expand(GRID)[5]
    with pytest.raises(SweepError, match="index 6 is out of range; the sweep has sets 0 to 5"):
        select(path, 6)
    with pytest.raises(SweepError, match="does not exist"):
        select(tmp_path / "missing.json", 0)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SweepError, match="is not valid JSON"):
        select(tmp_path / "broken.json", 0)


def test_sweep_module_imports_without_torch_or_matplotlib() -> None:
    """The Pulumi program imports it on machines that have neither."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['matplotlib'] = None; "
        "import trainer.sweep; print(len(trainer.sweep.expand({'parameters': {'lr': [1, 2]}})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"


def test_a_sweep_file_set_is_held_to_the_flag_rules(tmp_path: Path) -> None:
    """A hand-edited sweep file cannot slip past the rules the flags enforce."""
    path = tmp_path / "sweep.json"
    write_sweep_file(GRID, path)
    content = json.loads(path.read_text())
    content["sets"][2]["batch_size"] = -512
    path.write_text(json.dumps(content))
    with pytest.raises(SweepError, match=r"'batch_size' in .* set 2: must be an integer in \[1, 50000\]"):
        select(path, 2)


def test_a_hand_written_sweep_file_with_a_key_twice_or_nested_deep_is_one_line(tmp_path: Path) -> None:
    """json keeps the last of two equal keys without a word, and recurses once per level."""
    twice = tmp_path / "twice.json"
    twice.write_text('{"sets": [{"lr": 0.1, "lr": 0.2}]}')
    with pytest.raises(SweepError, match=r"twice.json names 'lr' twice in one object; keep one"):
        select(twice, 0)
    deep = tmp_path / "deep.json"
    deep.write_text('{"sets": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SweepError, match=r"deep.json is nested too deeply to read"):
        select(deep, 0)
    train = [
        "train",
        "--data",
        tmp_path,
        "--runs",
        tmp_path,
        "--run-name",
        "x",
        "--sweep",
        deep,
        "--index",
        "0",
    ]
    command = [sys.executable, "-m", "trainer", *map(str, train)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
