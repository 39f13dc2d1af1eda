"""Stopping a playbook run whose ansible-playbook ends while it is being stopped (Ctrl-C, SIGTERM):
the run's workers, which hold its variables, secret ones included, are killed whatever the
leader did meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bootstrap import run_cleanup


def test_a_leader_reaped_while_it_is_read_still_lets_the_workers_be_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # ansible-playbook as pexpect starts it (leading a session of its own), and a worker of the
    # run, which carries the run's mark in its environment.
    mark = run_cleanup.new_mark(work)
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        start_new_session=True,
        env={**os.environ, run_cleanup.RUN_MARK: mark},
    )
    read_text = Path.read_text

    def reaped_in_between(path: Path, *args: object, **kwargs: object) -> str:
        # The leader ends (SIGTERM) and is reaped exactly between a look at its /proc entry and the
        # read: the window Ctrl-C hit.
        if path == Path(f"/proc/{leader.pid}/stat"):
            leader.wait(timeout=10)
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", reaped_in_between)
    try:
        run_cleanup.stop_playbook(leader.pid, work)
        assert worker.wait(timeout=10) == -9, "the run's worker outlived the stop"
    finally:
        for proc in (leader, worker):
            proc.kill()
            proc.wait()
