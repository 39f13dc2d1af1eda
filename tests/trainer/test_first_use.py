"""What a user meets first: a finished run re-run, defaults that cannot learn, one failing rank
under torchrun, and the learning curves' figure."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.lines import Line2D

from tests.support.trainer_runs import read_json, run, torchrun, trainer
from trainer import contract
from trainer.loader import few_steps_warning
from trainer.pod import lifecycle, run_state
from trainer.records import plots


def test_a_finished_run_is_reported_complete_and_a_batch_too_big_for_the_data_warns(
    dataset: Path, tmp_path: Path
) -> None:
    # The default batch of 1024 on the 1,536 images of the test set: one step an epoch.
    command = trainer(
        "train", "--data", dataset, "--runs", tmp_path, "--run-name", "big", "--width", "8", "--tta", "0",
        "--epochs", "1",
    )  # fmt: skip
    first = run(command)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (
        "warning: --batch-size 1024 leaves 1 step(s) per epoch on 1,536 training images, too few to"
        " learn; use --batch-size 128 or less" in first.stderr
    )
    summary = read_json(tmp_path / "big" / "summary.json")
    again = run(command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"run {tmp_path / 'big'} is already complete (best test accuracy" in again.stdout
    assert "resumed" not in again.stdout and "warning" not in again.stderr
    assert read_json(tmp_path / "big" / "summary.json") == summary, "nothing rewritten, no restart counted"


def test_the_few_steps_warning_starts_below_ten_steps_an_epoch() -> None:
    assert few_steps_warning(1536, 128) is None, "12 steps: the tests' own runs learn"
    assert few_steps_warning(50_000, 1024) is None
    assert "9 step(s) per epoch" in (few_steps_warning(9 * 1024, 1024) or "")
    assert "use --batch-size 4 or less" in (few_steps_warning(40, 32) or "")


def test_one_failing_rank_under_torchrun_is_one_line_and_torchruns_root_cause(
    dataset: Path, tmp_path: Path
) -> None:
    """Rank 0 cannot write its run folder (--runs is a file); rank 1 waits at the rendezvous."""
    runs = tmp_path / "not-a-folder"
    runs.write_text("")
    result = run(
        torchrun(
            2, "train", "--data", dataset, "--runs", runs, "--run-name", "x", "--width", "8", "--tta", "0"
        )
    )
    assert result.returncode != 0
    message = f"error: cannot write the run folder {runs / 'x'} (Not a directory)"
    worker_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(worker_lines) == 1 and worker_lines[0].startswith(message), result.stderr[-4000:]
    # torchrun's summary names the rank and carries the line as its root cause, not a link.
    root_cause = result.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 0 (local_rank: 0)" in root_cause
    assert f"traceback : {message}" in root_cause and "To enable traceback" not in result.stderr
    # One traceback: torchrun's own. Rank 1 was waiting and ends at torchrun's SIGTERM, quietly.
    assert result.stderr.count("Traceback (most recent call last)") == 1
    assert "exitcode  : -15" in result.stderr.split("Root Cause")[0]


def test_fresh_is_ignored_in_a_round_torchrun_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    where = run_state.RunOptions(Path("r"), "gloo", 10, 3, 0.94, "exit", fresh=True)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert lifecycle._fresh(where)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert not lifecycle._fresh(where), "a restarted round resumes what the first round wrote"


HISTORY = [
    {"epoch": e, "train_loss": 2.3 / e, "test_loss": 2.0 / e, "train_acc": 0.3 * e, "test_acc": 0.3 * e}
    for e in (1, 2, 3)
]


def test_the_curves_name_the_run_use_whole_epochs_a_log_loss_and_show_the_target() -> None:
    labels = plots.RunLabels("small", "airbench", 2, 0.94, 0.2, contract.CIFAR10)
    figure = plots.curves_figure(HISTORY, labels)
    figure.canvas.draw()
    loss, accuracy = figure.axes
    assert figure.get_suptitle() == "run small: airbench on 2 ranks, trained on CIFAR-10"
    assert loss.get_yscale() == "log"
    for axes in (loss, accuracy):
        assert all(tick == int(tick) for tick in axes.get_xticks()), axes.get_xticks()
    flat = [
        line for line in accuracy.get_lines() if isinstance(line, Line2D) and len(set(line.get_ydata())) == 1
    ]
    assert [line.get_ydata()[0] for line in flat] == [0.94] and flat[0].get_label() == "target 94%"
    notes = " ".join(text.get_text() for text in figure.texts)
    assert "smoothed by 0.2" in notes and "above the test loss" in notes
    assert plots.smoothing_floor(0.2, 10) == pytest.approx(0.8669, abs=1e-4)


def test_curves_of_a_generated_set_draw_no_cifar10_target() -> None:
    """On a generated set a 94% CIFAR-10 target line beaten at 99% would read as a CIFAR-10 result."""
    labels = plots.RunLabels("small", "airbench", 2, 0.94, 0.2, contract.GENERATED)
    figure = plots.curves_figure(HISTORY, labels)
    _, accuracy = figure.axes
    assert figure.get_suptitle().endswith(f"trained on {contract.GENERATED}")
    flat = [line for line in accuracy.get_lines() if len(set(line.get_ydata())) == 1]
    assert flat == [] and "no CIFAR-10 target" in accuracy.get_title()
