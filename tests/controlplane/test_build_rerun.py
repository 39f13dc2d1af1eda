"""The image build Job across `pulumi up`s, for real: a build that failed is replaced on the next
`up`, and one still running is kept and awaited (lab/cluster/live_jobs.py).

The stack is the CPU example's on the control plane's kwok nodes. kwok plays how each build pod
ends (tests/support/build_play.py `BuildPods`): failed by its chaos stage, or held running. The
tests share the stack and run in order: a first `up` whose build pods all fail; a second that
replaces the failed Job and is interrupted (Ctrl-C) while the new build runs; a third that finds
that build running, keeps it, and returns once it has completed and every rank is Ready.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.labels import selector_labels
from lab.cluster.live_jobs import REPLACE_UNREADY
from lab.config import parse_config
from tests.support.build_play import FAILED, HELD, BuildPods, ReleaseWhen, build_items
from tests.support.live_stack import LiveStack, brought_up, derived_values, ok, pods_of, ready

STACK = "example-cpu-build"
# A third `up` that never sees its build released must not wait out the build's 60-minute await.
UP_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def values(plane: controlplane.ControlPlane, base_stack: str) -> dict[str, Any]:
    return derived_values(plane, base_stack, {"gang": "none"})


@pytest.fixture(scope="module")
def failing(plane: controlplane.ControlPlane, values: dict[str, Any]) -> BuildPods:
    return BuildPods(plane.layout, parse_config(values), FAILED)


@pytest.fixture(scope="module")
def live(
    plane: controlplane.ControlPlane,
    values: dict[str, Any],
    failing: BuildPods,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveStack]:
    yield from brought_up(plane, tmp_path_factory.mktemp("pulumi"), STACK, values, during=failing)


@pytest.fixture(scope="module")
def seen() -> dict[str, str]:
    """What one test saw of the build Job and the next reads: the uids of the failed and held Jobs."""
    return {}


def _job(plane: controlplane.ControlPlane, live: LiveStack) -> dict[str, Any]:
    (job,) = build_items(plane.layout, live.lab, "jobs")
    return job


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in job["status"].get("conditions", []))


def test_a_build_whose_pods_fail_fails_its_job_and_the_up(
    plane: controlplane.ControlPlane, live: LiveStack, failing: BuildPods, seen: dict[str, str]
) -> None:
    assert live.up.returncode != 0, "up returned with its image build failed"
    job = _job(plane, live)
    assert _condition(job, "Failed"), job["status"]
    # The Job's own retries, each failed by kwok's stage.
    assert len(failing.marked) == job["spec"]["backoffLimit"] + 1
    pods = build_items(plane.layout, live.lab, "pods")
    assert {p["metadata"]["name"] for p in pods} == set(failing.marked)
    assert all(p["status"]["phase"] == "Failed" for p in pods)
    seen["failed"] = job["metadata"]["uid"]


def test_the_next_up_replaces_the_failed_build(
    plane: controlplane.ControlPlane, live: LiveStack, seen: dict[str, str]
) -> None:
    with BuildPods(plane.layout, live.lab, HELD) as holding:
        # Interrupted once the new build runs, as a user stops an `up` that waits for a long build.
        interrupted = live.pulumi("up", "--yes", "--skip-preview", interrupt=holding.first)
    assert interrupted.returncode != 0
    job = _job(plane, live)
    assert job["metadata"]["uid"] != seen["failed"], "the failed Job was not replaced"
    assert not _condition(job, "Failed") and not _condition(job, "Complete")
    assert job["status"].get("active") == 1
    # The program marked it for replacement because it had failed: the new Job carries the mark.
    assert REPLACE_UNREADY.items() <= job["metadata"]["annotations"].items()
    (seen["held"],) = holding.marked
    seen["running"] = job["metadata"]["uid"]


def test_a_running_build_is_kept_and_awaited_by_the_next_up(
    plane: controlplane.ControlPlane, live: LiveStack, seen: dict[str, str]
) -> None:
    def kept() -> bool:
        """The running Job updated in place: the program no longer marks it for replacement."""
        job = _job(plane, live)
        annotations = job["metadata"].get("annotations") or {}
        return job["metadata"]["uid"] == seen["running"] and not REPLACE_UNREADY.keys() & annotations.keys()

    # Released only once `up` has decided, so the build is running while the program reads it.
    with ReleaseWhen(plane.layout, live.lab, seen["held"], kept) as releasing:
        ok(live.pulumi("up", "--yes", "--skip-preview", timeout=UP_TIMEOUT_S))
    assert releasing.released.is_set()
    job = _job(plane, live)
    assert job["metadata"]["uid"] == seen["running"]
    assert _condition(job, "Complete")
    lab = live.lab
    pods = pods_of(plane, lab.namespace, selector_labels(lab.namespace, training.APP, training.COMPONENT))
    assert len(pods) == lab.world.pods
    assert all(ready(p) for p in pods)
