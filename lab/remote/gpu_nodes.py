"""Nodes whose allocatable GPUs differ from the stack's count: one line each, the same line wherever
it shows (`labctl validate`, `labctl wait`, `labctl status`).

The NVIDIA device plugin registers `nvidia.com/gpu` with the kubelet, which reports it in the
node's `status.allocatable`. A GPU node whose plugin finds no GPU (no driver, a broken toolkit,
or a plugin the toolkit will not show the GPUs to) reports none, and every rank that asks for one
stays Pending: Kueue evicts the run and `pulumi up` fails on readiness, neither of which names the
GPUs. This names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.config import STACKS_DIR, LabConfig, Node
from lab.remote.server_cluster import kubectl_get

FIX = 'see docs/troubleshooting.md, "GPU not detected"'


def allocatable(nodes: Mapping[str, Any]) -> dict[str, int]:
    """Node name -> allocatable GPUs, from `kubectl get nodes -o json`."""
    # Imported here: lab.cluster loads pulumi_kubernetes, which `labctl` loads only where it must.
    from lab.cluster.pods import GPU_RESOURCE

    return {
        n["metadata"]["name"]: int(str((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, "0")))
        for n in nodes.get("items", [])
    }


def gpu_shortfalls(lab: LabConfig, nodes: Mapping[str, Any]) -> list[str]:
    """One line per node of the stack whose allocatable GPUs are not the stack's `gpus`."""
    found = allocatable(nodes)
    lines = []
    for node in lab.nodes:
        have = found.get(node.name)
        if have is None:
            if node.gpus:
                lines.append(f"GPU node {node.name} is not in the cluster; `labctl validate` says why")
        elif line := gpu_shortfall(lab, node, have):
            lines.append(line)
    return lines


def gpu_shortfall(lab: LabConfig, node: Node, have: int) -> str | None:
    """The line for a node of the cluster that reports `have` allocatable GPUs, unless the stack
    gives it as many."""
    from lab.cluster.namespace import gpu_namespace
    from lab.cluster.pods import GPU_RESOURCE

    if have == node.gpus:
        return None
    if have == 0:
        return (
            f"GPU node {node.name} reports no allocatable {GPU_RESOURCE} (the stack gives it"
            f" {node.gpus}): the NVIDIA device plugin there sees no GPU and GPU pods stay Pending;"
            f" its log in namespace {gpu_namespace(lab)} says why ({FIX})"
        )
    return (
        f"node {node.name} reports {have} allocatable {GPU_RESOURCE}, the stack gives it"
        f" {node.gpus}: set `gpus: {have}` for it in the stack file or fix the node ({FIX})"
    )


def gpu_node_lines(cfg: LabConfig, stack: str, stacks_dir: Path = STACKS_DIR) -> list[str]:
    """One line per node whose allocatable GPUs are not the stack's, as the server's kubectl lists
    the nodes; none on CPU labs."""
    return gpu_shortfalls(cfg, kubectl_get(cfg, stack, stacks_dir, "nodes")) if cfg.has_gpus else []
