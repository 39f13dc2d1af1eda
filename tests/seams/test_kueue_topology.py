"""Seams of Kueue's topology-aware scheduling and admission against the lab's nodes and workloads.

- The TAS flavor against the node labels: Kueue counts a node in a TAS flavor only when it carries
  every one of the flavor's nodeLabels, and takes the topology's levels from node labels
  (apis/kueue/v1beta2/resourceflavor_types.go and topology_types.go at v0.18.3; "Capacity
  calculation" in site/content/en/docs/concepts/topology_aware_scheduling.md). The flavor's labels
  must be ones the program itself puts on every GPU node (lab.cluster.gpu's node patches), the
  same the training pods select; the one level is `kubernetes.io/hostname`, which every kubelet
  sets to its node's name (kubernetes pkg/kubelet/kubelet_node_status.go, initialNode).
- One run against `waitForPodsReady.blockAdmission`: Kueue admits nothing else in the queue until
  an admitted workload's pods are all Ready (apis/config/v1beta2/configuration_types.go,
  WaitForPodsReady.BlockAdmission), and a rank is Ready only once every rank has joined. A run
  split over two workloads (two StatefulSets) would wait for itself until evicted; every rank
  of a run must be one workload, whatever the lab's size.
"""

from __future__ import annotations

import copy

import pytest

from lab.config import load_stack
from tests.support.program import ProgramRun, pod_spec, recorded
from tests.support.rules.cluster_rules import component
from tests.support.scaled_labs import SHAPES, scaled_run
from tests.support.shipped import shipped_stacks

HOSTNAME = "kubernetes.io/hostname"
STACKS = [s for s in shipped_stacks() if load_stack(s).installs_kubernetes]


def _custom(run: ProgramRun, kind: str) -> list[dict]:
    return [r.inputs for r in run.custom_objects() if r.kind == kind]


def flavor_problems(run: ProgramRun) -> list[str]:
    """Where a TAS flavor would find no node, or no topology, among what the lab labels."""
    problems = []
    labelled = [r.inputs["metadata"].get("labels", {}) for r in run.of_kind("NodePatch")]
    for flavor in _custom(run, "ResourceFlavor"):
        spec = flavor["spec"]
        if "topologyName" not in spec:
            continue
        wanted = spec.get("nodeLabels", {})
        if not labelled or any(wanted.items() - labels.items() for labels in labelled):
            problems.append(f"nodeLabels {wanted} are not on every GPU node the lab labels")
        (sts,) = component(run, "training")
        if wanted.items() - pod_spec(sts).get("nodeSelector", {}).items():
            problems.append(f"nodeLabels {wanted} are not what the training pods select")
        topologies = {t["metadata"]["name"]: t["spec"] for t in _custom(run, "Topology")}
        levels = [level["nodeLabel"] for level in topologies.get(spec["topologyName"], {}).get("levels", [])]
        if levels != [HOSTNAME]:
            problems.append(f"the topology's levels are {levels}, not the node ({HOSTNAME})")
    return problems


@pytest.mark.parametrize("stack", STACKS)
def test_a_topology_flavor_finds_the_gpu_nodes_on_every_stack(stack: str) -> None:
    assert flavor_problems(recorded(stack)) == []


def test_a_topology_flavor_finds_the_gpu_nodes_of_a_large_lab() -> None:
    run = scaled_run("4x8-pack")
    assert _custom(run, "Topology") and flavor_problems(run) == []


def test_a_flavor_label_no_node_carries_is_caught() -> None:
    run = copy.deepcopy(scaled_run("4x8-pack"))
    (flavor,) = [r for r in run.custom_objects() if r.kind == "ResourceFlavor"]
    flavor.inputs["spec"]["nodeLabels"] = {"nvidia.com/gpu.product": "A100"}
    assert len(flavor_problems(run)) == 2


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_rank_of_a_run_is_one_queued_workload(shape: str) -> None:
    run = scaled_run(shape)
    queued = [
        w
        for w in run.kubernetes_objects()
        if w.kind in {"StatefulSet", "Job"}
        and w.inputs["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "training"
    ]
    assert len(queued) == 1
    assert "kueue.x-k8s.io/queue-name" in queued[0].inputs["metadata"]["labels"]
