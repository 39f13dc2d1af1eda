"""What the roles open and write on the hosts, for every stack: firewall rules, NFS exports, NVIDIA toolkit.

One real ansible-playbook run per stack on a local connection, with the inventory the bootstrap
generates and the roles' own tasks: the prereq role's firewall tasks run against a recording
`ufw` stand-in (the test machines cannot load iptables rules: their kernel has no loadable
modules and a systemd-nspawn machine shares the host's netfilter, so the rules are checked as
the commands ufw receives, not as packets), the nfs_server role's exports template is rendered,
and the nvidia role's toolkit settings are applied to a config.toml shaped like the package's.
"""

from __future__ import annotations

import ipaddress
import shlex
import tomllib
from pathlib import Path

import yaml

from lab.config import LabConfig, load_stack
from tests.support.daemon_files import Rendered
from tests.support.host_files import TOOLKIT_CONFIG, HostFiles, render_host_files

# Firewall.


def firewall_problems(lab: LabConfig, node: str, calls: list[str]) -> list[str]:
    """What in `node`'s ufw calls opens more than the lab uses, or to more than who uses it."""
    me = next(n for n in lab.nodes if n.name == node)
    peers = {n.address for n in lab.nodes if n.name != node}
    wanted = {("10250", "tcp"), ("8472", "udp")}
    if me.role.value == "server":
        wanted.add(("6443", "tcp"))
    if node == lab.nfs_server.name:
        wanted.add(("2049", "tcp"))
    if lab.trainer.host_network:
        wanted |= {(str(lab.trainer.port), "tcp"), ("32768:60999", "tcp")}
    problems, opened = [], set()
    for call in calls:
        words = call.split()
        if "port" not in words:
            continue  # the cluster networks, which are not addresses of any host
        source = words[words.index("from") + 1]
        port, proto = words[words.index("port") + 1], words[words.index("proto") + 1]
        opened.add((port, proto))
        if (port, proto) not in wanted:
            problems.append(f"{node} opens {port}/{proto}, which this lab does not use")
        elif source == "any" and port != "6443":
            problems.append(f"{node} opens {port}/{proto} to any source, not only to {sorted(peers)}")
        elif source != "any" and source not in peers:
            problems.append(f"{node} opens {port}/{proto} to {source}, which is not another node")
    problems += [f"{node} does not open {p}/{proto}" for p, proto in sorted(wanted - opened)]
    return problems


def test_each_opening_admits_only_the_other_nodes_and_only_what_the_lab_uses(
    host_files: dict[str, HostFiles],
) -> None:
    problems = [
        problem
        for files in host_files.values()
        for node in files.lab.nodes
        for problem in firewall_problems(files.lab, node.name, files.ufw(node.name))
    ]
    assert problems == []
    kubeadm = host_files["example-kubeadm"]  # the stack with ranks on the host network
    assert any("port 32768:60999" in call for call in kubeadm.ufw("box-a"))
    assert not any("32768" in call for call in host_files["example-cpu"].ufw("cpu-a"))


def test_the_firewall_check_catches_openings_to_anyone_and_unused_ports() -> None:
    lab = load_stack("example-cpu")
    old = [  # the rules the role used to make on an agent
        "allow from any to any port 8472 proto udp comment 'k8scifar'",
        "allow from any to any port 2379:2380 proto tcp comment 'k8scifar'",
        "allow from 192.168.50.99 to any port 10250 proto tcp comment 'k8scifar'",
    ]
    problems = firewall_problems(lab, "cpu-b", old)
    assert any("8472/udp to any source" in p for p in problems)
    assert any("2379:2380/tcp, which this lab does not use" in p for p in problems)
    assert any("192.168.50.99, which is not another node" in p for p in problems)


def test_reset_deletes_exactly_the_rules_it_made(host_files: dict[str, HostFiles], tmp_path: Path) -> None:
    opened = host_files["example-kubeadm"]
    closed = render_host_files("example-kubeadm", tmp_path / "close", "absent", opened.out.parent / "state")
    for node in opened.lab.nodes:
        assert [f"delete {call}" for call in opened.ufw(node.name)] == closed.ufw(node.name)


# NFS exports.


def export_problems(lab: LabConfig, exports: str) -> list[str]:
    """Clients of the export that are not exactly one node's address."""
    nodes = {ipaddress.ip_network(n.address) for n in lab.nodes}
    line = next(line for line in exports.splitlines() if line and not line.startswith("#"))
    # exportfs reads a double-quoted path (exports(5)); the role quotes it.
    path, *clients = shlex.split(line)
    problems = [] if path == lab.nfs.export_path else [f"exports {path}, not {lab.nfs.export_path}"]
    for client in clients:
        network = ipaddress.ip_network(client.split("(")[0])
        if network not in nodes:
            problems.append(f"{lab.nfs.export_path} is exported to {network}, which is not one node")
        if "root_squash" not in client.split("(")[1].split(","):
            problems.append(f"{network} does not squash root")
    return problems


def test_shipped_stacks_export_to_the_node_addresses_only(host_files: dict[str, HostFiles]) -> None:
    problems = [
        p
        for files in host_files.values()
        for p in export_problems(files.lab, files.file(files.lab.nfs_server.name, "exports"))
    ]
    assert problems == []


