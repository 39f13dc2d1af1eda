"""Checks of the cluster the lab runs in, through kubectl on the server node: its nodes, its own
pods, the GPUs and the device plugin. The lab's workload in it is test_workload.py's."""

from __future__ import annotations

import json

import pytest

from lab.cluster import gpu
from lab.cluster.labels import pod_selector
from lab.config import LabConfig
from lab.config.facts import SYSTEM_NAMESPACE
from lab.remote.gpu_nodes import gpu_shortfalls
from lab.validation.suite import checks
from lab.validation.suite.conftest import Kubectl

# A pinned CUDA base image that carries nvidia-smi through the NVIDIA runtime.
SMOKE_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
SMOKE_TIMEOUT_S = 120


def _needs_gpus(lab: LabConfig) -> None:
    if not lab.has_gpus:
        pytest.skip("no node of this lab has a GPU configured")


def test_configured_nodes_are_ready(kubectl: Kubectl, lab: LabConfig) -> None:
    checks.require(checks.node_problems(kubectl.get("nodes"), [n.name for n in lab.nodes]))


def test_system_pods_run(kubectl: Kubectl) -> None:
    checks.require(checks.system_pod_problems(kubectl.get("pods", "-n", SYSTEM_NAMESPACE)))


def test_gpus_are_allocatable_as_configured(kubectl: Kubectl, lab: LabConfig) -> None:
    _needs_gpus(lab)
    checks.require(gpu_shortfalls(lab, kubectl.get("nodes")))


def test_device_plugin_runs_on_every_gpu_node(kubectl: Kubectl, lab: LabConfig) -> None:
    _needs_gpus(lab)
    pods = kubectl.get("pods", "--all-namespaces", "-l", pod_selector(lab.namespace, gpu.APP, gpu.COMPONENT))
    checks.require(checks.pod_problems(pods, len(lab.gpu_nodes), "NVIDIA device plugin"))


def test_gpu_smoke_pod_runs_nvidia_smi(kubectl: Kubectl, lab: LabConfig) -> None:
    _needs_gpus(lab)
    container = {
        "name": "smoke",
        "image": SMOKE_IMAGE,
        "command": ["nvidia-smi", "-L"],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    overrides = json.dumps({"spec": {"runtimeClassName": "nvidia", "containers": [container]}})
    result = kubectl.run(
        f"run k8scifar-gpu-smoke -n {lab.namespace} --rm -i --restart=Never --quiet --image={SMOKE_IMAGE}"
        f" --pod-running-timeout={SMOKE_TIMEOUT_S}s --overrides='{overrides}'"
    )
    assert result.rc == 0 and "GPU 0" in result.stdout, f"GPU smoke pod failed: {result.stderr.strip()}"
