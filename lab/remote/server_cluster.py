"""The lab's server node's cluster, asked over SSH with the node's own kubectl: whether it runs
one yet, and what its kubectl answers."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

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


class ClusterError(RuntimeError):
    """The server's cluster could not be asked: it runs none yet, or its kubectl failed; the
    message is one line that says what to do."""


class KubectlFailed(ClusterError):
    """The server's kubectl ran and failed; `last` is the last line it wrote."""

    def __init__(self, message: str, last: str) -> None:
        super().__init__(message)
        self.last = last


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


def server_kubectl(cfg: LabConfig, stack: str, stacks_dir: Path, *args: str) -> str:
    """`kubectl ARGS` by the server's own kubectl (admin kubeconfig, under sudo): its output."""
    _, kubectl = KUBECTL[cfg.distribution]
    script = f"{cluster_probe(cfg)}; sudo -n {kubectl} {shlex.join(args)}"
    server = Remote.of(stack, cfg.ssh, cfg.server)
    done = server.run(script, timeout=60)
    if done.returncode == NO_CLUSTER:
        raise ClusterError(no_cluster(cfg, stack, stacks_dir))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise KubectlFailed(
            f"kubectl on {cfg.server.name} failed: {last};"
            f" check `labctl validate {stack_flags(stack, stacks_dir)}`",
            last,
        )
    return done.stdout


def kubectl_get(cfg: LabConfig, stack: str, stacks_dir: Path, *what: str) -> dict[str, Any]:
    """`kubectl get WHAT -o json` by the server's own kubectl."""
    return json.loads(server_kubectl(cfg, stack, stacks_dir, "get", *what, "-o", "json"))
