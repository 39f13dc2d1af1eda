"""The Ansible inventory of a lab, generated from its stack configuration (never written by hand).

Groups: `server` (the control plane), `agent` (the other nodes), `gpu` (nodes with gpus > 0) and
`nfs_server` (the node that exports the share; none where the cluster provides the volume). Host
variables come from each node; the group variables of `all` carry the rest of the configuration
under `lab_*` names, which the roles read.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

from lab.config import (
    Airgap,
    ConfigError,
    Distribution,
    HostKeyPolicy,
    LabConfig,
    Node,
    check_stack_name,
)
from lab.config.facts import (
    API_PORT,
    BUILD_PROFILE,
    CLUSTER_NETWORKS,
    EPHEMERAL_PORTS,
    FLANNEL_DAEMONSET,
    KUBELET_PORT,
    MAX_COMPUTE_CAPABILITY,
    MIN_COMPUTE_CAPABILITY,
    MIN_DRIVER_MAJOR,
    NFS_PORT_NUMBER,
    VXLAN_PORT,
)
from lab.files import MachineError, ensure_folder, machine_problem, write_file
from lab.machine_settings import MACHINE_SETTINGS_FILE
from lab.paths import STATE_DIR, STATE_VARIABLE
from lab.remote.trust import login_problem

# Where the lab keeps, on each node, its record of what it added (packages, paths, install marks):
# reset.yml removes exactly that. `labctl doctor` reads the same marks.
NODE_STATE_DIR = "/var/lib/k8scifar"
# The inventory variable that names the stack's host-key policy; the ssh options that carry it
# out name a file of the operator's machine, so they are filled in where a playbook runs.
HOST_KEY_POLICY_VAR = "lab_ssh_host_key_policy"
# What ssh cannot take in a file name whatever the quoting: `${` starts an environment variable
# (ssh_config(5) ENVIRONMENT VARIABLES, expanded in UserKnownHostsFile and IdentityFile), and a
# control character ends or breaks the option.
SSH_UNQUOTABLE = re.compile(r"\$\{|[\x00-\x1f\x7f]")
# How inventories kept before HOST_KEY_POLICY_VAR named the known_hosts file: a Jinja reference,
# which Ansible no longer evaluates (lab.bootstrap.ansible_data). Their policy is read back from the options,
# so a lab made then can still be destroyed.
LEGACY_KNOWN_HOSTS = "{{ lab_known_hosts }}"
# The inventory's groups, which the playbooks' plays name in `hosts:` (ansible/playbooks/).
SERVER_GROUP = "server"
AGENT_GROUP = "agent"
GPU_GROUP = "gpu"
NFS_SERVER_GROUP = "nfs_server"
INVENTORY_GROUPS = (SERVER_GROUP, AGENT_GROUP, GPU_GROUP, NFS_SERVER_GROUP)


def stack_state_dir(stack: str, base: Path = STATE_DIR) -> Path:
    """Where the orchestrator keeps a stack's known_hosts and ansible-runner workdir (mode 0700)."""
    try:
        return ensure_folder(base / check_stack_name(stack), 0o700)
    except MachineError as err:
        raise MachineError(f"{err} (the lab's state folder; {STATE_VARIABLE} sets another)") from None


def known_hosts_file(stack: str, base: Path = STATE_DIR) -> Path:
    """The stack's own known_hosts (0600), so host keys are pinned per lab, not per user."""
    path = base / check_stack_name(stack) / "known_hosts"
    if SSH_UNQUOTABLE.search(str(path)):
        raise ConfigError(
            f"state folder {str(base)!r}",
            [
                "holds '${' or a control character, which ssh reads in a known_hosts path whatever"
                " the quoting; set K8SCIFAR_STATE_DIR to a folder without them"
            ],
        )
    stack_state_dir(stack, base)
    if not path.exists():
        write_file(path, b"", 0o600)
    try:
        path.chmod(0o600)
    except OSError as err:
        raise MachineError(machine_problem(err)) from None
    return path


def ssh_option(name: str, value: str) -> str:
    """`Name="value"`, one word of `ssh -o` whatever `value` holds but `${` and control characters.

    ssh splits an option's value into words (misc.c argv_split, openssh-portable): double quotes
    keep spaces and a backslash escapes '"' and '\\'. It also expands `%` tokens in file names
    (ssh_config(5) TOKENS), so a '%' is written '%%'.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'{name}="{escaped}"'


def ssh_common_args(policy: HostKeyPolicy, known_hosts: Path) -> str:
    """ssh options implementing the stack's host-key policy, quoted as a shell would split them:
    Ansible's ssh plugin and testinfra (through `sh -c`) both split this string into words."""
    if policy is HostKeyPolicy.OFF:
        return "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    checking = "accept-new" if policy is HostKeyPolicy.ACCEPT_NEW else "yes"
    known = ssh_option("UserKnownHostsFile", str(known_hosts))
    return shlex.join(["-o", f"StrictHostKeyChecking={checking}", "-o", known])


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


