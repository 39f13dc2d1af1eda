"""The machine's own failures are one line naming the path and the fix, with nothing half-written:
a state folder that is a file, a read-only or full disk under the state folder or a --fetch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.labctl import assert_one_line_error, labctl, write_stack
from tests.support.tmpfs import fill, tmpfs

NODES = [
    {"name": "node-a", "address": "192.0.2.1", "user": "root", "role": "server"},
    {"name": "node-b", "address": "192.0.2.2", "user": "root", "role": "agent"},
]


def _stack(tmp_path: Path) -> Path:
    key = tmp_path / "key"
    key.write_text("not a key")
    stacks = tmp_path / "stacks"
    write_stack(stacks, "lab", {"nodes": NODES, "ssh": {"keyPath": str(key)}})
    return stacks


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp-" in p.name or p.name.endswith(".draft"))


@pytest.mark.parametrize("where", ["state", "state/lab"])
def test_a_state_folder_that_is_a_file_is_one_line(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8SCIFAR_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text("in the way")
    result = labctl("status", "--stack", "lab", "--stacks-dir", _stack(tmp_path))
    assert_one_line_error(
        result, f"{tmp_path / where} is a file where a folder must be", "move it away", "K8SCIFAR_STATE_DIR"
    )


def test_a_read_only_state_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with tmpfs(tmp_path / "ro", read_only=True) as state:
        monkeypatch.setenv("K8SCIFAR_STATE_DIR", str(state))
        result = labctl("status", "--stack", "lab", "--stacks-dir", _stack(tmp_path))
    assert_one_line_error(result, f"{state}/lab", "Read-only file system", "remount it read-write")


def _runs(base: Path) -> Path:
    run = base / "runs" / "big"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "complete"}))
    (run / "curves.png").write_bytes(b"\x89PNG" + bytes(512 * 1024))
    return base / "runs"


def test_a_fetch_onto_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    with tmpfs(tmp_path / "full", size="256k") as full:
        result = labctl("results", "--runs-dir", runs, "--fetch", full / "copy")
        assert_one_line_error(result, "No space left on device", "the disk is full", str(full))
        assert sorted(p.name for p in full.iterdir()) == [], "a half-written copy was left"


def test_a_fetch_into_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "copy").write_text("a file")
    result = labctl("results", "--runs-dir", _runs(tmp_path), "--fetch", tmp_path / "copy" / "sub")
    assert_one_line_error(result, f"{tmp_path / 'copy'} is a file where a folder must be")


def test_a_file_written_on_a_full_disk_keeps_its_old_content(tmp_path: Path) -> None:
    from lab.files import MachineError, write_file

    with tmpfs(tmp_path / "full", size="256k") as full:
        write_file(full / "record", "old")
        fill(full)
        with pytest.raises(MachineError, match=r"record: No space left on device; the disk is full"):
            write_file(full / "record", "new" * 100_000)
        assert (full / "record").read_text() == "old"
        assert _leftovers(full) == []


def test_a_fetch_does_not_write_through_a_link_inside_the_destination(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    copy = tmp_path / "copy"
    copy.mkdir()
    # A run folder of the copy that is a link to elsewhere, as a former fetch may have left.
    (copy / "big").symlink_to("../victim")
    result = labctl("results", "--runs-dir", runs, "--fetch", copy)
    assert_one_line_error(result, f"{copy / 'big'} is a symbolic link", "fetch into a new folder")
    assert list(victim.iterdir()) == []
    assert sorted(p.name for p in copy.iterdir()) == ["big"], "a file was placed before the refusal"


def test_a_fetch_into_the_root_folder_is_one_line(tmp_path: Path) -> None:
    result = labctl("results", "--runs-dir", _runs(tmp_path), "--fetch", "/")
    assert_one_line_error(result, "/ is the root folder", "such as ./results")


@pytest.mark.parametrize("dest", [".", ""])
def test_a_fetch_into_the_working_folder_copies_there(
    dest: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _runs(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = labctl("results", "--runs-dir", runs, "--fetch", dest)
    assert result.code == 0, result.err
    assert (work / "big" / "status.json").is_file()
