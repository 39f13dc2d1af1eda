"""The nfs_server role takes only an export directory that is the lab's own, and purge deletes only
what the lab made in it: run for real by Ansible on this machine, with the export in a temporary
folder. (tests/integration/test_owner_data.py runs the same through site.yml on the test machines.)"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.validation.suite.checks import EXPORT_MARK as MARK
from tests.support.local_play import run_tasks


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A temporary folder reached through directories only their owner may write: the role refuses
    an export under a world-writable directory such as /tmp, where pytest's own would be."""
    base = "/run" if os.access("/run", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="k8scifar-export-test-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _check(export: Path, work: Path) -> tuple[int, str]:
    done = run_tasks("nfs_server", "check_export.yml", work, {"lab_nfs_export_path": str(export)})
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def _lab_made(export: Path) -> Path:
    for folder in ("datasets", "runs"):
        (export / folder).mkdir(parents=True)
    (export / MARK).write_text("made by the lab\n")
    return export


def test_only_a_new_export_or_one_the_lab_made_is_taken(tmp_path: Path) -> None:
    assert _check(tmp_path / "new" / "export", tmp_path / "new-run")[0] == 0, "a new directory is the lab's"
    assert _check(_lab_made(tmp_path / "made"), tmp_path / "re-run")[0] == 0, "the lab's own export"


def test_an_owners_directory_is_refused_even_when_it_looks_like_the_labs(tmp_path: Path) -> None:
    owners = tmp_path / "owners"
    for folder in ("datasets/imagenet", "runs/exp42"):
        (owners / folder).mkdir(parents=True)
    (owners / "runs/exp42/model.pt").write_text("weeks of training\n")
    code, output = _check(owners, tmp_path / "run")
    assert code != 0
    assert f"nfs.exportPath {owners}: {owners} already exists and the lab did not make it" in output, output
    assert "choose a path that does not exist yet" in output and "Nothing was changed" in output
    assert (owners / "runs/exp42/model.pt").read_text() == "weeks of training\n"


def test_someone_elses_files_in_the_labs_export_are_refused(tmp_path: Path) -> None:
    export = _lab_made(tmp_path / "export")
    (export / "thesis.tex").write_text("years of work\n")
    (export / ".git").mkdir()
    code, output = _check(export, tmp_path / "run")
    assert code != 0
    assert f"{export} holds .git, thesis.tex, which the lab did not put there" in output, output


def test_links_and_directories_others_may_write_on_the_way_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "linked").symlink_to(target)
    code, output = _check(tmp_path / "linked" / "export", tmp_path / "run-link")
    assert code != 0 and f"{tmp_path / 'linked'} is a symbolic link" in output, output

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    code, output = _check(shared / "export", tmp_path / "run-shared")
    assert code != 0 and f"{shared} is writable by every user" in output, output

    for name, owner, mode, who in (("users", 65534, 0o755, "user 65534"), ("team", 0, 0o775, "group 0")):
        parent = tmp_path / name
        parent.mkdir()
        os.chown(parent, owner, 0)
        parent.chmod(mode)
        code, output = _check(parent / "export", tmp_path / f"run-{name}")
        assert code != 0 and f"{parent} is writable by {who}" in output, output

    export = _lab_made(tmp_path / "export")
    (export / "runs").rmdir()
    (export / "runs").symlink_to(target)
    code, output = _check(export, tmp_path / "run-folder")
    assert code != 0 and f"{export / 'runs'} is a symbolic link, not the lab's folder" in output, output


def _reset(export: Path, work: Path, record: str | None, purge: bool = True) -> None:
    state = work / "state"
    state.mkdir(parents=True)
    if record is not None:
        (state / "export").write_text(record + "\n")
    variables = {
        "lab_nfs_export_path": str(export),
        "lab_nfs_purge_on_destroy": purge,
        "lab_state_dir": str(state),
        "nfs_server_exports_file": str(work / "k8scifar.exports"),
    }
    done = run_tasks("nfs_server", "reset.yml", work / "play", variables, {"exportfs": "exit 0"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_purge_deletes_only_what_the_lab_made(tmp_path: Path) -> None:
    export = _lab_made(tmp_path / "export")
    (export / "runs" / "run-1").mkdir()
    _reset(export, tmp_path / "all", str(export))
    assert not export.exists(), "the export the lab made, with nothing else in it, is gone"

    export = _lab_made(tmp_path / "kept")
    (export / "notes.txt").write_text("someone's\n")
    target = tmp_path / "precious"
    target.mkdir()
    (target / "file").write_text("not the lab's\n")
    (export / "datasets").rmdir()
    (export / "datasets").symlink_to(target)
    _reset(export, tmp_path / "some", str(export))
    assert sorted(os.listdir(export)) == ["datasets", "notes.txt"], "only the lab's folder and mark go"
    assert (target / "file").read_text() == "not the lab's\n", "purge followed a link"


def test_purge_leaves_an_export_the_record_does_not_name(tmp_path: Path) -> None:
    export = _lab_made(tmp_path / "export")
    _reset(export, tmp_path / "unrecorded", None)
    _reset(export, tmp_path / "other", str(tmp_path / "another"))
    _reset(export, tmp_path / "kept", str(export), purge=False)
    assert sorted(os.listdir(export)) == [MARK, "datasets", "runs"]