def test_the_export_check_catches_a_subnet() -> None:
    lab = load_stack("example-cpu")
    old = "/srv/k8scifar 192.168.50.0/24(rw,sync,root_squash,no_subtree_check)\n"
    assert export_problems(lab, old) == [
        "/srv/k8scifar is exported to 192.168.50.0/24, which is not one node"
    ]


# NVIDIA container toolkit.


def toolkit_problems(config: str) -> list[str]:
    settings = tomllib.loads(config)
    wanted = {
        "accept-nvidia-visible-devices-as-volume-mounts": True,
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
    }
    return [
        f"{key} is {settings.get(key)!r}, not {value!r}"
        for key, value in wanted.items()
        if settings.get(key) != value
    ]


def test_gpu_nodes_ignore_visible_devices_set_by_unprivileged_pods(host_files: dict[str, HostFiles]) -> None:
    gpu_nodes = [(files, n.name) for files in host_files.values() for n in files.lab.gpu_nodes]
    assert gpu_nodes, "no shipped stack has GPU nodes: the toolkit settings would go unchecked"
    for files, node in gpu_nodes:
        config = files.file(node, "config.toml")
        assert toolkit_problems(config) == []
        assert tomllib.loads(config)["nvidia-container-runtime"] == {"log-level": "info"}, "tables untouched"
    assert toolkit_problems(TOOLKIT_CONFIG) == [
        "accept-nvidia-visible-devices-as-volume-mounts is None, not True",
        "accept-nvidia-visible-devices-envvar-when-unprivileged is None, not False",
    ]


# k3s hardening.

# kubernetes pkg/kubelet/cm/container_manager_linux.go setupKernelTunables (and pkg/util/sysctl):
# with protect-kernel-defaults the kubelet refuses to start unless the kernel has these values.
KUBELET_KERNEL_DEFAULTS = {
    "vm.overcommit_memory": "1",
    "vm.panic_on_oom": "0",
    "kernel.panic": "10",
    "kernel.panic_on_oops": "1",
    "kernel.keys.root_maxkeys": "1000000",
    "kernel.keys.root_maxbytes": "25000000",
}
PSA_LEVELS = {"privileged", "baseline", "restricted"}


def sysctl_problems(text: str) -> list[str]:
    pairs = [line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")]
    values = {key.strip(): value.strip() for key, value in pairs}
    return [
        f"{key} is {values.get(key)!r}, the kubelet wants {value}"
        for key, value in KUBELET_KERNEL_DEFAULTS.items()
        if values.get(key) != value
    ]


def pod_security_problems(text: str) -> list[str]:
    """An AdmissionConfiguration the API server would not take, or that leaves Pod Security off."""
    config = yaml.safe_load(text)
    if (config.get("apiVersion"), config.get("kind")) != (
        "apiserver.config.k8s.io/v1",
        "AdmissionConfiguration",
    ):
        return ["not an apiserver.config.k8s.io/v1 AdmissionConfiguration"]
    plugin = next((p for p in config.get("plugins", []) if p.get("name") == "PodSecurity"), None)
    if plugin is None:
        return ["no PodSecurity plugin configuration"]
    psa = plugin["configuration"]
    if psa.get("apiVersion") != "pod-security.admission.config.k8s.io/v1":
        return [f"PodSecurityConfiguration {psa.get('apiVersion')} is not the GA v1"]
    defaults = psa.get("defaults", {})
    problems = [
        f"{mode}: {defaults.get(mode)!r} is no level"
        for mode in ("enforce", "audit", "warn")
        if defaults.get(mode) not in PSA_LEVELS
    ]
    if defaults.get("enforce") == "privileged":
        problems.append("enforce: privileged leaves unlabelled namespaces unchecked")
    return problems


def test_k3s_nodes_get_the_kernel_settings_protect_kernel_defaults_needs(
    host_files: dict[str, HostFiles],
) -> None:
    for files in host_files.values():
        for node in files.lab.nodes:
            problems = sysctl_problems(files.file(node.name, "sysctl.conf"))
            # kubeadm's kubelet runs without protect-kernel-defaults: the host's values stay.
            assert (problems == []) is (files.lab.distribution.value == "k3s"), (node.name, problems)
    assert (
        sysctl_problems("vm.overcommit_memory = 0\n")[0] == "vm.overcommit_memory is '0', the kubelet wants 1"
    )


def test_the_k3s_server_enforces_pod_security_by_default(host_files: dict[str, HostFiles]) -> None:
    servers = [files for files in host_files.values() if files.lab.distribution.value == "k3s"]
    for files in servers:
        assert pod_security_problems(files.file(files.lab.server.name, "pod-security.yaml")) == []
    off = "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: []\n"
    assert pod_security_problems(off) == ["no PodSecurity plugin configuration"]


def test_the_k3s_configuration_turns_the_hardening_on(daemon_files: dict[str, Rendered]) -> None:
    files = daemon_files["example-cpu"]
    server, agent = (yaml.safe_load(files.file(n.name, "config.yaml")) for n in files.lab.nodes)
    assert server["protect-kernel-defaults"] is True and agent["protect-kernel-defaults"] is True
    assert server["secrets-encryption"] is True
    assert server["kube-apiserver-arg"] == [
        "admission-control-config-file=/etc/rancher/k3s/pod-security.yaml"
    ]
