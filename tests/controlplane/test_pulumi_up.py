"""The user's command, for real: `pulumi up --stack NAME` on the lab's own project, through the
Pulumi CLI, the Python language host and pulumi-resource-kubernetes from the tools, against the
real control plane; every assertion reads the live cluster.

The stack is the CPU example's, its machines the control plane's kwok nodes, naming the control
plane's kubeconfig instead of bootstrapping hosts, with no gang scheduler. The test plays one part
of the cluster's: the build's digest write (tests/support/build_play.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.labels import selector_labels
from lab.cluster.namespace import build_namespace
from lab.config import PROJECT
from tests.support.build_play import PLAYED_DIGEST
from tests.support.live_stack import LiveStack, brought_up, derived_values, ok, pods_of, ready

STACK = "example-cpu-live"
# Cluster-wide kinds the lab may declare: none may be left after destroy.
CLUSTER_KINDS = "persistentvolumes,priorityclasses,clusterroles,clusterrolebindings,runtimeclasses"


@pytest.fixture(scope="module")
def live(
    plane: controlplane.ControlPlane, base_stack: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    values = derived_values(plane, base_stack, {"gang": "none"})
    yield from brought_up(plane, tmp_path_factory.mktemp("pulumi"), STACK, values)


def test_up_returns_with_every_rank_scheduled_and_ready(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    ok(live.up)
    lab = live.lab
    assert live.digest.result == ["written"], "the build's ServiceAccount could not record the digest"
    pods = pods_of(plane, lab.namespace, selector_labels(lab.namespace, training.APP, training.COMPONENT))
    assert len(pods) == lab.replicas
    for pod in pods:
        assert pod["spec"].get("nodeName") in {n.name for n in lab.nodes}, pod["metadata"]["name"]
        assert ready(pod), pod["metadata"]["name"]
        assert all(c["image"].endswith(f"@{PLAYED_DIGEST}") for c in pod["spec"]["containers"])


def test_the_kubeconfig_stays_out_of_the_output_and_the_state(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    key = next(
        line.split(":", 1)[1].strip()
        for line in plane.layout.kubeconfig.read_text().splitlines()
        if line.strip().startswith("client-key-data:")
    )
    state = "".join(p.read_text() for p in live.project.backend.rglob("*.json"))
    assert key not in live.up.stdout + live.up.stderr
    assert key not in state


def test_a_second_up_changes_nothing(live: LiveStack) -> None:
    # The CLI fails the update when any step changed something (pulumi `--expect-no-changes`).
    ok(live.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes"))


def _names(plane: controlplane.ControlPlane, kind: str) -> set[str]:
    found = controlplane.kubectl(plane.layout, "get", kind, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(found)["items"]
    return {i["metadata"]["name"] for i in items}


def test_destroy_leaves_no_object_and_no_namespace_terminating(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    ok(live.pulumi("destroy", "--yes", "--skip-preview"))
    lab = live.lab
    assert _names(plane, "namespaces").isdisjoint({lab.namespace, build_namespace(lab)})
    left = controlplane.kubectl(
        plane.layout, "get", CLUSTER_KINDS, "-l", f"app.kubernetes.io/part-of={PROJECT}", "-o", "name"
    )
    assert left.stdout.strip() == ""
