"""Seam: the device plugin and the GPU workloads as the program declares them, against the container
toolkit's settings as the nvidia role writes them on a GPU node.

The role sets `accept-nvidia-visible-devices-envvar-when-unprivileged = false` so that a pod
cannot take every GPU by setting NVIDIA_VISIBLE_DEVICES=all. The same rule applies to the device
plugin, which finds the GPUs through that variable: unless the toolkit counts it as privileged,
it sees no GPU, reports none, and every GPU pod stays Pending. tests/support/rules/nvidia_rules.py
restates containerd's capability rule and the toolkit hook's device rule, with their sources.

Both sides as this repository produces them: the node's config.toml after the nvidia role's own
tasks ran on a copy of the package's file (tests/support/host_files.py), and the
containers the program declares under the engine's mocks.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.cluster.pods import GPU_RESOURCE
from lab.cluster.security import PSA_LABEL, RESTRICTED
from lab.cluster.versions import DCGM_EXPORTER_CHART
from lab.config import load_stack
from tests.support.host_files import HostFiles
from tests.support.program import ProgramRun, containers, env_of, name_of, recorded
from tests.support.program_objects import gpu_workloads
from tests.support.rules.nvidia_rules import (
    DCGM_EXPORTER_CHART_SECURITY,
    DCGM_EXPORTER_IMAGE_ENV,
    PLUGIN_IMAGE_ENV,
    VISIBLE_DEVICES,
    allocated_mounts,
    bounding_set,
    devices,
    runtime_devices,
    toolkit_settings,
)
from tests.support.shipped import shipped_stacks

GPU_STACKS = [s for s in shipped_stacks() if load_stack(s).has_gpus]
# The most a container may hold in a namespace that enforces `restricted` (Pod Security
# Standards, "Capabilities (v1.22+)": drop ALL, add at most NET_BIND_SERVICE).
RESTRICTED_MOST = {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}


@pytest.fixture(scope="module")
def settings(host_files: dict[str, HostFiles]) -> dict[str, dict[str, bool]]:
    """Per GPU stack, the toolkit settings of its first GPU node as the nvidia role leaves them."""
    return {
        stack: toolkit_settings(files.file(files.lab.gpu_nodes[0].name, "config.toml"))
        for stack, files in host_files.items()
        if stack in GPU_STACKS
    }


def _plugin(run: ProgramRun) -> dict[str, Any]:
    (plugin,) = [d for d in run.of_kind("DaemonSet") if name_of(d) == "nvidia-device-plugin"]
    (container,) = containers(plugin)
    return container


def _literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in env_of(container).items() if isinstance(v, str)}


def plugin_devices(settings: dict[str, bool], container: dict[str, Any]) -> list[str]:
    """What the toolkit gives the plugin's container: its image's environment and the pod's."""
    env = PLUGIN_IMAGE_ENV | _literal_env(container)
    return devices(settings, env, [], bounding_set(container))


def test_gpu_stacks_ship() -> None:
    assert GPU_STACKS, "no shipped stack has GPUs: the toolkit seam would go unchecked"


@pytest.mark.parametrize("stack", GPU_STACKS)
def test_the_device_plugin_sees_every_gpu_under_the_roles_settings(
    stack: str, settings: dict[str, dict[str, bool]]
) -> None:
    assert (
        settings[stack][  # the role's setting is what makes this seam matter
            "accept-nvidia-visible-devices-envvar-when-unprivileged"
        ]
        is False
    )
    assert plugin_devices(settings[stack], _plugin(recorded(stack))) == ["all"]


