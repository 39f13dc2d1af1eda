"""reset.yml on two machines where the lab's kubeadm cluster ran pods, through the runner `pulumi
destroy` uses: afterwards each machine is as its owner had it.

kubeadm's packages cannot be installed here (pkgs.k8s.io is out of reach), so the machines get
what site.yml leaves from the lab's own roles where they can run: the kubeadm role's record of
what it installs and claims (tasks/record.yml) and containerd from Debian through the
lab_packages role, which starts it and makes its state directories. What the cluster would
add is planted by stand-ins (standin_cluster.py): a kubelet unit that leaves pods and their
mounts, kube-flannel's CNI plugin and configuration, pod logs, an image in containerd's content
store, and a kubeadm whose `reset` does what kubeadm's does (it unmounts below /var/lib/kubelet
itself, after Ansible's facts were gathered).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from lab import testbed
from lab.bootstrap.inventory import build_inventory, known_hosts_file, with_known_hosts
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import Distribution, LabConfig
from tests.support import machine_state
from tests.support.local_play import run_play
from tests.support.machine_state import STACK, STANDIN

INSTALL = """\
- name: What the kubeadm role's install leaves of the lab's own
  hosts: all
  tasks:
    - name: Record that the lab installs kubeadm here and what it creates
      ansible.builtin.include_role:
        name: kubeadm
        tasks_from: record

    # python3-debian as prereq installs it (reset's apt_signed_source needs it); prereq itself
    # would turn swap off for kubeadm, which a machine sharing its host's swap may not do.
    - name: Install containerd from the distribution
      ansible.builtin.include_role:
        name: lab_packages
      vars:
        lab_packages_install: [containerd, python3-debian]
"""
# kubeadm's and the kubelet's packages, as stand-ins; kubeadm init or join's files.
KUBELET_UNIT = "/lib/systemd/system/kubelet.service"
STANDIN_FILES = ["/usr/bin/kubeadm", "/usr/bin/kubelet", KUBELET_UNIT, "/usr/local/libexec/k8scifar-standin"]


def _plant_cluster(address: str, server: str) -> str:
    return f"""
set -e
install -m 0755 /tmp/standin-cluster /usr/bin/kubeadm
install -m 0755 /tmp/standin-cluster /usr/bin/kubelet
printf '[Service]\\nExecStart=/usr/bin/kubelet {address} {server}\\nRestart=always\\n' > {KUBELET_UNIT}
mkdir -p /etc/kubernetes/pki /etc/kubernetes/manifests /var/lib/kubelet
echo 'kind: Config' > /etc/kubernetes/kubelet.conf
echo 'stand-in CA' > /etc/kubernetes/pki/ca.crt
echo 'kind: KubeletConfiguration' > /var/lib/kubelet/config.yaml
systemctl daemon-reload
systemctl start kubelet
for _ in $(seq 50); do [ -e /run/containerd/standin-pods ] && exit 0; sleep 0.2; done
echo 'the stand-in kubelet planted no pods' >&2
exit 1
"""


@pytest.fixture(scope="module")
def kubeadm_lab(lab: LabConfig) -> LabConfig:
    return lab.model_copy(update={"distribution": Distribution.KUBEADM})


@pytest.fixture(scope="module")
def before_the_lab(machines: testbed.Testbed) -> Iterator[dict[str, machine_state.Inventory]]:
    found = {}
    for machine in machines.layout.machines:
        machine_state.root_shell(machines, machine, machine_state.PLANT + machine_state.OWNER_HAS_PODMAN)
        found[machine.name] = machine_state.inventory(machines, machine)
    yield found
    for machine in machines.layout.machines:
        machine_state.root_shell(machines, machine, machine_state.OWNER_DROPS_PODMAN)


@pytest.fixture(scope="module")
def ran_pods(
    machines: testbed.Testbed,
    kubeadm_lab: LabConfig,
    before_the_lab: dict[str, machine_state.Inventory],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """The lab's install records and containerd, then the cluster's pods; the reset's inputs."""
    inventory = with_known_hosts(build_inventory(kubeadm_lab, None), known_hosts_file(STACK))
    done = run_play(tmp_path_factory.mktemp("install"), INSTALL, inventory, {"lab_stack": STACK})
    assert done.returncode == 0, done.stdout[-4000:]
    server = kubeadm_lab.server.address
    for machine in machines.layout.machines:
        _copy(machines, machine)
        machine_state.root_shell(machines, machine, _plant_cluster(machine.address, server))
    return bootstrap_inputs(kubeadm_lab, STACK, inventory=build_inventory(kubeadm_lab, None))


def _copy(machines: testbed.Testbed, machine: testbed.Machine) -> None:
    script = f"cat > /tmp/standin-cluster <<'STANDIN'\n{STANDIN.read_text()}STANDIN\n"
    testbed.ssh(machines, machine, "sh", "-c", shlex.quote(script))


def test_the_cluster_left_what_reset_has_to_remove(
    ran_pods: dict[str, Any], machines: testbed.Testbed
) -> None:
    for machine in machines.layout.machines:
        state = machine_state.inventory(machines, machine)
        paths = state.sections["cluster paths"]
        assert any(p.startswith("/var/lib/containerd/io.containerd.content.v1.content/blobs/") for p in paths)
        assert any(p.startswith("/var/log/pods/") for p in paths)
        assert "/opt/cni/bin/flannel" in state.sections["cni"]
        assert any(line.startswith("/kubepods.slice/") for line in state.sections["processes"])
        assert any(line.split()[2] == "overlay" for line in state.sections["mounts"])


@pytest.fixture(scope="module")
def reset(ran_pods: dict[str, Any], machines: testbed.Testbed) -> dict[str, machine_state.Inventory]:
    HostBootstrapProvider().delete("hosts-testbed", ran_pods)
    for machine in machines.layout.machines:  # kubeadm's and the kubelet's packages go with their purge
        machine_state.root_shell(
            machines,
            machine,
            f"rm -rf {' '.join(STANDIN_FILES)} /tmp/standin-cluster; systemctl daemon-reload",
        )
    return {m.name: machine_state.inventory(machines, m) for m in machines.layout.machines}


def test_reset_leaves_the_machines_as_they_were(
    reset: dict[str, machine_state.Inventory],
    before_the_lab: dict[str, machine_state.Inventory],
) -> None:
    """containerd's image store, kube-flannel's plugin in /opt/cni, the pod logs, the mounts
    kubeadm reset left and those it had already unmounted: nothing of the cluster stays."""
    problems = []
    for name, before in before_the_lab.items():
        changes = before.changes(reset[name], ignore=machine_state.REWRITTEN_BY_RESET)
        problems += [f"{name}: {change}" for change in changes]
    assert problems == [], "\n".join(problems)
