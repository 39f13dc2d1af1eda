"""`labctl init --kubeconfig`: a stack for a cluster that is already there, its nodes, release and
Kueue read through the cluster's API (lab.cli.common.stackcluster), no machine logged in to."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from lab.cli.common import stackcluster
from lab.cli.common.console import CliError
from lab.config import KNOWN_PATCHES, Role
from lab.config.facts import USER_NAME
from lab.remote.gpu_nodes import allocatable

# The label kubeadm (and k3s, on its servers) gives the control plane's nodes
# (kubernetes cmd/kubeadm/app/constants, LabelNodeRoleControlPlane).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
INTERNAL_IP = "InternalIP"
# A user name the stack needs for every node (lab.config.machines.Node) and never uses on a
# cluster's machines: no host is logged in to.
FALLBACK_USER = "ubuntu"


def cluster_values(args: argparse.Namespace) -> dict[str, Any]:
    """The stack's values for the cluster `--kubeconfig` names, as its API server answers."""
    from lab.cluster.gang import API_VERSION

    path = Path(args.kubeconfig).expanduser()
    if not path.is_file():
        raise CliError(f"--kubeconfig {args.kubeconfig}: no such file")
    allow = args.allow_kubeconfig_commands
    with stackcluster.client_for(path, args.kubeconfig_context, allow, "--kubeconfig") as api:
        version = stackcluster.get(api, "/version") or {}
        nodes = stackcluster.items(api, "/api/v1/nodes").get("items", [])
        kueue = stackcluster.get(api, f"/apis/{API_VERSION}") is not None
    if not nodes:
        raise CliError(f"the cluster {args.kubeconfig} names has no node; add its nodes first")
    server = next((n for n in nodes if CONTROL_PLANE_LABEL in (n["metadata"].get("labels") or {})), nodes[0])
    gpus = allocatable({"items": nodes})
    user = os.environ.get("USER", "")
    user = user if re.fullmatch(USER_NAME, user) else FALLBACK_USER
    values: dict[str, Any] = {
        "kubeconfig": str(args.kubeconfig),
        **({"kubeconfigContext": args.kubeconfig_context} if args.kubeconfig_context else {}),
        **({"allowKubeconfigCommands": True} if args.allow_kubeconfig_commands else {}),
        **_release(str(version.get("gitVersion", ""))),
        "nodes": [
            {
                "name": node["metadata"]["name"],
                "address": _address(node),
                "user": user,
                "role": (Role.SERVER if node is server else Role.AGENT).value,
                "gpus": gpus[node["metadata"]["name"]],
            }
            for node in nodes
        ],
    }
    if kueue:
        values["provides"] = {"kueue": True}
    return values


def _release(git_version: str) -> dict[str, str]:
    """`kubernetesVersion` as the cluster runs it, where the lab knows that release; otherwise
    nothing, and `labctl doctor` says how the two differ."""
    found = re.match(r"v?1\.([0-9]+)\.([0-9]+)", git_version)
    if found and KNOWN_PATCHES.get(int(found[1]), -1) >= int(found[2]):
        return {"kubernetesVersion": f"1.{found[1]}.{found[2]}"}
    return {}


def _address(node: dict[str, Any]) -> str:
    """The node's InternalIP, which names the registry's endpoint on the server."""
    addresses = (node.get("status") or {}).get("addresses") or []
    found = next((a["address"] for a in addresses if a.get("type") == INTERNAL_IP), None)
    if found is None:
        raise CliError(
            f"node {node['metadata']['name']} reports no InternalIP address; the stack needs one per node"
        )
    return str(found)
