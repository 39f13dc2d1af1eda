"""`labctl status --run` and `labctl wait --run` take a run folder's name or SWEEP/INDEX, as the
trainer names them; a path, `..` or a control character is one line, before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.labctl import assert_one_line_error, labctl


@pytest.mark.parametrize(
    "name", ["/etc", "../runs", "lrsweep/../..", "a/b/c", "lrsweep/x", ".", "run\x1b[31m"]
)
@pytest.mark.parametrize("command", ["status", "wait"])
def test_a_run_that_is_no_run_name_is_refused(command: str, name: str, tmp_path: Path) -> None:
    extra = ["--timeout", "1"] if command == "wait" else []
    result = labctl(command, "--runs-dir", tmp_path, f"--run={name}", *extra)
    assert_one_line_error(result, "is not a run: name its folder under the runs folder")
    assert "\x1b" not in result.err


def test_a_sweep_member_is_still_a_run(tmp_path: Path) -> None:
    result = labctl("status", "--runs-dir", tmp_path, "--run", "lrsweep/1")
    assert_one_line_error(result, "no run 'lrsweep/1'")
