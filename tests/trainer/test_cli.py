"""The command line as pods and operators use it: wait-on-complete and probe, sweeps, refusals."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.trainer_runs import read_json, run, start, trainer, wait_for
from trainer.cli import _parser, main
from trainer.hyperparameters import HYPERPARAMETERS, Fixed
from trainer.records import report

TINY = ["--width", "8", "--batch-size", "128", "--tta", "0", "--epochs", "1"]


def test_on_complete_wait_sleeps_until_sigterm_and_skips_a_finished_run(
    dataset: Path, tmp_path: Path, processes: list
) -> None:
    run_dir = tmp_path / "pod"
    command = trainer(
        "train", "--data", dataset, "--runs", tmp_path, "--run-name", "pod", *TINY, "--on-complete", "wait"
    )
    assert run(trainer("probe", "--run", run_dir)).returncode == 1, "no status yet: not ready"
    for attempt, log in enumerate((tmp_path / "first.log", tmp_path / "second.log")):
        process = start(command, log)
        processes.append(process)
        wait_for(lambda log=log: "is complete" in log.read_text(), "the completion line")
        assert process.poll() is None, "a pod's trainer must not exit after completing"
        probe = run(trainer("probe", "--run", run_dir))
        assert probe.returncode == 0 and "complete" in probe.stdout
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        trained = "epoch   1/1" in log.read_text()
        assert trained == (attempt == 0), "the second start finds the completed run and trains nothing"
    assert "best test accuracy" in (tmp_path / "second.log").read_text()


def test_a_changed_config_on_an_existing_run_is_refused(dataset: Path, tmp_path: Path) -> None:
    base = ["train", "--data", dataset, "--runs", tmp_path, "--run-name", "same", *TINY]
    assert run(trainer(*base)).returncode == 0
    changed = run(trainer(*base, "--lr", "0.5"))
    assert changed.returncode == 2
    assert "belongs to a run with different hyperparameters" in changed.stderr
    assert "--run-name" in changed.stderr and "Traceback" not in changed.stderr


def test_sweep_index_selects_a_set_and_the_report_ranks_runs(dataset: Path, tmp_path: Path) -> None:
    space = {"strategy": "grid", "seed": 0, "parameters": {"lr": [0.05, 1.5], "epochs": [1]}}
    (tmp_path / "space.json").write_text(json.dumps(space))
    sweep_file = tmp_path / "sweep.json"
    generated = run(trainer("sweep", "generate", "--space", tmp_path / "space.json", "--out", sweep_file))
    assert generated.returncode == 0 and "2 hyperparameter sets" in generated.stdout
    flags = ["--data", dataset, "--runs", tmp_path, "--run-name", "sw", *TINY, "--sweep", sweep_file]
    for index in ("0", "1"):
        result = run(trainer("train", *flags), JOB_COMPLETION_INDEX=index)
        assert result.returncode == 0, result.stderr
    sets = read_json(sweep_file)["sets"]
    for index in (0, 1):
        assert (
            read_json(tmp_path / "sw" / str(index) / "summary.json")["hyperparameters"]["lr"]
            == sets[index]["lr"]
        )
    shown = run(trainer("sweep", "report", "--dir", tmp_path / "sw", "--plot", tmp_path / "sweep.png"))
    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()
    accuracies = {i: read_json(tmp_path / "sw" / i / "summary.json")["best_test_acc"] for i in ("0", "1")}
    best = max(accuracies, key=lambda i: accuracies[i])
    assert rows[0].split()[:3] == ["#", "run", "best"] and rows[1].split()[1] == best
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    missing = run(trainer("train", *flags))
    assert missing.returncode == 2 and "JOB_COMPLETION_INDEX" in missing.stderr
    beyond = run(trainer("train", *flags, "--index", "2"))
    assert beyond.returncode == 2 and "index 2 is out of range" in beyond.stderr


def _summary(folder: Path, best: float, lr: float) -> None:
    folder.mkdir(parents=True)
    content = {
        "best_test_acc": best,
        "final_test_acc": best,
        "wall_seconds": 1.0,
        "hyperparameters": {"lr": lr, "batch_size": 512, "model": "airbench"},
    }
    (folder / "summary.json").write_text(json.dumps(content))


def test_report_orders_best_first_and_shows_what_varied(tmp_path: Path) -> None:
    for index, (best, lr) in enumerate([(0.91, 0.1), (0.94, 0.2), (0.93, 0.4)]):
        _summary(tmp_path / str(index), best, lr)
    rows = report.collect(tmp_path)
    assert [row["run"] for row in rows] == ["1", "2", "0"]
    assert report.varied(rows) == ["lr"]
    lines = report.table(rows, ["lr"]).splitlines()
    assert lines[1].split() == ["1", "1", "94.00%", "94.00%", "1.0", "0.2"]


def test_bad_flags_are_named_before_anything_loads(tmp_path: Path) -> None:
    base = ["train", "--data", tmp_path, "--runs", tmp_path, "--run-name", "x"]
    for flag, value, message in [
        ("--target-accuracy", "1.5", "must be a finite number in (0, 1]"),
        ("--batch-size", "0", "must be an integer in [1, 50000]"),
        ("--momentum", "1", "must be a finite number in [0, 1)"),
    ]:
        result = run(trainer(*base, flag, value))
        assert result.returncode == 2
        assert f"argument {flag}: {message}" in result.stderr and f"got {value}" in result.stderr
    # A target of 1.0 is valid: the only complaint is about the epochs.
    complaint = run(trainer(*base, "--target-accuracy", "1.0", "--epochs", "0")).stderr.splitlines()
    assert len(complaint) == 1
    assert complaint[0].endswith("error: argument --epochs: must be an integer in [1, 1000], got 0")


# Each flag is refused by the rule trainer.hyperparameters keeps for it, the same one the stack
# file's trainer and sweep sections use.
BAD_FLAGS = [
    ("--weight-decay", "-0.0005", "must be a finite number in [0, 1)"),
    ("--cutout", "-4", "must be an integer in [0, 32]"),
    ("--cutout", "33", "must be an integer in [0, 32]"),
    ("--lr", "nan", "must be a finite number in (0, 100]"),
    ("--lr", "inf", "must be a finite number in (0, 100]"),
    ("--lr", "0", "must be a finite number in (0, 100]"),
    ("--batch-size", "50001", "must be an integer in [1, 50000]"),
    ("--batch-size", "512.5", "must be an integer"),
    ("--seed", "-1", "must be an integer in [0, 4294967295]"),
    ("--seed", str(2**64), "must be an integer in [0, 4294967295]"),
    ("--label-smoothing", "-0.1", "must be a finite number in [0, 1)"),
    ("--width", "0", "must be an integer in [1, 1024]"),
    ("--threads", "x", "must be an integer above 0"),
]


@pytest.mark.parametrize(("flag", "value", "rule"), BAD_FLAGS, ids=[f"{f}={v}" for f, v, _ in BAD_FLAGS])
def test_bad_hyperparameter_flags_get_one_line(
    flag: str, value: str, rule: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--data", str(tmp_path), "--runs", str(tmp_path), "--run-name", "x", flag, value]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert f"argument {flag}: {rule}" in lines[0] and lines[0].endswith(f"got {value}")


def test_each_hyperparameter_flag_defaults_to_its_row_of_the_table() -> None:
    """trainer/hyperparameters.py is where a flag's default is written: each row a flag may set has
    one, defaulting to the row's value, or to none where the recipes differ (the model's is taken)."""
    given = vars(_parser().parse_args(["train", "--data", "d", "--runs", "r", "--run-name", "x"]))
    settable = {name: row for name, row in HYPERPARAMETERS.items() if not isinstance(row.rule, Fixed)}
    assert {name: given.get(name, "no flag") for name in settable} == {
        name: row.common for name, row in settable.items()
    }


@pytest.mark.parametrize("index", ["abc", "-1", "0x1", "١", "9" * 5000])
def test_a_malformed_job_completion_index_is_named_as_malformed(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sweep.json").write_text('{"sets": [{"epochs": 2}]}')
    monkeypatch.setenv("JOB_COMPLETION_INDEX", index)
    flags = ["--data", str(tmp_path), "--runs", str(tmp_path / "runs"), "--run-name", "r"]
    assert main(["train", *flags, "--sweep", str(tmp_path / "sweep.json")]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith("error: JOB_COMPLETION_INDEX is ") and "not a set's index" in said, said
    assert len(said) < 200 and "\n" not in said


@pytest.mark.parametrize(
    ("command", "value"),
    [
        (["train", "--data", "d", "--runs", "r", "--run-name", "x", "--sweep", "s.json", "--index"], "١"),
        (
            ["train", "--data", "d", "--runs", "r", "--run-name", "x", "--sweep", "s.json", "--index"],
            "9" * 5000,
        ),
        (["train", "--data", "d", "--runs", "r", "--run-name", "x", "--sweep", "s.json", "--index"], "-1"),
        (["launch", "--max-restarts"], "9" * 5000),
        (["launch", "--max-restarts"], "٣"),
    ],
)
def test_a_count_flag_takes_the_digits_0_to_9_and_names_its_rule_in_one_short_line(
    command: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As JOB_COMPLETION_INDEX is read: Python's int() would take other scripts' digits, and
    argparse would echo all of a value thousands of digits long."""
    with pytest.raises(SystemExit) as stopped:
        main([*command, value, "--", "train"] if command[0] == "launch" else [*command, value])
    said = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and f"argument {command[-1]}: must be an integer from 0" in said, said
    assert len(said) < 300 and "\n" not in said, said


@pytest.mark.parametrize("flag", ["--batch-size", "--epochs", "--lr", "--seed"])
def test_a_flag_value_thousands_of_digits_long_is_not_echoed_whole(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--data", "d", "--runs", "r", "--run-name", "x", flag, "9" * 5000])
    said = capsys.readouterr().err.strip()
    assert "(5000 characters)" in said and len(said) < 300 and "\n" not in said, said
