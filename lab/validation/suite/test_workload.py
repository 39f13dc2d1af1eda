"""Checks of what `pulumi up` declares in the cluster, through kubectl on the server node: the GPUs
as the device plugin serves them (unless the cluster provides it), the claims, the registry and
the training ranks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lab.cluster import gpu, registry, training
from lab.cluster.labels import pod_selector
from lab.config import LabConfig
from lab.remote.gpu_nodes import gpu_shortfalls
from lab.validation.suite import checks
from lab.validation.suite.conftest import Kubectl

# A pinned CUDA base image that carries nvidia-smi through the NVIDIA runtime.
SMOKE_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
SMOKE_TIMEOUT_S = 120


def _needs_gpus(lab: LabConfig) -> None:
    if not lab.has_gpus:
        pytest.skip(checks.NO_GPUS)


def test_gpus_are_allocatable_as_configured(kubectl: Kubectl, lab: LabConfig) -> None:
    _needs_gpus(lab)
    checks.require(gpu_shortfalls(lab, kubectl.get("nodes")))


def test_device_plugin_runs_on_every_gpu_node(kubectl: Kubectl, lab: LabConfig) -> None:
    _needs_gpus(lab)
    if lab.provides.device_plugin:
        pytest.skip(checks.PROVIDED_DEVICE_PLUGIN)
    pods = kubectl.get("pods", "--all-namespaces", "-l", pod_selector(lab.namespace, gpu.APP, gpu.COMPONENT))
    checks.require(checks.pod_problems(pods, len(lab.gpu_nodes), checks.DEVICE_PLUGIN))


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


def test_claims_are_bound(kubectl: Kubectl, lab: LabConfig) -> None:
    checks.require(checks.claim_problems(kubectl.get("pvc", "-n", lab.namespace)))


def test_registry_answers(host: Any, kubectl: Kubectl, lab: LabConfig) -> None:
    selector = pod_selector(lab.namespace, registry.APP, registry.COMPONENT)
    pods = kubectl.get("pods", "-n", lab.namespace, "-l", selector)
    checks.require(checks.pod_problems(pods, 1, "registry"))
    url = f"http://{lab.registry_endpoint}/v2/"
    status = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' {url}").stdout
    assert status == "200", f"{url} answered {status or 'nothing'}"


def test_training_ranks_run_and_formed_their_group(kubectl: Kubectl, lab: LabConfig) -> None:
    selector = pod_selector(lab.namespace, training.APP, training.COMPONENT)
    pods = kubectl.get("pods", "-n", lab.namespace, "-l", selector)
    checks.require(checks.training_pod_problems(pods, lab.world))
    logs = kubectl.run(f"logs -n {lab.namespace} -l {selector} --tail=-1 --max-log-requests={lab.world.pods}")
    checks.require(checks.group_problems(logs.stdout))
