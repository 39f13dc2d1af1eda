"""GPU nodes are labelled through the API, so the label follows the stack file.

k3s's `node-label` and the kubelet's `--node-labels` apply only when a node registers
(docs.k3s.io/cli/agent, "Node Labels and Taints for Agents"): a node given GPUs later would never
get the label the device plugin and GPU pods select. The program declares one server-side-apply
patch per GPU node instead; a node that loses its GPUs loses its patch, and Pulumi then removes
the label the patch's field manager set.
"""

from __future__ import annotations

import copy

from lab.cluster.pods import GPU_NODE_LABEL
from lab.config import read_stack_values, stack_file
from tests.support.program import (
    ProgramRun,
    kubernetes_object,
    name_of,
    recorded,
    run_program,
    validate_object,
)


def _labelled(run: ProgramRun) -> dict[str, dict[str, str]]:
    return {name_of(p): p.inputs["metadata"].get("labels", {}) for p in run.of_kind("NodePatch")}


def test_each_gpu_node_gets_the_label_through_the_api() -> None:
    run = recorded("example-gpu")
    assert _labelled(run) == {"gpu-a": {GPU_NODE_LABEL: "true"}, "gpu-b": {GPU_NODE_LABEL: "true"}}
    for patch in run.of_kind("NodePatch"):
        validate_object(kubernetes_object(patch), "1.33.5")
    (plugin,) = [d for d in run.of_kind("DaemonSet") if name_of(d) == "nvidia-device-plugin"]
    assert {p.urn for p in run.of_kind("NodePatch")} <= set(plugin.dependencies)


def test_the_label_follows_a_node_s_gpus_in_the_stack_file() -> None:
    values = copy.deepcopy(read_stack_values(stack_file("example-gpu")))
    values["nodes"][1]["gpus"] = 0
    values["trainer"]["replicas"] = 1
    assert _labelled(run_program("example-gpu", values)) == {"gpu-a": {GPU_NODE_LABEL: "true"}}
    assert _labelled(recorded("example-cpu")) == {}
