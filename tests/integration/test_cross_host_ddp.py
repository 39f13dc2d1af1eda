"""DDP across the two test machines: ranks in the machines' network namespaces, Gloo over the veths.

A fault (rank 1 killed, or its link down for longer than the collective timeout) must cost a
restart from the latest checkpoint and nothing else: the run ends with the undisturbed run's figures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lab import testbed
from lab.testbed import ddp

# The trainer also waits this long for a restarted peer: room for a slow start on a busy machine.
COLLECTIVE_TIMEOUT_S = 30
JOB_TIMEOUT_S = 240
# Figures that must not move when a run is interrupted and resumed.
FIGURES = ("final_test_acc", "final_test_loss", "best_test_acc", "steps", "epochs", "world_size")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("ddp")
    return ddp.make_dataset(base / "data"), base / "runs"


def _start(machines: testbed.Testbed, folders: tuple[Path, Path], name: str) -> ddp.DdpJob:
    data, runs = folders
    run = ddp.DdpJob(machines.layout, ddp.small_run(data, runs, name), name, COLLECTIVE_TIMEOUT_S)
    run.start()
    return run


@pytest.fixture
def job(machines: testbed.Testbed, folders: tuple[Path, Path]) -> Iterator[Callable[[str], ddp.DdpJob]]:
    """Starts a run named as asked; every run is killed at the end of the test whatever happened."""
    started: list[ddp.DdpJob] = []

    def start(name: str) -> ddp.DdpJob:
        started.append(_start(machines, folders, name))
        return started[-1]

    yield start
    for run in started:
        run.stop()


def _summary(folders: tuple[Path, Path], name: str) -> dict[str, Any]:
    return json.loads((folders[1] / name / "summary.json").read_text())


@pytest.fixture(scope="module")
def undisturbed(machines: testbed.Testbed, folders: tuple[Path, Path]) -> dict[str, Any]:
    run = _start(machines, folders, "undisturbed")
    try:
        assert run.wait(JOB_TIMEOUT_S) == [0, 0], run.output()
    finally:
        run.stop()
    summary = _summary(folders, "undisturbed")
    assert summary["world_size"] == 2 and summary["restarts"] == 0
    return summary


def _in_own_namespaces(machines: testbed.Testbed, run: ddp.DdpJob) -> None:
    """Each rank runs in its machine's namespace, so their traffic crosses the veths and the bridge."""
    for node, machine in enumerate(machines.layout.machines):
        (worker,) = run.worker_pids(node)
        assert os.readlink(f"/proc/{worker}/ns/net") == f"net:[{os.stat(machine.netns_path).st_ino}]"


def _finishes_like(
    undisturbed: dict[str, Any], folders: tuple[Path, Path], run: ddp.DdpJob, name: str, fault_at: float
) -> None:
    recovery = run.recovery(fault_at, JOB_TIMEOUT_S)
    assert run.wait(JOB_TIMEOUT_S) == [0, 0], run.output()
    summary = _summary(folders, name)
    assert summary["restarts"] >= 1
    assert {k: summary[k] for k in FIGURES} == {k: undisturbed[k] for k in FIGURES}
    print(
        f"{name}: regrouped {recovery.regrouped_s:.1f} s, next epoch {recovery.next_epoch_s:.1f} s after it"
    )


def test_killed_rank_resumes_from_checkpoint_with_the_same_figures(
    machines: testbed.Testbed,
    job: Callable[[str], ddp.DdpJob],
    undisturbed: dict[str, Any],
    folders: tuple[Path, Path],
) -> None:
    run = job("rank-killed")
    run.wait_for(ddp.EPOCH_LINE, JOB_TIMEOUT_S)  # a checkpoint exists from here on
    _in_own_namespaces(machines, run)
    fault_at = run.kill_worker(1)
    _finishes_like(undisturbed, folders, run, "rank-killed", fault_at)


def test_link_down_past_the_timeout_resumes_with_the_same_figures(
    job: Callable[[str], ddp.DdpJob], undisturbed: dict[str, Any], folders: tuple[Path, Path]
) -> None:
    run = job("link-down")
    run.wait_for(ddp.EPOCH_LINE, JOB_TIMEOUT_S)
    fault_at = run.cut_link(1, COLLECTIVE_TIMEOUT_S + 5)
    _finishes_like(undisturbed, folders, run, "link-down", fault_at)
    # The group broke on the collective timeout, not on a closed connection.
    assert run.find(f"Timed out waiting {COLLECTIVE_TIMEOUT_S * 1000}ms", after=fault_at), run.output()
