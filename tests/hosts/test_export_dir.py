"""The nfs_server role takes only an export directory that is the lab's own, and purge deletes only
the lab's folders in it: run for real by Ansible on this machine, with the export in a temporary
folder."""

from __future__ import annotations

from pathlib import Path

from tests.hosts.local_play import run_tasks


def _check(export: Path, work: Path) -> tuple[int, str]:
    done = run_tasks("nfs_server", "check_export.yml", work, {"lab_nfs_export_path": str(export)})
    return done.returncode, done.stdout + done.stderr


def test_an_export_directory_with_someone_elses_files_is_refused(tmp_path: Path) -> None:
    export = tmp_path / "export"
    assert _check(export, tmp_path / "new")[0] == 0, "a new directory is the lab's"
    export.mkdir()
    (export / "datasets").mkdir()
    (export / "runs").mkdir()
    assert _check(export, tmp_path / "lab-own")[0] == 0, "the lab's own folders (a re-run)"
    (export / "thesis.tex").write_text("years of work\n")
    (export / ".git").mkdir()
    code, output = _check(export, tmp_path / "foreign")
    assert code != 0
    assert f"nfs.exportPath {export} already holds .git, thesis.tex, which the lab did not put there" in (
        " ".join(output.split())
    ), output
    assert (export / "thesis.tex").read_text() == "years of work\n"


def test_purge_deletes_only_the_labs_folders(tmp_path: Path) -> None:
    export = tmp_path / "export"
    for folder in ("datasets", "runs"):
        (export / folder).mkdir(parents=True)
        (export / folder / "data").write_text("the lab's\n")
    (export / "kept").write_text("not the lab's\n")
    variables = {
        "lab_nfs_export_path": str(export),
        "lab_nfs_purge_on_destroy": True,
        "nfs_server_exports_file": str(tmp_path / "k8scifar.exports"),
    }
    done = run_tasks("nfs_server", "reset.yml", tmp_path / "reset", variables, {"exportfs": "exit 0"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in export.iterdir()) == ["kept"]
