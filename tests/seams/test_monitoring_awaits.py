"""Seam: the monitoring stack's Helm releases against `pulumi up`'s await and the engine's reaction to
a failed step, next to the objects that train.

Monitoring must never gate training. Two upstream rules decide whether it does:

- pulumi-kubernetes installs a Release with Helm's `Wait` unless `skipAwait` is set, for
  `timeout` seconds (300 when unset), and a release whose resources are not ready by then fails
  its Create (pulumi/pulumi-kubernetes provider/pkg/provider/helm_release.go: `client.Wait =
  !newRelease.SkipAwait`, `defaultTimeoutSeconds = 300`, `releaseFailedError`); a crash-looping
  exporter (no GPU libraries, a host port taken) is such a release;
- the engine cancels every step not yet started once one step fails, unless `--continue-on-error`
  (pulumi/pulumi pkg/resource/deploy/step_executor.go `cancelDueToError`).

So a release that is awaited and never ready stops the dataset Job and the StatefulSet from ever
being created, on the first `up` and every later one; and an object that depends on a release
waits for it whatever the release's await. Both sides as the program declares them, recorded
under the engine's mocks.
"""

from __future__ import annotations

import pytest

from lab.cluster.versions import KUEUE_CHART
from tests.support.program import ProgramRun, Registered, cluster_stacks, name_of, recorded
from tests.support.program_objects import waits_for

# What trains, and what it needs first: none of it may wait for monitoring.
TRAINING_KINDS = ("StatefulSet", "Job")


def monitoring_releases(run: ProgramRun) -> list[Registered]:
    """The monitoring stack's releases: every Helm release but Kueue's, which admits the training
    pods (its webhooks fail closed: tests/seams/test_kueue_awaits.py) and so must be awaited."""
    return [r for r in run.helm_releases() if r.inputs["chart"] != KUEUE_CHART]


def awaited(release: Registered) -> bool:
    """Whether pulumi-kubernetes runs Helm's install with `Wait` (helm_release.go: `!SkipAwait`)."""
    return not release.inputs.get("skipAwait", False)


def training_objects(run: ProgramRun) -> list[Registered]:
    return [r for r in run.kubernetes_objects() if r.kind in TRAINING_KINDS]


@pytest.mark.parametrize("stack", cluster_stacks())
def test_no_monitoring_release_is_awaited(stack: str) -> None:
    run = recorded(stack)
    releases = monitoring_releases(run)
    assert releases, f"{stack}: the shipped stacks install the monitoring stack"
    assert [r.inputs["name"] for r in releases if awaited(r)] == []


@pytest.mark.parametrize("stack", cluster_stacks())
def test_nothing_that_trains_waits_for_a_monitoring_release(stack: str) -> None:
    run = recorded(stack)
    gates = [
        f"{r.kind} {name_of(r)} waits for {release.inputs['name']}"
        for r in training_objects(run)
        for release in monitoring_releases(run)
        if waits_for(run, r, release.urn)
    ]
    assert gates == []
    assert {r.kind for r in training_objects(run)} == set(TRAINING_KINDS)


def test_the_rules_see_an_awaited_release_and_a_gated_statefulset() -> None:
    """Each check catches the defect it is for, on a copy of a real run."""
    run = recorded("example-gpu")
    release = monitoring_releases(run)[0]
    assert awaited(Registered(**{**vars(release), "inputs": {**release.inputs, "skipAwait": False}}))
    statefulset = next(r for r in training_objects(run) if r.kind == "StatefulSet")
    gated = Registered(**{**vars(statefulset), "dependencies": [*statefulset.dependencies, release.urn]})
    assert waits_for(run, gated, release.urn)