@pytest.mark.parametrize("stack", GPU_STACKS)
def test_gpu_workloads_get_exactly_their_allocation_and_never_the_variable(
    stack: str, settings: dict[str, dict[str, bool]]
) -> None:
    run, lab = recorded(stack), load_stack(stack)
    workloads = gpu_workloads(run)
    assert workloads, f"{stack}: no workload asks for a GPU"
    for workload in workloads:
        for container in containers(workload):
            gpus = int(container.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0))
            bounding = bounding_set(container)
            env = _literal_env(container)
            assert devices(settings[stack], env, allocated_mounts(gpus), bounding) == [
                f"GPU-{i}" for i in range(gpus)
            ], f"{name_of(workload)}/{container['name']}"
            # The same container, or any pod its namespace admits, setting the variable itself.
            grab = env | {VISIBLE_DEVICES: "all"}
            assert devices(settings[stack], grab, [], bounding) == []
            most = bounding_set({"securityContext": RESTRICTED_MOST})
            if not lab.trainer.host_network:
                assert devices(settings[stack], grab, [], most) == []


@pytest.mark.parametrize("stack", [s for s in GPU_STACKS if not load_stack(s).trainer.host_network])
def test_gpu_workloads_run_where_no_pod_may_add_sys_admin(stack: str) -> None:
    run = recorded(stack)
    enforce = f"{PSA_LABEL}/enforce"
    levels = {name_of(n): n.inputs["metadata"]["labels"].get(enforce) for n in run.of_kind("Namespace")}
    for workload in gpu_workloads(run):
        assert levels[workload.inputs["metadata"]["namespace"]] == RESTRICTED, name_of(workload)


def test_a_plugin_with_every_capability_dropped_sees_no_gpu(settings: dict[str, dict[str, bool]]) -> None:
    """The defect this seam had: the plugin dropped ALL, so the toolkit ignored its variable."""
    container = {**_plugin(recorded("example-gpu"))}
    container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert plugin_devices(settings["example-gpu"], container) == []


def dcgm_exporter_devices(settings: dict[str, bool], run: ProgramRun) -> list[str]:
    """What the toolkit gives dcgm-exporter's container: the pod's RuntimeClass from the chart's
    value, that class's handler as the program declares it, the image's environment, the chart's
    container security context with the lab's values over it (Helm merges maps)."""
    (release,) = [r for r in run.helm_releases() if r.inputs["chart"] == DCGM_EXPORTER_CHART]
    values = release.inputs["values"]
    handlers = {name_of(c): c.inputs["handler"] for c in run.of_kind("RuntimeClass")}
    handler = handlers.get(values["runtimeClassName"]) if values.get("runtimeClassName") else None
    security = {**DCGM_EXPORTER_CHART_SECURITY, **values.get("securityContext", {})}
    bounding = bounding_set({"securityContext": security})
    return runtime_devices(handler, settings, DCGM_EXPORTER_IMAGE_ENV, [], bounding)


@pytest.mark.parametrize("stack", GPU_STACKS)
def test_dcgm_exporter_sees_every_gpu_under_the_roles_settings(
    stack: str, settings: dict[str, dict[str, bool]]
) -> None:
    """The exporter asks the driver for every GPU (NVML through DCGM); without the nvidia runtime it
    finds neither GPUs nor the driver's libraries and exits (NVIDIA/dcgm-exporter
    internal/pkg/dcgmprovider/dcgm.go)."""
    assert dcgm_exporter_devices(settings[stack], recorded(stack)) == ["all"]


def test_an_exporter_under_the_default_runtime_sees_no_gpu(settings: dict[str, dict[str, bool]]) -> None:
    """The defect this seam had: no runtimeClassName, so runc started the exporter without the hook."""
    run = copy.deepcopy(recorded("example-gpu"))
    (release,) = [r for r in run.helm_releases() if r.inputs["chart"] == DCGM_EXPORTER_CHART]
    release.inputs["values"].pop("runtimeClassName", None)
    assert dcgm_exporter_devices(settings["example-gpu"], run) == []


def test_the_capability_rule_follows_containerd() -> None:
    assert "CAP_SYS_ADMIN" not in bounding_set({})  # containerd's default set
    assert bounding_set({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}) == {
        "CAP_SYS_ADMIN"
    }
    assert "CAP_SYS_ADMIN" in bounding_set({"securityContext": {"privileged": True}})
