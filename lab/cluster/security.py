"""Pod hardening in one place: Pod Security levels, security contexts, API tokens and resource sizes.

Every pod the lab declares goes through `harden`: no service-account token unless the pod uses
the API, requests and limits on every container. The levels and rules are the Pod Security
Standards' (kubernetes.io/docs/concepts/security/pod-security-standards/): the lab's namespace
enforces `restricted`; the device plugin (a hostPath to the kubelet's socket directory) and the
image build (rootless BuildKit needs the seccomp and AppArmor profiles `Unconfined`) cannot meet
`baseline` either, so each lives in a namespace of its own at `privileged`, with nothing else in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lab.config import LabConfig

RESTRICTED = "restricted"
BASELINE = "baseline"
PRIVILEGED = "privileged"

# Pod Security admission's namespace labels (kubernetes.io/docs/concepts/security/pod-security-admission/).
PSA_LABEL = "pod-security.kubernetes.io"


def namespace_level(lab: LabConfig) -> str:
    """The lab namespace's level: `restricted`, unless ranks run on the host network, which no
    level below `privileged` admits (the Standards' "Host Namespaces" control)."""
    return PRIVILEGED if lab.trainer.host_network else RESTRICTED


def pod_security_labels(level: str, minor: int) -> dict[str, str]:
    """Enforce `level` as the cluster's own minor version defines it; warn and audit at `restricted`,
    so that anything short of it shows up in `kubectl` warnings and the audit log."""
    version = f"v1.{minor}"
    return {
        f"{PSA_LABEL}/enforce": level,
        f"{PSA_LABEL}/enforce-version": version,
        f"{PSA_LABEL}/warn": RESTRICTED,
        f"{PSA_LABEL}/warn-version": version,
        f"{PSA_LABEL}/audit": RESTRICTED,
        f"{PSA_LABEL}/audit-version": version,
    }


def pod_security(uid: int) -> dict[str, Any]:
    """Pod-level security of `restricted`: never root, the runtime's default seccomp filter."""
    return {
        "runAsUser": uid,
        "runAsGroup": uid,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """Container-level security of `restricted`: no privilege escalation, every capability dropped."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@dataclass(frozen=True)
class Size:
    """Requests (what the scheduler reserves) and limits (where the kernel stops a container)."""

    cpu: str
    memory: str
    cpu_limit: str
    memory_limit: str

    def times(self, count: int) -> Size:
        """The size of `count` such containers' work in one container (whole quantities scale)."""

        def scaled(quantity: str) -> str:
            number = re.fullmatch(r"([0-9]+)([^0-9]*)", quantity)
            assert number, f"{quantity!r} is not a whole quantity"
            return f"{int(number.group(1)) * count}{number.group(2)}"

        return Size(*(scaled(q) for q in (self.cpu, self.memory, self.cpu_limit, self.memory_limit)))

    def resources(self, **extra_limits: Any) -> dict[str, Any]:
        return {
            "requests": {"cpu": self.cpu, "memory": self.memory},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit, **extra_limits},
        }


# The bootstrap reports each node's address, role and GPUs, not its memory or cores, and the
# objects are planned before it runs: the sizes are these defaults, documented in
# docs/security.md, for machines like the ones the lab is measured on (2 cores, 24 GiB) and
# larger GPU boxes. A rank's memory limit (its memory-backed /dev/shm, up to 2 GiB, counts
# against it) leaves the rest of such a node to the k3s server and the system beside it.
SIZES = {
    "trainer": Size(cpu="500m", memory="2Gi", cpu_limit="4", memory_limit="12Gi"),
    "dataset": Size(cpu="100m", memory="256Mi", cpu_limit="1", memory_limit="2Gi"),
    "registry": Size(cpu="50m", memory="64Mi", cpu_limit="500m", memory_limit="512Mi"),
    "build": Size(cpu="500m", memory="1Gi", cpu_limit="2", memory_limit="8Gi"),
    "step": Size(cpu="50m", memory="64Mi", cpu_limit="500m", memory_limit="256Mi"),
    "device-plugin": Size(cpu="50m", memory="64Mi", cpu_limit="200m", memory_limit="256Mi"),
}


def harden(spec: dict[str, Any], api_access: bool = False) -> dict[str, Any]:
    """`spec` with no service-account token mounted, unless the pod talks to the API.

    A pod that needs the API (a ServiceAccount with a narrow Role, e.g. ranks that scale their
    own StatefulSet) passes `api_access=True` and names its `serviceAccountName` in `spec`.
    """
    return {**spec, "automountServiceAccountToken": api_access}
