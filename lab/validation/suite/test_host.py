"""Host checks: what every node of the lab must look like after the bootstrap."""

from __future__ import annotations

from typing import Any

import pytest

from lab.config import LabConfig, Node, SkipStep
from lab.config.facts import API_PORT, KUBELET_PORT
from lab.validation.suite import checks
from lab.validation.suite.conftest import skip_if_step_skipped

SUPPORTED_DISTRIBUTIONS = {"debian", "ubuntu"}
MIN_KERNEL = (5, 4)
EXPORTS_FILES = "/etc/exports /etc/exports.d/*.exports"
SYSCTL_FILES = "/etc/sysctl.d/*.conf /run/sysctl.d/*.conf /etc/sysctl.conf"
K3S_REGISTRIES = "/etc/rancher/k3s/registries.yaml"
K3S_CONTAINERD_CONFIG = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"


def _is_container(host: Any) -> bool:
    return host.run("systemd-detect-virt --container").rc == 0


def test_os_and_kernel_are_supported(host: Any) -> None:
    info = host.system_info
    assert info.type == "linux"
    assert info.distribution in SUPPORTED_DISTRIBUTIONS, f"{info.distribution} is not Debian or Ubuntu"
    release = host.check_output("uname -r")
    major, minor = (int(p) for p in release.split(".")[:2])
    assert (major, minor) >= MIN_KERNEL, f"kernel {release} is older than {'.'.join(map(str, MIN_KERNEL))}"


def test_time_is_synchronised(host: Any, node: Node) -> None:
    if _is_container(host):
        pytest.skip(f"{node.name} is a container and keeps its host's clock; no time sync of its own")
    synced = host.run("timedatectl show --property=NTPSynchronized --value").stdout.strip()
    assert synced == "yes", (
        f"{node.name}: the clock is not synchronised (timedatectl: {synced or 'no answer'})"
    )


def test_swap_is_off_for_kubeadm(host: Any, lab: LabConfig) -> None:
    if lab.distribution.value != "kubeadm":
        pytest.skip("k3s runs with swap on; only kubeadm's kubelet refuses to start with swap")
    swaps = host.file("/proc/swaps").content_string.splitlines()[1:]
    assert not swaps, f"swap is on: {swaps}"


