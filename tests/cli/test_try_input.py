"""`labctl try` refuses bad input in one line, before it makes anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.labctl import Labctl, Result, assert_one_line_error


def test_a_data_folder_without_cifar_batches_is_one_line(tmp_path: Path, labctl_in_process: Labctl) -> None:
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"")
    result = labctl_in_process("try", "--data", tmp_path, "--out", tmp_path / "out")
    assert_one_line_error(result, f"--data {tmp_path}", "missing cifar-10-batches-py/data_batch_2")
    assert not (tmp_path / "out").exists() and "labctl try:" not in result.out


def test_help_says_what_it_needs_and_skips(labctl_in_process: Labctl) -> None:
    result = labctl_in_process("try", "--help")
    assert result.code == 0 and "Needs root" in result.out and "Kubernetes is not installed" in result.out


def test_an_out_folder_it_cannot_write_is_refused_before_anything_starts(
    tmp_path: Path, labctl_in_process: Labctl
) -> None:
    """The results are written after minutes of work: a place they cannot go is named first."""
    (tmp_path / "file").write_text("")
    for out, problem in ((Path("/proc/x"), "cannot write in /proc"), (tmp_path / "file" / "x", "is a file")):
        result = labctl_in_process("try", "--generated", "--out", out)
        assert_one_line_error(result, f"--out {out}: ", problem)
        assert "labctl try:" not in result.out and not out.exists()


def test_a_machine_without_prometheus_is_told_to_run_setup(tmp_path: Path) -> None:
    """Its Prometheus is one of the host tools it needs: missing, it is named with the rest, before
    anything starts."""
    if os.geteuid() != 0:
        pytest.skip("needs root: labctl try checks for root before its tools")
    bare = tmp_path / "bin"
    bare.mkdir()  # a PATH with none of the tools
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", "try", "--generated", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": str(bare), "COLUMNS": "400"},
        timeout=120,
        check=False,
    )
    result = Result(done.returncode, done.stdout, done.stderr)
    assert_one_line_error(
        result, "missing host tools:", "prometheus (package prometheus), promtool (package prometheus)",
        "scripts/setup.sh as root",
    )  # fmt: skip
    assert not (tmp_path / "out").exists()
