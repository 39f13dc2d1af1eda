"""Seam: the Jobs `pulumi up` awaits (image build, dataset, sweep) against what pulumi-kubernetes and
the engine do with them on the next `up` (tests/support/rules/pulumi_job_rules.py, with its sources).

The next `up` after Ctrl-C must wait for a Job that still runs, not kill it, and must run a Job
that failed again, not fail on it forever. The program decides the Job's annotation from the
Job the cluster holds (lab/cluster/live_jobs.py), so the program is run the way `pulumi up` runs
it, under the engine's mocks, with the host bootstrap answering a kubeconfig whose API server is a
local HTTPS server that reports the lab's Jobs running, failed or complete.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from lab.cluster.live_jobs import has_failed
from lab.cluster.program_run import ProgramRun, run_program
from tests.support.apiserver import kubeconfig, recording_server
from tests.support.program import name_of, recorded
from tests.support.rules.pulumi_job_rules import job, next_up

STACK = "example-sweep"  # awaits all three Jobs: build, dataset, sweep


def job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"


def awaited_jobs(run: ProgramRun) -> dict[str, str]:
    """Job name -> its API path, for every Job the program declares."""
    return {name_of(j): job_path(j.inputs["metadata"]["namespace"], name_of(j)) for j in run.of_kind("Job")}


def next_up_with_live(state: str, tmp_path: Path) -> tuple[dict[str, str], set[str]]:
    """Each Job's fate on the next `up` when the cluster holds every Job in `state`, and the paths
    the program asked the API server for."""
    paths = awaited_jobs(recorded(STACK))
    (tmp_path / "client").mkdir()
    with recording_server(tmp_path) as server:
        server.replies = {path: (200, job(state)) for path in paths.values()}
        run = run_program(STACK, kubeconfig=kubeconfig(server, tmp_path))
        asked = {r.path for r in server.requests}
    fates = {name_of(j): next_up({"kind": "Job", **j.inputs}, job(state)) for j in run.of_kind("Job")}
    return fates, asked


def test_the_stack_awaits_three_jobs() -> None:
    assert len(awaited_jobs(recorded(STACK))) == 3


def test_a_rerun_waits_for_jobs_that_still_run(tmp_path: Path) -> None:
    fates, asked = next_up_with_live("running", tmp_path)
    assert set(fates.values()) == {"waits"}, fates
    jobs = {path for path in asked if path.startswith("/apis/batch/")}
    assert jobs == set(awaited_jobs(recorded(STACK)).values()), "the program reads each awaited Job"


def test_a_rerun_runs_failed_jobs_again(tmp_path: Path) -> None:
    fates, _ = next_up_with_live("failed", tmp_path)
    assert set(fates.values()) == {"replaced"}, fates


def test_a_rerun_leaves_complete_jobs_alone(tmp_path: Path) -> None:
    fates, _ = next_up_with_live("complete", tmp_path)
    assert set(fates.values()) == {"done"}, fates


def test_without_a_cluster_nothing_is_replaced() -> None:
    """`labctl render` and a first `up`: no Job exists, the program asks no one."""
    for j in recorded(STACK).of_kind("Job"):
        assert not j.inputs["metadata"].get("annotations")


def test_always_annotated_jobs_are_killed_while_they_run() -> None:
    """The defect this seam had: every awaited Job carried replaceUnready."""
    inputs = {"kind": "Job", "metadata": {"annotations": {"pulumi.com/replaceUnready": "true"}}}
    assert next_up(inputs, job("running")) == "replaced"
    assert next_up({"kind": "Job", "metadata": {}}, job("failed")) == "fails"  # and without it, forever


@pytest.mark.parametrize(
    ("status", "body"), [(404, {"kind": "Status", "code": 404}), (403, {}), (200, job("running"))]
)
def test_only_a_job_reported_failed_counts_as_failed(status: int, body: object, tmp_path: Path) -> None:
    (tmp_path / "client").mkdir()
    with recording_server(tmp_path) as server:
        server.replies = {job_path("lab", "build"): (status, body)}
        assert has_failed(kubeconfig(server, tmp_path), "lab", "build") is False


def test_an_unreachable_api_server_replaces_nothing(tmp_path: Path) -> None:
    (tmp_path / "client").mkdir()
    with recording_server(tmp_path) as server:
        config = kubeconfig(server, tmp_path)
    assert has_failed(config, "lab", "build") is False  # the server is gone


def test_no_client_key_is_on_disk_while_the_api_server_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill of the program while it waits on the API server (a second Ctrl-C, the OOM killer)
    runs no clean-up: the admin key must be gone from disk before the request is sent."""
    (tmp_path / "client").mkdir()
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    seen: list[list[str]] = []
    with recording_server(tmp_path) as server:
        server.on_request = lambda _: seen.append(sorted(str(p.relative_to(spool)) for p in spool.rglob("*")))
        assert has_failed(kubeconfig(server, tmp_path), "lab", "build") is False
    assert seen == [[]], f"on disk during the request: {seen}"


@pytest.mark.parametrize(
    "reply",
    [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"],
    ids=["bad status line", "body cut short"],
)
def test_a_reply_cut_short_replaces_nothing(reply: bytes, tmp_path: Path) -> None:
    """A server or proxy that drops the connection mid-reply: no traceback in the program."""
    (tmp_path / "client").mkdir()
    with recording_server(tmp_path) as server:
        server.raw = {job_path("lab", "build"): reply}
        assert has_failed(kubeconfig(server, tmp_path), "lab", "build") is False
        assert [r.path for r in server.requests] == [job_path("lab", "build")]
