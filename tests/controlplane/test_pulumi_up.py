"""The user's command, for real: `pulumi up --stack NAME` on the lab's own project, through the
Pulumi CLI, the Python language host and pulumi-resource-kubernetes from the tools, against the
real control plane; every assertion reads the live cluster.

The stack is the CPU example's, its machines the control plane's kwok nodes, naming the control
plane's kubeconfig instead of bootstrapping hosts, with no gang scheduler. The tests play two parts
of the cluster's, each with the ServiceAccount token the program gives it: the build's digest write
(tests/support/build_play.py) and rank 0's scale to zero at the end of the run
(tests/support/handoff_play.py). The tests share one stack and run in order: up, a second up,
the run's hand-off, a new run, a scale-down by hand, destroy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.labels import selector_labels
from lab.cluster.namespace import build_namespace
from lab.config import PROJECT
from lab.controlplane import netns
from tests.support.build_play import PLAYED_DIGEST
from tests.support.handoff_play import account_kubeconfig, hand_off
from tests.support.labctl import labctl
from tests.support.live_stack import (
    LiveStack,
    brought_up,
    derived_values,
    live_object,
    ok,
    pods_of,
    ready,
    wait_for,
)

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


def test_labctl_status_reads_the_ranks_and_workloads_through_the_api(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    """As the operator runs it beside the stack: no node is logged in to."""
    stacks = live.project.stack_file(live.stack).parent
    args = ("status", "--stack", live.stack, "--stacks-dir", stacks)
    result = labctl(*args, prefix=netns.inside(plane.layout))
    assert result.code == 0, (result.out, result.err)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.out.splitlines()]
    names = {n.name for n in live.lab.nodes}
    ranks = [row for row in rows if len(row) == 5 and row[2] in names]
    assert sorted(row[0] for row in ranks) == [str(i) for i in range(live.lab.replicas)], result.out
    assert all(row[3] == "Running" for row in ranks), result.out
    (statefulset,) = [row for row in rows if row[:1] == ["StatefulSet"]]
    assert statefulset[2] == f"{live.lab.replicas}/{live.lab.replicas} ready", result.out
    assert any(row[:1] == ["Job"] and row[2] == "complete" for row in rows), result.out
    assert "run progress:" in result.out


def test_a_second_up_changes_nothing(live: LiveStack) -> None:
    # The CLI fails the update when any step changed something (pulumi `--expect-no-changes`).
    ok(live.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes"))


def _ranks(plane: controlplane.ControlPlane, live: LiveStack) -> list[dict[str, Any]]:
    lab = live.lab
    return pods_of(plane, lab.namespace, selector_labels(lab.namespace, training.APP, training.COMPONENT))


def _statefulset(plane: controlplane.ControlPlane, live: LiveStack) -> dict[str, Any]:
    return live_object(plane, "statefulset", training.NAME, live.lab.namespace)


def _run(statefulset: dict[str, Any]) -> str:
    return str(statefulset["metadata"]["annotations"][training.RUN_ANNOTATION])


def _runs_every_rank(plane: controlplane.ControlPlane, live: LiveStack, run: str) -> None:
    """The live set holds the run's world size, each rank Ready with the run's own arguments."""
    assert _statefulset(plane, live)["spec"]["replicas"] == live.lab.world.pods
    pods = _ranks(plane, live)
    assert len(pods) == live.lab.world.pods
    for pod in pods:
        assert ready(pod), pod["metadata"]["name"]
        (container,) = pod["spec"]["containers"]
        assert container["args"] == training.launch_args(live.lab, run), pod["metadata"]["name"]


def test_rank_0_hands_the_finished_run_back_through_its_role_alone(
    plane: controlplane.ControlPlane, live: LiveStack, tmp_path: Path
) -> None:
    lab = live.lab
    # The Role allows the scale subresource's patch and nothing else: `kubectl scale`, which reads
    # the set first, is refused.
    scale = controlplane.kubectl(
        plane.layout,
        *("scale", "statefulset", training.NAME, "-n", lab.namespace, "--replicas=0"),
        kubeconfig=account_kubeconfig(plane.layout, lab, tmp_path),
        check=False,
    )
    assert scale.returncode != 0
    assert "forbidden" in scale.stderr
    done = hand_off(plane.layout, lab, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    statefulset = _statefulset(plane, live)
    assert statefulset["spec"]["replicas"] == 0
    # The API server records a scale to zero under no field manager, which is what the program
    # reads to tell a finished run from a set at zero for another reason.
    assert training.replicas_holders(statefulset) == set()
    assert training.handed_back(statefulset, _run(statefulset))
    wait_for("the ranks' pods are gone", lambda: not _ranks(plane, live))


def test_refresh_then_up_leaves_the_finished_run_at_zero(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    before = _statefulset(plane, live)
    ok(live.pulumi("refresh", "--yes", "--skip-preview"))
    # The refreshed state holds zero replicas; the program declares the finished run's zero too.
    ok(live.pulumi("up", "--yes", "--skip-preview", "--expect-no-changes"))
    after = _statefulset(plane, live)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["replicas"] == 0
    assert _ranks(plane, live) == []


def test_a_changed_hyperparameter_starts_a_new_run_of_the_world_size(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    before = _statefulset(plane, live)
    epochs = live.lab.trainer.epochs
    assert epochs is not None, "the example names its epochs"
    live.configure("trainer.epochs", epochs + 1)
    ok(live.pulumi("up", "--yes", "--skip-preview"))
    after = _statefulset(plane, live)
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the set of the finished run is replaced"
    assert _run(after) != _run(before)
    _runs_every_rank(plane, live, _run(after))


def test_a_set_edited_to_zero_by_hand_gets_its_world_size_back_after_refresh(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    before = _statefulset(plane, live)
    lab = live.lab
    zero = json.dumps({"spec": {"replicas": 0}})
    controlplane.kubectl(
        plane.layout, "patch", "statefulset", training.NAME, "-n", lab.namespace, "--type=merge", "-p", zero
    )
    wait_for("the ranks' pods are gone", lambda: not _ranks(plane, live))
    ok(live.pulumi("refresh", "--yes", "--skip-preview"))
    ok(live.pulumi("up", "--yes", "--skip-preview"))
    after = _statefulset(plane, live)
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the same run, scaled in place"
    _runs_every_rank(plane, live, _run(before))


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
