"""Which GPUs a container gets on a node of the lab, restated from the code that decides it.

1. containerd's CRI turns a container's `securityContext.capabilities` into the OCI spec's
   capability sets (containerd v2.1.4 internal/cri/opts/spec_opts.go WithCapabilities, the same in
   v1.7.24 pkg/cri/opts/spec_opts.go): start from the runtime's default set
   (pkg/oci/spec.go defaultUnixCaps), or every capability when privileged; `add: [ALL]` sets all,
   `drop: [ALL]` empties the set, then each other added name joins the bounding, effective and
   permitted sets (pkg/oci/spec_opts.go WithAddedCapabilities) and each other dropped name leaves.
2. The NVIDIA container toolkit's hook decides the devices (nvidia-container-toolkit v1.17.8,
   cmd/nvidia-container-runtime-hook/container_config.go getDevices): with
   `accept-nvidia-visible-devices-as-volume-mounts`, device names mounted from /dev/null under
   /var/run/nvidia-container-devices/ win (internal/config/image/cuda_image.go
   VisibleDevicesFromMounts); otherwise NVIDIA_VISIBLE_DEVICES counts only when the container is
   privileged, which means CAP_SYS_ADMIN in its bounding set (internal/config/image/privileged.go
   IsPrivileged), or when `accept-nvidia-visible-devices-envvar-when-unprivileged` is true. Both
   keys default as internal/config/config.go GetDefault sets them: volume mounts off, the
   variable accepted.
3. NVIDIA's device plugin (v0.17.1) finds the GPUs through NVML in its own container, whose image
   sets NVIDIA_VISIBLE_DEVICES=all (deployments/container/Dockerfile); with the volume-mounts
   strategy it hands a GPU to a container as a mount of /dev/null at
   /var/run/nvidia-container-devices/<id> (internal/plugin/server.go).
4. The hook runs only in containers started by the `nvidia` runtime handler, which the toolkit
   registers with containerd; a pod reaches it through a RuntimeClass of that handler. Neither
   distribution makes it the default: k3s writes `default_runtime_name` only from its
   `default-runtime` option (k3s `pkg/agent/templates`), which the lab's `config.yaml` does not
   set, and the kubeadm role runs `nvidia-ctk runtime configure` without `--set-as-default`.
   Without it a container gets no device and none of the driver's libraries, whatever its
   environment says.
5. dcgm-exporter (NVIDIA/dcgm-exporter at 4.5.3-4.8.2, the chart the lab pins): its image sets
   NVIDIA_VISIBLE_DEVICES=all (docker/Dockerfile); the chart's container adds SYS_ADMIN and drops
   ALL by default (deployment/values.yaml `securityContext`) and names a RuntimeClass only from
   the value `runtimeClassName` (templates/daemonset.yaml: `{{- if .Values.runtimeClassName }}`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

# containerd pkg/oci/spec.go defaultUnixCaps (v1.7.24 and v2.1.4 alike).
DEFAULT_CAPS = frozenset(
    f"CAP_{c}"
    for c in (
        "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP",
        "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
    )
)  # fmt: skip
ALL_CAPS = DEFAULT_CAPS | {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_MODULE"}
SYS_ADMIN = "CAP_SYS_ADMIN"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MOUNT_ROOT = "/var/run/nvidia-container-devices"
# k8s-device-plugin v0.17.1 deployments/container/Dockerfile: `ENV NVIDIA_VISIBLE_DEVICES=all`.
PLUGIN_IMAGE_ENV = {VISIBLE_DEVICES: "all"}
VOLUME_MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
ENVVAR_UNPRIVILEGED_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
TOOLKIT_DEFAULTS = {VOLUME_MOUNTS_KEY: False, ENVVAR_UNPRIVILEGED_KEY: True}
# The runtime handler the toolkit registers, and the only one whose containers the hook sees.
NVIDIA_HANDLER = "nvidia"
# NVIDIA/dcgm-exporter 4.5.3-4.8.2 docker/Dockerfile and deployment/values.yaml `securityContext`.
DCGM_EXPORTER_IMAGE_ENV = {VISIBLE_DEVICES: "all"}
DCGM_EXPORTER_CHART_SECURITY = {
    "runAsNonRoot": False,
    "runAsUser": 0,
    "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]},
    "allowPrivilegeEscalation": False,
}


def bounding_set(container: Mapping[str, Any]) -> frozenset[str]:
    """The OCI bounding set containerd gives `container` (a pod spec's container)."""
    context = container.get("securityContext", {})
    caps = set(ALL_CAPS if context.get("privileged") else DEFAULT_CAPS)
    wanted = context.get("capabilities", {})
    add, drop = [c.upper() for c in wanted.get("add", [])], [c.upper() for c in wanted.get("drop", [])]
    if "ALL" in add:
        caps = set(ALL_CAPS)
    if "ALL" in drop:
        caps = set()
    caps |= {f"CAP_{c}" for c in add if c != "ALL"}
    caps -= {f"CAP_{c}" for c in drop if c != "ALL"}
    return frozenset(caps)


def toolkit_settings(config_toml: str) -> dict[str, bool]:
    """The two top-level keys of the toolkit's config.toml, with the toolkit's defaults."""
    config = tomllib.loads(config_toml)
    return {key: bool(config.get(key, default)) for key, default in TOOLKIT_DEFAULTS.items()}


def devices(
    settings: Mapping[str, bool],
    env: Mapping[str, str],
    mounts: list[tuple[str, str]],
    bounding: frozenset[str],
) -> list[str]:
    """The devices the hook injects: `env` is the container's environment (image and pod), `mounts`
    its (source, destination) mounts."""
    if settings[VOLUME_MOUNTS_KEY]:
        from_mounts = [
            destination.removeprefix(MOUNT_ROOT).strip("/")
            for source, destination in mounts
            if source == "/dev/null" and destination.startswith(MOUNT_ROOT + "/")
        ]
        if from_mounts:
            return from_mounts
    # internal/config/image/cuda_image.go DevicesFromEnvvars: unset, empty or "void" requests none.
    requested = [d.strip() for d in env.get(VISIBLE_DEVICES, "").split(",") if d.strip()]
    if "void" in requested:
        requested = []
    if SYS_ADMIN in bounding or settings[ENVVAR_UNPRIVILEGED_KEY]:
        return requested
    return []


def allocated_mounts(gpus: int) -> list[tuple[str, str]]:
    """What the device plugin's Allocate adds for `gpus` GPUs with the volume-mounts strategy."""
    return [("/dev/null", f"{MOUNT_ROOT}/GPU-{i}") for i in range(gpus)]


def runtime_devices(
    handler: str | None,
    settings: Mapping[str, bool],
    env: Mapping[str, str],
    mounts: list[tuple[str, str]],
    bounding: frozenset[str],
) -> list[str]:
    """The devices a container started by runtime handler `handler` (None: the node's default,
    runc) gets: the hook's choice under the nvidia handler, nothing under any other."""
    if handler != NVIDIA_HANDLER:
        return []
    return devices(settings, env, mounts, bounding)