def image_requirement_vars() -> dict[str, Any]:
    """What the trainer image asks of a node, for the roles: the NVIDIA driver series and GPU
    generations its CUDA build runs on (the nvidia role), the AppArmor profile its build runs
    under (the prereq role)."""
    return {
        "lab_nvidia_min_driver_major": MIN_DRIVER_MAJOR,
        "lab_nvidia_compute_capability": [MIN_COMPUTE_CAPABILITY, MAX_COMPUTE_CAPABILITY],
        "lab_build_apparmor_profile": BUILD_PROFILE,
    }


def airgap_vars(airgap: Airgap) -> dict[str, Any]:
    """The local files of an offline install, for the distribution's role: k3s's two, or kubeadm's
    (an unset image tag as "", kubeadm's default: the engine drops a None)."""
    if airgap.kubeadm is None:
        return {"k3s_binary": airgap.k3s_binary, "images_tarball": airgap.images_tarball}
    files = airgap.kubeadm
    return {
        "kubeadm": files.kubeadm,
        "kubelet": files.kubelet,
        "kubectl": files.kubectl,
        "cni_plugins": files.cni_plugins,
        "images": list(files.images),
        "flannel_manifest": files.flannel_manifest,
        "coredns_tag": files.coredns_tag or "",
        "etcd_tag": files.etcd_tag or "",
    }


def lab_vars(lab: LabConfig) -> dict[str, Any]:
    """Group variables of `all`: everything the roles need to know about the lab as a whole."""
    # Empty, not None, without one: the engine drops a None on its way to the provider.
    airgap = {} if lab.airgap is None else airgap_vars(lab.airgap)
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
        "lab_flannel_daemonset": list(FLANNEL_DAEMONSET),
        "lab_machine_settings_file": MACHINE_SETTINGS_FILE,
        "lab_skip": {step.value: reason for step, reason in lab.skip.items()},
        **image_requirement_vars(),
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
        "node_interface": node.interface or "",  # "" is the route's; a None would not cross the engine
    }


def _group(nodes: list[Node]) -> dict[str, Any]:
    return {"hosts": {n.name: {} for n in nodes}}


def build_inventory(lab: LabConfig, known_hosts: Path | None) -> dict[str, Any]:
    """The inventory (Ansible's YAML shape, as a dict) for `lab`, checking host keys against `known_hosts`.

    With `known_hosts` None the ssh options are left out: `with_known_hosts` adds them where the
    playbook runs, so an inventory kept in the Pulumi state names no file of this machine.
    """
    common = {"ansible_become": True, HOST_KEY_POLICY_VAR: lab.ssh.host_key_policy.value}
    inventory = {
        "all": {
            "vars": {**common, **lab_vars(lab)},
            "hosts": {n.name: _host_vars(n, lab) for n in lab.nodes},
            "children": {
                SERVER_GROUP: _group([lab.server]),
                AGENT_GROUP: _group(lab.agents),
                GPU_GROUP: _group(lab.gpu_nodes),
                # Empty where the cluster provides the volume: no play exports or mounts one.
                NFS_SERVER_GROUP: _group([lab.nfs_server] if lab.exports_nfs else []),
            },
        }
    }
    return inventory if known_hosts is None else with_known_hosts(inventory, known_hosts)


def with_known_hosts(inventory: dict[str, Any], known_hosts: Path) -> dict[str, Any]:
    """A copy of `inventory` whose ssh options carry out its host-key policy against `known_hosts`.

    An inventory without a policy (local connections, as the tests use) is returned as it is.
    """
    group = inventory.get("all", {}).get("vars", {})
    policy = group.get(HOST_KEY_POLICY_VAR) or _legacy_policy(group.get("ansible_ssh_common_args", ""))
    if policy is None:
        return inventory
    filled = copy.deepcopy(inventory)
    filled["all"]["vars"]["ansible_ssh_common_args"] = ssh_common_args(HostKeyPolicy(policy), known_hosts)
    return filled


def _legacy_policy(args: str) -> str | None:
    if LEGACY_KNOWN_HOSTS not in args:
        return None
    strict = "StrictHostKeyChecking=yes" in args
    return (HostKeyPolicy.STRICT if strict else HostKeyPolicy.ACCEPT_NEW).value


__all__ = [
    "HOST_KEY_POLICY_VAR",
    "INVENTORY_GROUPS",
    "NODE_STATE_DIR",
    "build_inventory",
    "image_requirement_vars",
    "known_hosts_file",
    "lab_vars",
    "login_problem",
    "ssh_common_args",
    "ssh_option",
    "stack_state_dir",
    "with_known_hosts",
]
