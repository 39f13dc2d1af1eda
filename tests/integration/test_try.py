"""`labctl try` end to end on its own two test machines: machines, bootstrap, DDP across both,
results and plots, validation, teardown; and a Ctrl-C after the machines are up leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import testbed
from lab.cli.try_local import STACK, layout
from lab.inventory import STATE_DIR
from lab.testbed import processes

pytestmark = pytest.mark.timeout(600)
RUN_TIMEOUT_S = 480


@pytest.fixture(scope="module")
def turn(root: None) -> Iterator[None]:
    """The integration tests' lock (the try's own `exclusive()` sees that this process holds it)."""
    with testbed.exclusive():
        if testbed.leftovers(layout()):
            testbed.down(layout())
        yield


def _start(out: Path) -> subprocess.Popen[str]:
    """`labctl try` in a session of its own, as a terminal runs it (Ctrl-C reaches the whole group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "lab.cli", "try", "--generated", "--epochs", "2", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"COLUMNS": "200", "TERM": "dumb"},
        start_new_session=True,
    )


def _nothing_left() -> None:
    assert testbed.leftovers(layout()) == []
    assert not (STATE_DIR / STACK).exists()
    # No trainer, torchrun or playbook of the run: they name its work folder or state.
    stray = [
        pid
        for pid in map(int, (p.name for p in Path("/proc").glob("[0-9]*")))
        if any(
            mark in " ".join(processes.command_line(pid))
            for mark in ("k8scifar-try-", str(STATE_DIR / STACK))
        )
    ]
    assert stray == [], [processes.command_line(pid) for pid in stray]


def test_try_trains_across_both_machines_and_removes_them(turn: None, tmp_path: Path) -> None:
    proc = _start(tmp_path / "results")
    out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, out
    # Said up front: what it does not cover and how long it takes; the data said plainly.
    assert "Not covered here: Kubernetes" in out and "minutes on 2 cores" in out
    assert "NOT real CIFAR-10: a generated CIFAR-format set" in out
    epochs = [line for line in out.splitlines() if line.strip().startswith("epoch ")]
    assert len(epochs) == 2 and all("img/s" in e and "eta" in e and "test" in e for e in epochs), out
    (run,) = (tmp_path / "results").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["epochs"] == 2
    assert {"curves.png", "metrics.jsonl", "validation.txt"} <= {p.name for p in run.iterdir()}
    assert not (run / "checkpoints").exists()
    report = (run / "validation.txt").read_text()
    assert "PASS" in report and "FAIL" not in report and "ERROR" not in report, report
    _nothing_left()


def test_ctrl_c_after_the_machines_are_up_leaves_nothing(turn: None, tmp_path: Path) -> None:
    proc = _start(tmp_path / "results")
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "2/5 bootstrap" in line:  # the machines are up and Ansible is starting on them
            break
    else:
        pytest.fail("labctl try ended before the bootstrap:\n" + "".join(seen))
    time.sleep(5)  # well into site.yml: ansible-playbook and ssh sessions to both machines run
    assert testbed.leftovers(layout()) != []
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + out
    assert "teardown" in out and "labctl: interrupted" in out
    _nothing_left()
