"""Whether the lab's server node runs a cluster yet, asked over SSH with the node's own kubectl."""

from __future__ import annotations

import shlex
from pathlib import Path

from lab.config import STACKS_DIR, Distribution, LabConfig, stack_flags
from lab.remote.ssh import Remote

# Exit code of the remote script when the node has no cluster to ask.
NO_CLUSTER = 3
KUBECTL = {
    Distribution.K3S: ("test -f /etc/rancher/k3s/k3s.yaml && command -v k3s", "k3s kubectl"),
    Distribution.KUBEADM: (
        "test -f /etc/kubernetes/admin.conf",
        "kubectl --kubeconfig /etc/kubernetes/admin.conf",
    ),
}


def no_cluster(cfg: LabConfig, stack: str, stacks_dir: Path = STACKS_DIR) -> str:
    """The one line for a lab whose server runs no Kubernetes yet. `pulumi up` reads stack files
    from stacks/ only (Pulumi.yaml's stackConfigDir): elsewhere, `labctl hosts up` is the way."""
    hosts_up = f"`labctl hosts up {stack_flags(stack, stacks_dir)}`"
    how = (
        f"`pulumi up --stack {stack}` (or {hosts_up})"
        if Path(stacks_dir).resolve() == STACKS_DIR
        else hosts_up
    )
    return f"no cluster on {cfg.server.name} ({cfg.server.address}) yet; bring it up with {how}"


def cluster_probe(cfg: LabConfig) -> str:
    """A shell line that exits NO_CLUSTER when the server has no cluster to ask."""
    probe, _ = KUBECTL[cfg.distribution]
    return f"if ! sudo -n sh -c {shlex.quote(probe + ' >/dev/null')}; then exit {NO_CLUSTER}; fi"


def has_cluster(cfg: LabConfig, stack: str) -> bool:
    """Whether the server node holds a cluster's admin credentials (SshError when unreachable)."""
    done = Remote.of(stack, cfg.ssh, cfg.server).run(f"{cluster_probe(cfg)}; true", timeout=60)
    return done.returncode != NO_CLUSTER
