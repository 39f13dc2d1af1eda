"""`labctl doctor` on a stack that names a cluster's kubeconfig: the cluster checked through its
API (lab.cli.common.stackcluster), in place of the nodes over SSH, which are the cluster owner's.

Each check reads what the API server answered (the JSON `kubectl get -o json` prints), so that
the tests hold every finding against the answers that make it.
"""

from __future__ import annotations

from typing import Any

from lab.cli.common import stackcluster
from lab.cli.common.console import Finding, Level
from lab.config import GangScheduler, LabConfig
from lab.remote.gpu_nodes import allocatable, gpu_shortfall
from trainer.inputs import is_digits

WHERE = "cluster"
_API_FIX = "fix the cluster or k8scifar:kubeconfig, then run doctor again; the other checks need it"


def hosts_skipped(cfg: LabConfig) -> Finding:
    """The one line that says why no node is logged in to."""
    return Finding(
        "nodes",
        "hosts",
        Level.OK,
        f"not checked over SSH: the stack names the cluster's kubeconfig ({cfg.kubeconfig}), so its"
        " machines are its owner's and the lab touches no host; the cluster is checked through its API",
    )


def cluster_findings(cfg: LabConfig) -> list[Finding]:
    """The API server answers; then the stack's nodes, their GPUs, and Kueue as the stack says."""
    from lab.cluster.gang import API_VERSION  # here: lab.cluster loads pulumi_kubernetes

    with stackcluster.client(cfg) as api:
        try:
            version = stackcluster.get(api, "/version") or {}
            nodes = stackcluster.items(api, "/api/v1/nodes")
            kueue = stackcluster.get(api, f"/apis/{API_VERSION}") if _uses_kueue(cfg) else None
            kueue_group = stackcluster.get(api, f"/apis/{_group(API_VERSION)}") if _uses_kueue(cfg) else None
        except stackcluster.ClusterUnreachable as err:
            return [Finding(WHERE, "API server", Level.ERROR, str(err), _API_FIX)]
        where = stackcluster.server(api)
    return [
        version_finding(cfg, where, version),
        *node_findings(cfg, nodes),
        *kueue_findings(cfg, kueue_group is not None, kueue is not None),
    ]


def _group(api_version: str) -> str:
    return api_version.split("/")[0]


def _uses_kueue(cfg: LabConfig) -> bool:
    return cfg.gang_scheduler is GangScheduler.KUEUE


def version_finding(cfg: LabConfig, where: str, version: dict[str, Any]) -> Finding:
    """The cluster's Kubernetes minor against the stack's `kubernetesVersion`, which decides the
    fields and APIs the program declares."""
    said = str(version.get("gitVersion", "?"))
    minor = str(version.get("minor", "")).rstrip("+")  # "34+" on some distributions
    detail = f"{where} answers: Kubernetes {said}"
    release = said.removeprefix("v").split("+")[0]
    if is_digits(minor) and int(minor) == cfg.kubernetes_minor:
        return Finding(WHERE, "API server", Level.OK, detail)
    return Finding(
        WHERE,
        "API server",
        Level.WARNING,
        f"{detail}, the stack says {cfg.kubernetes_version}: the program declares objects for the latter",
        f'set k8scifar:kubernetesVersion to the cluster\'s release ("{release}")',
    )


def node_findings(cfg: LabConfig, nodes: dict[str, Any]) -> list[Finding]:
    """Each node of the stack is a node of the cluster, with the GPUs the stack gives it."""
    found = allocatable(nodes)
    findings = []
    for node in cfg.nodes:
        have = found.get(node.name)
        if have is None:
            findings.append(
                Finding(
                    node.name,
                    "node",
                    Level.ERROR,
                    f"not a node of the cluster ({_has(sorted(found))})",
                    f"name the stack's nodes as the cluster does (`kubectl get nodes`), or remove"
                    f" {node.name}",
                )
            )
            continue
        shortfall = gpu_shortfall(cfg, node, have)
        if shortfall:
            findings.append(Finding(node.name, "GPUs", Level.ERROR, shortfall))
            continue
        findings.append(Finding(node.name, "node", Level.OK, f"in the cluster, {have} allocatable GPU(s)"))
    return findings


def _has(names: list[str]) -> str:
    return f"it has {', '.join(names)}" if names else "it has no node"


def kueue_findings(cfg: LabConfig, group_served: bool, version_served: bool) -> list[Finding]:
    """With Kueue as the gang scheduler: the Kueue the stack says is there, or none the lab's own
    would be installed over."""
    from lab.cluster.gang import API_VERSION

    if not _uses_kueue(cfg):
        return []
    if cfg.provides.kueue:
        if version_served:
            return [Finding(WHERE, "Kueue", Level.OK, f"serves {API_VERSION}, as provides.kueue says")]
        return [
            Finding(
                WHERE,
                "Kueue",
                Level.ERROR,
                f"provides.kueue says Kueue is there, and the cluster serves no {API_VERSION}"
                + (" (an older Kueue)" if group_served else ""),
                f"install a Kueue that serves {API_VERSION} as docs/scaling.md says, or remove"
                " provides.kueue so that the lab installs its own",
            )
        ]
    if group_served:
        return [
            Finding(
                WHERE,
                "Kueue",
                Level.ERROR,
                f"the cluster already runs Kueue ({_group(API_VERSION)}), and the lab would install its own"
                " over it",
                "set k8scifar:provides.kueue: true to use the cluster's",
            )
        ]
    return [Finding(WHERE, "Kueue", Level.OK, "none in the cluster: `pulumi up` installs it")]
