"""A GPU lab of 4 nodes with 8 GPUs each, gang-scheduled by the Kueue beside the control plane: Kueue
admits the run within its quota and holds all of it when the quota is short, and `spread` and
`pack` place the pods as they should. Every assertion reads the live cluster.

The stack is the GPU example's, its machines four kwok nodes added to the control plane for this
module (their `nvidia.com/gpu` capacity and taint as lab/controlplane/nodes.py makes them), with a
world of 6 ranks: 3 pods of 2 GPUs (lab/config/world.py), which `spread` puts on 3 nodes and
`pack` on one. The tests share the stack and run in order: `spread` admitted, then the quota cut
below the run while `up` changes to `pack`, then the quota restored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.gang import API_VERSION, quotas
from lab.cluster.labels import selector_labels
from lab.cluster.pods import GPU_RESOURCE
from lab.config import LabConfig, parse_config
from lab.controlplane import nodes
from tests.support.live_stack import LiveStack, brought_up, derived_values, ok, pods_of, ready, wait_for

STACK = "example-gpu-gang"
BASE = "example-gpu"
MACHINES, GPUS = 4, 8
RANKS = 6
GROUP = API_VERSION.split("/")[0]
# Kueue holds a queued pod back with this scheduling gate until its workload is admitted.
ADMISSION_GATE = f"{GROUP}/admission"


@pytest.fixture(scope="module")
def values(plane: controlplane.ControlPlane) -> dict[str, Any]:
    values = derived_values(plane, BASE, {"gang": "kueue"}, {"kueue": True})
    template = values["nodes"][0]
    values["nodes"] = [
        {
            **template,
            "name": f"gpu-{chr(ord('a') + i)}",
            "address": f"192.168.50.{21 + i}",
            "role": "server" if i == 0 else "agent",
            "gpus": GPUS,
        }
        for i in range(MACHINES)
    ]
    trainer = {**values["trainer"], "replicas": RANKS, "placement": "spread"}
    # The example's batch does not split over 6 ranks: the lab then takes the nearest that does.
    trainer.pop("batchSize", None)
    values["trainer"] = trainer
    return values


@pytest.fixture(scope="module")
def gpu_nodes(plane: controlplane.ControlPlane, values: dict[str, Any]) -> Iterator[LabConfig]:
    lab = parse_config(values)
    nodes.create(plane.layout, lab.nodes)
    yield lab
    nodes.delete(plane.layout, lab.nodes)


@pytest.fixture(scope="module")
def live(
    plane: controlplane.ControlPlane,
    values: dict[str, Any],
    gpu_nodes: LabConfig,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveStack]:
    yield from brought_up(plane, tmp_path_factory.mktemp("pulumi"), STACK, values)


def _items(plane: controlplane.ControlPlane, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(controlplane.kubectl(plane.layout, "get", *args, "-o", "json").stdout)["items"])


def _ranks(plane: controlplane.ControlPlane, lab: LabConfig) -> list[dict[str, Any]]:
    return pods_of(plane, lab.namespace, selector_labels(lab.namespace, training.APP, training.COMPONENT))


def _conditions(item: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}


def _gpus(pod: dict[str, Any]) -> int:
    return sum(int(c["resources"]["limits"].get(GPU_RESOURCE, 0)) for c in pod["spec"]["containers"])


def _admitted_on(plane: controlplane.ControlPlane, lab: LabConfig) -> list[str]:
    """The run admitted as one workload, every rank Ready with its GPUs: the nodes of its pods."""
    (workload,) = _items(plane, f"workloads.{GROUP}", "-n", lab.namespace)
    assert _conditions(workload).get("Admitted") == "True"
    (podset,) = workload["spec"]["podSets"]
    assert podset["count"] == lab.world.pods
    pods = _ranks(plane, lab)
    assert len(pods) == lab.world.pods
    for pod in pods:
        assert ready(pod), pod["metadata"]["name"]
        assert _gpus(pod) == lab.world.ranks_per_pod
    return [p["spec"]["nodeName"] for p in pods]


def test_kueue_admits_the_gang_within_its_quota_and_spread_gives_each_pod_a_node(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    ok(live.up)
    assert live.lab.world.pods == RANKS // live.lab.world.ranks_per_pod > 1
    placed = _admitted_on(plane, live.lab)
    assert len(set(placed)) == len(placed)


def _gpu_quota(plane: controlplane.ControlPlane, lab: LabConfig, gpus: int) -> None:
    """Set the lab's ClusterQueue's GPU quota, as an administrator would."""
    index = list(quotas(lab)).index(GPU_RESOURCE)
    path = f"/spec/resourceGroups/0/flavors/0/resources/{index}/nominalQuota"
    patch = json.dumps([{"op": "replace", "path": path, "value": str(gpus)}])
    controlplane.kubectl(
        plane.layout, "patch", f"clusterqueues.{GROUP}", lab.namespace, "--type=json", "-p", patch
    )


def test_kueue_holds_all_of_the_gang_while_the_quota_is_short_and_pack_shares_a_node(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    lab = live.lab
    _gpu_quota(plane, lab, lab.world.ranks - 1)
    live.configure("trainer.placement", "pack")
    with ThreadPoolExecutor(max_workers=1) as pool:
        # `up` replaces the set and waits for the new run's ranks while Kueue holds them back.
        up = pool.submit(live.pulumi, "up", "--yes", "--skip-preview")
        try:

            def pending() -> bool:
                # The StatefulSet controller makes the new run's pods a moment after Kueue's workload.
                found = _items(plane, f"workloads.{GROUP}", "-n", lab.namespace)
                waiting = len(found) == 1 and _conditions(found[0]).get("QuotaReserved") == "False"
                return waiting and len(_ranks(plane, lab)) == lab.world.pods

            wait_for("every pod of the new run exists and its workload waits for quota", pending)
            pods = _ranks(plane, lab)
            for pod in pods:
                gates = [g["name"] for g in pod["spec"].get("schedulingGates", [])]
                assert ADMISSION_GATE in gates, pod["metadata"]["name"]
                assert not pod["spec"].get("nodeName"), "no pod of a gang Kueue holds is placed"
        finally:
            _gpu_quota(plane, lab, quotas(lab)[GPU_RESOURCE])
        ok(up.result())
    placed = _admitted_on(plane, lab)
    assert len(set(placed)) == 1, placed
