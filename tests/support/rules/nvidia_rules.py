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
