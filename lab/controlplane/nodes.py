"""kwok nodes made from a stack's machines: the names, labels, taints and GPU capacity the lab's
program schedules onto, as k3s would register them."""

from __future__ import annotations

import json
from typing import Any

from lab.cluster.pods import GPU_RESOURCE
from lab.config.machines import Node, Role
from lab.controlplane.client import kubectl
from lab.controlplane.layout import Layout

# kwok manages the nodes that carry this annotation (its --manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# The taint GPU nodes commonly carry, which the lab's GPU pods tolerate (pods.GPU_TOLERATION).
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
# k3s labels its server so (pkg/daemons/agent: node-role labels of a server node).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}


def manifest(node: Node) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    if node.role is Role.SERVER:
        labels[CONTROL_PLANE_LABEL] = "true"
    capacity = dict(CAPACITY)
    if node.gpus:
        capacity[GPU_RESOURCE] = str(node.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
        "spec": {"taints": [GPU_TAINT] if node.gpus else []},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def create(layout: Layout, nodes: list[Node], timeout: float = 60) -> None:
    """Create the nodes and wait until kwok reports them Ready.

    `create`, not a client-side apply: an apply would record the labels under the same field
    manager the lab's server-side Node patch later uses, and that patch would then drop them.
    """
    items = {"apiVersion": "v1", "kind": "List", "items": [manifest(n) for n in nodes]}
    kubectl(layout, "create", "-f", "-", stdin=json.dumps(items))
    kubectl(
        layout,
        "wait",
        "--for=condition=Ready",
        "node",
        *(n.name for n in nodes),
        f"--timeout={timeout:.0f}s",
        timeout=timeout + 10,
    )


def delete(layout: Layout, nodes: list[Node], timeout: float = 60) -> None:
    """Delete the nodes `create` made, once nothing runs there any more."""
    kubectl(
        layout, "delete", "node", *(n.name for n in nodes), f"--timeout={timeout:.0f}s", timeout=timeout + 10
    )
