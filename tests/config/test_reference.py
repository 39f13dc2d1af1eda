"""docs/configuration.md is the configuration model's own reference: a stale file fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.config import LabConfig
from lab.config.reference import TARGET, render, stale
from trainer.hyperparameters import HYPERPARAMETERS


def test_committed_reference_matches_the_model() -> None:
    diff = stale()
    fix = "docs/configuration.md is stale; run `python -m lab.config.reference`\n"
    assert diff == [], fix + "".join(diff)


def test_a_stale_reference_is_caught(tmp_path: Path) -> None:
    edited = tmp_path / "configuration.md"
    edited.write_text(TARGET.read_text().replace("| `29500` |", "| `29400` |"))
    diff = "".join(stale(edited))
    assert "-| `port` | integer (≥ 1024, ≤ 65535) | `29400` |" in diff
    assert "+| `port` | integer (≥ 1024, ≤ 65535) | `29500` |" in diff
    assert stale(tmp_path / "absent.md") != []


def test_every_key_of_the_model_is_documented() -> None:
    text = render()
    for name, field in LabConfig.model_fields.items():
        assert f"| `{field.alias or name}` |" in text


def test_the_trainers_table_is_listed_a_row_each_under_the_models_it_names() -> None:
    """Each hyperparameter but `model`, whose values are the columns, in the table's order."""
    section = render().split("## The trainer's hyperparameters")[1]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert listed == [name for name in HYPERPARAMETERS if name != "model"]
    assert "| name | `airbench` | `resnet9` |" in section


def test_the_check_command_exits_by_freshness() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lab.config.reference", "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
