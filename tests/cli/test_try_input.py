"""`labctl try` refuses bad input in one line, before it makes anything."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import assert_one_line_error, labctl


def test_a_data_folder_without_cifar_batches_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"")
    result = labctl("try", "--data", tmp_path, "--out", tmp_path / "out")
    assert_one_line_error(result, f"--data {tmp_path}", "missing cifar-10-batches-py/data_batch_2")
    assert not (tmp_path / "out").exists() and "labctl try:" not in result.out


def test_help_says_what_it_needs_and_skips() -> None:
    result = labctl("try", "--help")
    assert result.code == 0 and "Needs root" in result.out and "Kubernetes is not installed" in result.out


def test_an_out_folder_it_cannot_write_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The results are written after minutes of work: a place they cannot go is named first."""
    (tmp_path / "file").write_text("")
    for out, problem in ((Path("/proc/x"), "cannot write in /proc"), (tmp_path / "file" / "x", "is a file")):
        result = labctl("try", "--generated", "--out", out)
        assert_one_line_error(result, f"--out {out}: ", problem)
        assert "labctl try:" not in result.out and not out.exists()
