"""Where a control plane lives: its network namespace, files and ports, all named from its name.

Everything it creates is named here, so a later start (or `stop`) finds and removes what a killed
run left behind from the name alone.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from lab.paths import ROOT

STATE_ROOT = Path(os.environ.get("LAB_CONTROLPLANE_STATE", "/run/k8scifar-controlplane"))
NETNS_PREFIX = "k8c-cp-"
NETNS_DIR = Path("/run/netns")

# Every component listens on the namespace's loopback only, so upstream's default ports are free.
HOST = "127.0.0.1"
APISERVER_PORT = 6443
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
CONTROLLER_MANAGER_PORT = 10257
SCHEDULER_PORT = 10259
KWOK_PORT = 10247
SERVICE_RANGE = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service: first address of the range
POD_RANGE = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Layout:
    """The names and paths of control plane `name`."""

    name: str

    def __post_init__(self) -> None:
        if not self.name.isalnum() or len(self.name) > 8:
            raise ValueError(f"control plane name {self.name!r} must be 1 to 8 letters or digits")

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.name}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def state(self) -> Path:
        return STATE_ROOT / self.name

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.state / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig, certificates inline: what the lab's stack and the tests read."""
        return self.state / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{APISERVER_PORT}"


def checkout_name() -> str:
    """This checkout's control plane: checkouts on one machine do not meet, and the next run from
    the same checkout finds what a killed one left."""
    return "c" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:7]
