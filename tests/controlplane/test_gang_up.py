"""The CPU example with Kueue as its gang scheduler, on the Kueue that runs beside the control plane
(`provides.kueue`): `pulumi up` declares the lab's queue objects on it, Kueue admits the
training run as one workload, and every rank starts; destroy removes the lab's queue objects and
leaves Kueue as it was. The stack also says the nodes share a folder (`provides.volume`): the
claims bind to volumes on it, and no NFS volume is declared. Every assertion reads the live
cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.gang import API_VERSION, LOCAL_QUEUE
from lab.cluster.labels import selector_labels
from tests.support.live_stack import LiveStack, brought_up, derived_values, ok, pods_of, ready

STACK = "example-cpu-gang"
SHARED = "/srv/shared"
GROUP = API_VERSION.split("/")[0]
QUEUE_KINDS = [f"{kind}.{GROUP}" for kind in ("clusterqueues", "resourceflavors", "workloadpriorityclasses")]


@pytest.fixture(scope="module")
def live(
    plane: controlplane.ControlPlane, base_stack: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    provides = {"kueue": True, "volume": {"sharedFolder": SHARED}}
    values = derived_values(plane, base_stack, {"gang": "kueue"}, provides)
    values.pop("nfs", None)  # the export the lab then does not make
    yield from brought_up(plane, tmp_path_factory.mktemp("pulumi"), STACK, values)


def _items(plane: controlplane.ControlPlane, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(controlplane.kubectl(plane.layout, "get", *args, "-o", "json").stdout)["items"])


def test_kueue_admits_the_training_run_as_one_workload(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    ok(live.up)
    lab = live.lab
    (workload,) = _items(plane, f"workloads.{GROUP}", "-n", lab.namespace)
    assert workload["spec"]["queueName"] == LOCAL_QUEUE
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions.get("Admitted") == "True"
    (podset,) = workload["spec"]["podSets"]
    assert podset["count"] == lab.replicas  # all ranks in one admission
    pods = pods_of(plane, lab.namespace, selector_labels(lab.namespace, training.APP, training.COMPONENT))
    assert len(pods) == lab.replicas
    for pod in pods:
        assert not pod["spec"].get("schedulingGates"), "Kueue released its gate on admission"
        assert pod["spec"].get("nodeName") and ready(pod), pod["metadata"]["name"]


def test_the_claims_bind_to_the_shared_folder_the_stack_provides(
    plane: controlplane.ControlPlane, live: LiveStack
) -> None:
    ok(live.up)
    claims = _items(plane, "persistentvolumeclaims", "-n", live.lab.namespace)
    assert claims and {c["status"]["phase"] for c in claims} == {"Bound"}
    bound = {c["spec"]["volumeName"]: c["metadata"]["name"] for c in claims}
    volumes = [v for v in _items(plane, "persistentvolumes") if v["metadata"]["name"] in bound]
    assert len(volumes) == len(claims)
    for volume in volumes:
        assert "nfs" not in volume["spec"]
        folder = bound[volume["metadata"]["name"]]
        assert volume["spec"]["hostPath"] == {"path": f"{SHARED}/{folder}", "type": "Directory"}


def test_destroy_leaves_kueue_as_it_was(plane: controlplane.ControlPlane, live: LiveStack) -> None:
    ok(live.pulumi("destroy", "--yes", "--skip-preview"))
    for kind in QUEUE_KINDS:
        assert _items(plane, kind) == [], kind
    # Kueue still serves: its API and webhooks answer.
    done = controlplane.kubectl(
        plane.layout, "create", "--dry-run=server", "-f", "-", stdin=controlplane.kueue.PROBE
    )
    assert done.returncode == 0
