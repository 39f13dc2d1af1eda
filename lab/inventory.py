"""The Ansible inventory of a lab, generated from its stack configuration (never written by hand).

Groups: `server` (the control plane), `agent` (the other nodes), `gpu` (nodes with gpus > 0) and
`nfs_server` (the node that exports the share). Host variables come from each node; the group
variables of `all` carry the rest of the configuration under `lab_*` names, which the roles read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lab import apparmor, nvidia
from lab.config import (
    CLUSTER_NETWORKS,
    EPHEMERAL_PORTS,
    KUBELET_PORT,
    NFS_PORT_NUMBER,
    VXLAN_PORT,
    Distribution,
    HostKeyPolicy,
    LabConfig,
    Node,
)
from lab.kubeconfig import API_PORT

ROOT = Path(__file__).resolve().parent.parent
# The orchestrator's state: the checkout's .lab/, or the folder K8SCIFAR_STATE_DIR names (the
# tests point it at a temporary folder, so that they leave nothing in the checkout).
STATE_DIR = Path(os.environ.get("K8SCIFAR_STATE_DIR") or ROOT / ".lab")
# Where the lab keeps, on each node, its record of what it added (packages, paths, install marks):
# reset.yml removes exactly that. `labctl doctor` reads the same marks.
NODE_STATE_DIR = "/var/lib/k8scifar"


def stack_state_dir(stack: str, base: Path = STATE_DIR) -> Path:
    """Where the orchestrator keeps a stack's known_hosts and ansible-runner workdir (mode 0700)."""
    path = base / stack
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def known_hosts_file(stack: str, base: Path = STATE_DIR) -> Path:
    """The stack's own known_hosts (0600), so host keys are pinned per lab, not per user."""
    path = stack_state_dir(stack, base) / "known_hosts"
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    return path


def ssh_common_args(policy: HostKeyPolicy, known_hosts: Path | str) -> str:
    """ssh options implementing the stack's host-key policy."""
    if policy is HostKeyPolicy.OFF:
        return "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    checking = "accept-new" if policy is HostKeyPolicy.ACCEPT_NEW else "yes"
    return f"-o StrictHostKeyChecking={checking} -o UserKnownHostsFile={known_hosts}"


def cluster_network_vars(distribution: Distribution) -> dict[str, Any]:
    """The cluster's ports and its pod and service networks, which the roles read from here only."""
    pod_network, service_network = CLUSTER_NETWORKS[distribution]
    return {
        "lab_api_port": API_PORT,
        "lab_kubelet_port": KUBELET_PORT,
        "lab_vxlan_port": VXLAN_PORT,
        "lab_nfs_port": NFS_PORT_NUMBER,
        "lab_ephemeral_ports": list(EPHEMERAL_PORTS),
        "lab_pod_network": pod_network,
        "lab_service_network": service_network,
    }


def lab_vars(lab: LabConfig) -> dict[str, Any]:
    """Group variables of `all`: everything the roles need to know about the lab as a whole."""
    airgap = None
    if lab.airgap is not None:
        airgap = {"k3s_binary": lab.airgap.k3s_binary, "images_tarball": lab.airgap.images_tarball}
    return {
        "lab_distribution": lab.distribution.value,
        "lab_kubernetes_version": lab.kubernetes_version,
        "lab_kubernetes_minor": lab.kubernetes_minor,
        "lab_server_name": lab.server.name,
        "lab_server_address": lab.server.address,
        "lab_registry_endpoint": lab.registry_endpoint,
        "lab_registry_port": lab.registry.port,
        **cluster_network_vars(lab.distribution),
        "lab_nfs_export_path": lab.nfs.export_path,
        "lab_nfs_allowed_networks": list(lab.nfs_allowed_networks),
        "lab_nfs_purge_on_destroy": lab.nfs.purge_on_destroy,
        "lab_trainer_uid": lab.trainer.uid,
        "lab_trainer_port": lab.trainer.port,
        "lab_trainer_host_network": lab.trainer.host_network,
        "lab_airgap": airgap,
        "lab_skip": {step.value: reason for step, reason in lab.skip.items()},
        **apparmor.role_vars(),
        **nvidia.role_vars(),
        "lab_state_dir": NODE_STATE_DIR,
    }


def _host_vars(node: Node, lab: LabConfig) -> dict[str, Any]:
    return {
        "ansible_host": node.address,
        "ansible_user": node.user,
        "ansible_port": lab.ssh.port,
        # As written: Ansible's ssh plugin (`os.path.expanduser`) and OpenSSH's `-i`
        # (`tilde_expand_filename`) expand `~` where the playbook runs, so the inventory stored
        # in the Pulumi state names no one's home directory.
        "ansible_ssh_private_key_file": lab.ssh.key_path,
        "node_address": node.address,
        "node_role": node.role.value,
        "node_gpus": node.gpus,
        "node_interface": node.interface,
    }


def _group(nodes: list[Node]) -> dict[str, Any]:
    return {"hosts": {n.name: {} for n in nodes}}


def build_inventory(lab: LabConfig, known_hosts: Path | str) -> dict[str, Any]:
    """The inventory (Ansible's YAML shape, as a dict) for `lab`, checking host keys against `known_hosts`.

    `known_hosts` is a file, or a Jinja reference to a variable that holds one when the playbook runs.
    """
    common = {
        "ansible_become": True,
        "ansible_ssh_common_args": ssh_common_args(lab.ssh.host_key_policy, known_hosts),
    }
    return {
        "all": {
            "vars": {**common, **lab_vars(lab)},
            "hosts": {n.name: _host_vars(n, lab) for n in lab.nodes},
            "children": {
                "server": _group([lab.server]),
                "agent": _group(lab.agents),
                "gpu": _group(lab.gpu_nodes),
                "nfs_server": _group([lab.nfs_server]),
            },
        }
    }


__all__ = [
    "NODE_STATE_DIR",
    "build_inventory",
    "known_hosts_file",
    "lab_vars",
    "ssh_common_args",
    "stack_state_dir",
]
