"""Every artefact of a run says what it trained on, and a generated set says it is not CIFAR-10:
the run folder's files, the curves (their PNG's own text fields too), `labctl results` and
`labctl status` on it, and a sweep's report and plot. Read from runs the real trainer wrote on
a generated set, as `labctl try` writes them when CIFAR-10 cannot be downloaded."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from tests.support.labctl import labctl
from trainer.contract import GENERATED, TRAINED_ON


def test_every_file_of_a_run_on_generated_data_says_so(trained_runs: Path) -> None:
    run = trained_runs / "single"
    assert json.loads((run / "summary.json").read_text())[TRAINED_ON] == GENERATED
    assert json.loads((run / "status.json").read_text())[TRAINED_ON] == GENERATED
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines and all(line[TRAINED_ON] == GENERATED for line in lines)
    with Image.open(run / "curves.png") as png:
        fields = png.text
    assert GENERATED in fields["Title"] and "says nothing about CIFAR-10" in fields["Description"]
    with Image.open(trained_runs / "lrsweep" / "sweep.png") as png:
        assert GENERATED in png.text["Title"]


def test_labctl_shows_what_each_run_trained_on(trained_runs: Path, tmp_path: Path) -> None:
    results = labctl("results", "--runs-dir", trained_runs, "--stacks-dir", tmp_path)
    assert results.code == 0, results.err
    (row,) = [line for line in results.out.splitlines() if "│ single " in line]
    # No time to the CIFAR-10 target: the run never saw CIFAR-10.
    assert GENERATED in row and row.rstrip("│ ").endswith("- (not CIFAR-10)"), row
    members = [line for line in results.out.splitlines() if "lr=" in line]
    assert len(members) == 2 and all(GENERATED in line and "- (not CIFAR-10)" in line for line in members)
    status = labctl("status", "--runs-dir", trained_runs, "--run", "single", "--stacks-dir", tmp_path)
    assert status.code == 0, status.err
    assert any("trained on" in line and GENERATED in line for line in status.out.splitlines()), status.out
