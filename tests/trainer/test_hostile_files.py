"""The trainer's own files as hostile input: run folders, sweeps and the dataset sit on the shared
export, which every node's root can write. Each command that opens one reads it as `labctl
results` does (trainer/records/runfolders.py): a pipe, a device, a folder, a link out of its folder
or bytes that are not UTF-8 end in one line naming the file, never a hang, an unbounded read or a
traceback."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from trainer import cli, data

SECRET = {"state": "complete", "pid": 1, "best_test_acc": 0.99, "hyperparameters": {}}


def _fifo(target: Path) -> None:
    os.mkfifo(target)


def _dev_zero(target: Path) -> None:
    target.symlink_to("/dev/zero")


def _folder(target: Path) -> None:
    target.mkdir()


def _not_utf8(target: Path) -> None:
    target.write_bytes(b'{"state": "complete", "x": "\xff"}')


def _link_out(target: Path) -> None:
    # A file outside the folder, which only whoever made the link meant to be read.
    secret = target.parent.parent / f"secret-{target.name}"
    secret.write_text(json.dumps(SECRET))
    target.symlink_to(secret)


HOSTILE: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "dev-zero": _dev_zero,
    "folder": _folder,
    "not-utf8": _not_utf8,
}
# What each refusal says is wrong (a link is refused as such inside a folder, else by its target).
REASON = {
    "fifo": ("is a pipe",),
    "dev-zero": ("is a device", "is a symbolic link"),
    "folder": ("is not a regular file",),
    "not-utf8": ("UTF-8",),
}


def _probe_run(tmp: Path) -> tuple[Path, list[str]]:
    return tmp / "run" / "status.json", ["probe", "--run", str(tmp / "run")]


def _probe_ready(tmp: Path) -> tuple[Path, list[str]]:
    return tmp / "run" / "ready", ["probe", "--ready", str(tmp / "run" / "ready")]


def _train_sweep(tmp: Path) -> tuple[Path, list[str]]:
    sweep = tmp / "run" / "sweep.json"
    flags = ["--data", str(tmp), "--runs", str(tmp / "runs"), "--run-name", "r", "--sweep", str(sweep)]
    return sweep, ["train", *flags, "--index", "0"]


def _generate_space(tmp: Path) -> tuple[Path, list[str]]:
    space = tmp / "run" / "space.json"
    return space, ["sweep", "generate", "--space", str(space), "--out", str(tmp / "out.json")]


def _sweep_report(tmp: Path) -> tuple[Path, list[str]]:
    (tmp / "run" / "0").mkdir()
    return tmp / "run" / "0" / "summary.json", ["sweep", "report", "--dir", str(tmp / "run")]


# Each command and where its file lies; the first two and the report read files inside a folder,
# where no link is followed; the others a file the flag names, whose links are (a ConfigMap's
# mount is one) but which must still be a regular file of bounded size.
COMMANDS = {
    "probe --run": _probe_run,
    "probe --ready": _probe_ready,
    "train --sweep": _train_sweep,
    "sweep generate --space": _generate_space,
    "sweep report": _sweep_report,
}
IN_A_FOLDER = ("probe --run", "sweep report")


def _one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    said = (out + err).strip()
    assert said.count("\n") == 0, said
    return code, said


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_hostile_file_ends_the_command_in_one_line(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").mkdir()
    target, args = COMMANDS[command](tmp_path)
    HOSTILE[kind](target)
    code, said = _one_line(args, capsys)
    assert code != 0, said
    assert str(target) in said or f"{target.parent}: " in said, said
    assert any(reason in said for reason in REASON[kind]), said
    assert said.count("delete it") <= 1, said


@pytest.mark.parametrize("command", IN_A_FOLDER)
def test_a_link_out_of_the_folder_is_not_followed(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").mkdir()
    target, args = COMMANDS[command](tmp_path)
    _link_out(target)
    code, said = _one_line(args, capsys)
    assert code != 0 and "is a symbolic link" in said and "0.99" not in said, said


def test_a_named_file_is_read_through_the_links_its_path_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A sweep reaches the pods through a ConfigMap volume, whose files are links into ..data/.
    (tmp_path / "run").mkdir()
    space, args = _generate_space(tmp_path)
    real = tmp_path / "run" / "..data"
    real.mkdir()
    (real / "space.json").write_text(json.dumps({"parameters": {"epochs": [2, 3]}}))
    space.symlink_to(Path("..data") / "space.json")
    code, said = _one_line(args, capsys)
    assert code == 0 and said.startswith("2 hyperparameter sets written"), said


@pytest.mark.parametrize("kind", [*HOSTILE, "link-out"])
@pytest.mark.parametrize("name", [data.MANIFEST, "data_batch_2"])
def test_a_hostile_dataset_file_is_refused_in_one_line(kind: str, name: str, tmp_path: Path) -> None:
    folder = data.write_synthetic(tmp_path, train=50, test=20, seed=0)
    (folder / name).unlink()
    (_link_out if kind == "link-out" else HOSTILE[kind])(folder / name)
    with pytest.raises(data.DataError) as caught:
        data.load(tmp_path, train=True)
    assert str(folder / name) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("summary", ['{"best_test_acc": "x"}', "[1, 2]", '{"best_test_acc": true}'])
def test_a_summary_without_an_accuracy_is_named_by_sweep_report(
    summary: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").mkdir()
    target, args = _sweep_report(tmp_path)
    target.write_text(summary)
    code, said = _one_line(args, capsys)
    assert code == 2 and f"{target}: " in said and "delete it" in said, said


@pytest.mark.parametrize("kind", [*HOSTILE, "not-json"])
def test_a_refused_search_space_is_not_sent_to_the_command_that_reads_it(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep generate` reads a search space and writes a sweep file: a refused space is the
    operator's to write, not the generator's."""
    (tmp_path / "run").mkdir()
    space, args = _generate_space(tmp_path)
    if kind == "not-json":
        space.write_text("parameters: {epochs: [2, 3]}")
    else:
        HOSTILE[kind](space)
    code, said = _one_line(args, capsys)
    assert code != 0 and "search space" in said, said
    assert "sweep generate" not in said and "write the search space as a JSON object" in said, said