def _sysctls(host: Any, names: list[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for name in names:
        proc = host.file("/proc/sys/" + name.replace(".", "/"))
        values[name] = proc.content_string.strip() if proc.exists else None
    return values


def _wanted_sysctls(host: Any) -> dict[str, str]:
    """Forwarding always; the bridge settings where the kernel has br_netfilter."""
    wanted = dict(checks.SYSCTLS)
    if host.file("/proc/sys/net/bridge").exists:
        wanted.update(checks.BRIDGE_SYSCTLS)
    return wanted


def test_kernel_settings_are_configured(host: Any) -> None:
    """What the node applies at every boot (`sysctl --system` reads these files in this order)."""
    text = host.run(f"cat {SYSCTL_FILES} 2>/dev/null").stdout
    checks.require(checks.sysctl_problems(checks.sysctl_config(text), _wanted_sysctls(host)))


def test_kernel_settings_are_in_effect(host: Any, node: Node) -> None:
    if _is_container(host) and host.run("test -w /proc/sys/net/ipv4/ip_forward").rc != 0:
        pytest.skip(
            f"{node.name} is a container with a read-only /proc/sys: its host decides kernel settings"
        )
    wanted = _wanted_sysctls(host)
    checks.require(checks.sysctl_problems(_sysctls(host, list(wanted)), wanted))


def _kubernetes_services(lab: LabConfig, node: Node) -> list[str]:
    if lab.distribution.value == "kubeadm":
        return ["containerd", "kubelet"]
    return ["k3s"] if node.role.value == "server" else ["k3s-agent"]


def test_kubernetes_services_run_and_start_at_boot(host: Any, node: Node, installed: LabConfig) -> None:
    for name in _kubernetes_services(installed, node):
        service = host.service(name)
        assert service.is_running, f"{name} is not running on {node.name}"
        assert service.is_enabled, f"{name} does not start at boot on {node.name}"


def test_kubernetes_ports_listen(host: Any, node: Node, installed: LabConfig) -> None:
    ports = [KUBELET_PORT] + ([API_PORT] if node.role.value == "server" else [])
    closed = [p for p in ports if not host.socket(f"tcp://{p}").is_listening]
    assert not closed, f"{node.name} does not listen on {closed}"


def test_nvidia_smi_sees_the_configured_gpus(host: Any, node: Node) -> None:
    if node.gpus == 0:
        pytest.skip(f"{node.name} has no GPU configured (gpus: 0)")
    result = host.run("nvidia-smi -L")
    assert result.rc == 0, f"nvidia-smi fails on {node.name}: {result.stderr.strip()}"
    found = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    assert len(found) == node.gpus, f"{node.name}: nvidia-smi lists {len(found)} GPUs, configured {node.gpus}"


def test_container_runtime_has_nvidia_runtime(host: Any, node: Node, installed: LabConfig) -> None:
    if node.gpus == 0:
        pytest.skip(f"{node.name} has no GPU configured (gpus: 0)")
    if installed.distribution.value == "k3s":
        config = host.file(K3S_CONTAINERD_CONFIG).content_string
    else:
        config = host.check_output("containerd config dump")
    assert "nvidia" in config, f"{node.name}: containerd has no nvidia runtime"


def test_nvidia_device_nodes_have_dev_char_links(host: Any, node: Node) -> None:
    """A container keeps its GPUs across a systemd reload only with these links (NVIDIA container
    toolkit issue 48; ansible/roles/nvidia/defaults/main.yml)."""
    if node.gpus == 0:
        pytest.skip(f"{node.name} has no GPU configured (gpus: 0)")
    devices = host.run(
        "stat -c '%n %t %T' /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm 2>/dev/null"
    ).stdout
    links = host.run("ls /dev/char").stdout
    checks.require(checks.dev_char_problems(devices, links))


def _nfs_server(host: Any, node: Node, lab: LabConfig) -> None:
    if not lab.exports_nfs:
        pytest.skip("the lab exports no NFS folder: the stack's provides.volume names the volume")
    if node.name != lab.nfs_server.name:
        pytest.skip(f"{node.name} is not the NFS server ({lab.nfs_server.name} exports the share)")


def test_nfs_export_folders_belong_to_the_trainer(host: Any, node: Node, lab: LabConfig) -> None:
    """The export is root's, marked as the lab's; only its folders are the trainer's to write."""
    _nfs_server(host, node, lab)
    export = host.file(lab.nfs.export_path)
    assert export.is_directory and not export.is_symlink, f"{lab.nfs.export_path} is missing on {node.name}"
    assert (export.uid, export.mode) == (0, 0o755), (
        f"{lab.nfs.export_path} is uid {export.uid}, mode {export.mode:o}; expected root's, 0755"
    )
    assert host.file(f"{lab.nfs.export_path}/{checks.EXPORT_MARK}").is_file, (
        f"{lab.nfs.export_path} has no mark"
    )
    for folder in checks.EXPORT_FOLDERS:
        found = host.file(f"{lab.nfs.export_path}/{folder}")
        assert found.is_directory and not found.is_symlink, f"{folder} is missing or a link on {node.name}"
        assert found.uid == lab.trainer.uid, f"{folder} is owned by uid {found.uid}, not {lab.trainer.uid}"


def test_nfs_export_is_limited_to_the_lab(host: Any, node: Node, lab: LabConfig) -> None:
    _nfs_server(host, node, lab)
    skip_if_step_skipped(lab, SkipStep.NFS_SERVER_START)  # the bootstrap exports only when it serves
    exports = host.run(f"cat {EXPORTS_FILES} 2>/dev/null").stdout
    checks.require(checks.export_problems(exports, lab.nfs.export_path, lab.nfs_allowed_networks))


def test_nfs_export_is_served(host: Any, node: Node, lab: LabConfig) -> None:
    _nfs_server(host, node, lab)
    skip_if_step_skipped(lab, SkipStep.NFS_SERVER_START)
    assert host.service("nfs-server").is_running, f"nfs-server is not running on {node.name}"
    served = host.check_output("exportfs -v")
    assert lab.nfs.export_path in served, f"{lab.nfs.export_path} is not in `exportfs -v` on {node.name}"


def test_shared_folder_holds_the_trainers_folders(host: Any, node: Node, lab: LabConfig) -> None:
    """The folder the stack says every node mounts holds the folders the lab's volumes are."""
    shared = lab.provides.volume.shared_folder if lab.provides.volume is not None else None
    if shared is None:
        pytest.skip("the stack names no shared folder (provides.volume.sharedFolder)")
    for folder in checks.EXPORT_FOLDERS:
        found = host.file(f"{shared}/{folder}")
        assert found.is_directory, f"{shared}/{folder} is not a folder on {node.name}"
        assert found.uid == lab.trainer.uid or found.mode & 0o002, (
            f"{shared}/{folder} on {node.name} is uid {found.uid}'s, mode {found.mode:o}:"
            f" trainer.uid {lab.trainer.uid} cannot write there"
        )


def test_registry_mirror_is_configured(host: Any, node: Node, lab: LabConfig) -> None:
    endpoint = lab.registry_endpoint
    if lab.distribution.value == "k3s":
        config = host.file(K3S_REGISTRIES)
        assert config.exists, f"{K3S_REGISTRIES} is missing on {node.name}"
        checks.require(checks.k3s_mirror_problems(config.content_string, endpoint))
    else:
        config = host.file(f"/etc/containerd/certs.d/{endpoint}/hosts.toml")
        assert config.exists, f"{config.path} is missing on {node.name}"
        checks.require(checks.containerd_hosts_problems(config.content_string, endpoint))
