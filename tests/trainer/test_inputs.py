"""The trainer reads numbers in ASCII digits only and a run name as one plain folder name: a path,
`..`, a control character or '٣' is refused in one line before anything is read or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.cli import main

NOT_RUN_NAMES = [
    "/etc",
    "/tmp/elsewhere",
    "../escape",
    "a/../../b",
    "sweep/0",
    ".",
    "..",
    ".hidden",
    "-rf",
    "",
    "x" * 101,
    "naïve",
    "a b",
    "run\x1b[2J",
    "run\n2",
    "run\\2",
    "C:\\runs",
]


@pytest.mark.parametrize("name", NOT_RUN_NAMES)
def test_a_run_name_that_is_no_plain_folder_name_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        main(["train", "--data", str(tmp_path / "data"), "--runs", str(runs), f"--run-name={name}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --run-name" in err and "is not a run name" in err, err
    assert "\x1b" not in err
    assert not runs.exists()


@pytest.mark.parametrize("name", ["single", "lrsweep", "airbench-0123456789", "lr_sweep.2", "9", "A" * 100])
def test_plain_run_names_are_accepted(name: str, tmp_path: Path) -> None:
    from trainer import inputs

    assert inputs.run_name(name) == name


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--epochs", "٣"),
        ("--epochs", "３"),
        ("--seed", "１２"),
        ("--lr", "٠.١"),
        ("--batch-size", "²"),
        ("--width", "߈"),
        ("--metrics-port", "٩٤٦٤"),
    ],
)
def test_numbers_in_other_digits_are_refused(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["train", "--data", str(tmp_path), "--runs", str(tmp_path), "--run-name", "r", flag, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}" in err, err


@pytest.mark.parametrize("text", ["٢", "２", "2²", "1_0", "0x2", " ", "1.0"])
def test_environment_numbers_in_other_digits_are_refused(text: str) -> None:
    from trainer import distributed

    with pytest.raises(distributed.JobEnvironmentError, match="WORLD_SIZE"):
        distributed.topology({"WORLD_SIZE": text, "RANK": "0"})
    with pytest.raises(distributed.JobEnvironmentError, match="RANK"):
        distributed.topology({"WORLD_SIZE": "2", "RANK": text})


def test_a_pod_ordinal_and_a_completion_index_are_ascii(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer import distributed, sweep
    from trainer.cli import _sweep_index
    from trainer.launch import torchrun_command

    with pytest.raises(distributed.JobEnvironmentError):
        distributed.topology({"WORLD_SIZE": "2", "POD_NAME": "trainer-١"})
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "١")
    with pytest.raises(sweep.SweepError):
        _sweep_index(None)
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "a", "MASTER_PORT": "1", "PET_NPROC_PER_NODE": "٢"}
    with pytest.raises(distributed.JobEnvironmentError, match="PET_NPROC_PER_NODE"):
        torchrun_command(env, ["train"], 0)


@pytest.mark.parametrize("text", ["12", "+3", "-4", " 5 "])
def test_ascii_integers_read(text: str) -> None:
    from trainer import inputs

    assert inputs.integer(text) == int(text)
