"""site.yml and reset.yml on two machines where k3s ran pods, through the runner `pulumi up` and
`pulumi destroy` use: afterwards each machine is as its owner had it, file for file, mount for
mount, process for process, link for link, rule for rule and package for package.

No k3s release can run here, so the k3s role installs, as its airgap binary, a stand-in
(standin_cluster.py) that leaves what a k3s node running pods leaves: pods in kubepods.slice under
containerd shims in the k3s unit, their tmpfs, overlay, NFS-named and shm mounts, network
namespaces, flannel's links, CNI state and firewall rules, pod logs and an image store. Everything
else is the lab's own: its roles, its records, systemd, apt and the kernel of the machines.

While the lab runs, the owner of the first machine goes on using it: installs by hand a package
the lab brought as a dependency, adds a podman network's firewall rules and CNI configuration.
On the second machine unattended-upgrades holds apt's lock when site.yml starts, longer than the
apt module waits by default.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from lab import testbed
from lab.bootstrap.inventory import build_inventory
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import LabConfig
from tests.support import machine_state
from tests.support.machine_state import STACK, STANDIN

# While the lab runs: a podman network on the first machine (its masquerading, a port forward
# through the portmap chains it then shares with the cluster's pods, its configuration) and an
# owner's rule that mentions KUBE-.
PODMAN_LATER = """*filter
-A INPUT -s 192.168.7.0/24 -m comment --comment "allow KUBE-API from home" -j ACCEPT
COMMIT
*nat
:CNI-1b2c3d4e5f6a7b8c9d0e1f2a - [0:0]
:CNI-DN-9f8e7d6c5b4a39281706f - [0:0]
-A POSTROUTING -s 10.88.0.4/32 -m comment --comment "name: \\"podman\\" id: \\"aa11bb\\"" -j CNI-1b2c3d4e5f6a7b8c9d0e1f2a
-A CNI-1b2c3d4e5f6a7b8c9d0e1f2a ! -d 224.0.0.0/4 -m comment --comment "name: \\"podman\\" id: \\"aa11bb\\"" -j MASQUERADE
-A CNI-DN-9f8e7d6c5b4a39281706f -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.88.0.4:80
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"podman\\" id: \\"aa11bb\\"" -m multiport --dports 8080 -j CNI-DN-9f8e7d6c5b4a39281706f
COMMIT
"""  # noqa: E501
# podman's rules as the inventory lists them (no counters).
PODMAN_RULES = {
    line.removesuffix(" [0:0]") for line in PODMAN_LATER.splitlines() if line.startswith(("-A", ":CNI"))
}
PODMAN_CONFIG = "/etc/cni/net.d/88-podman-later.conflist"
# A package the lab installs as a dependency of nfs-common, installed by hand by the owner.
BY_HAND = "keyutils"
OWNER_GOES_ON = f"""
set -e
iptables-restore --noflush <<'RULES'
{PODMAN_LATER}RULES
echo '{{"cniVersion": "1.0.0", "name": "later", "plugins": [{{"type": "bridge"}}]}}' > {PODMAN_CONFIG}
DEBIAN_FRONTEND=noninteractive apt-get install -y -q {BY_HAND} >/dev/null
"""
# unattended-upgrades on a first boot: apt's lock held for longer than the apt module's default
# lock_timeout (60 s) when site.yml starts.
LOCK_SECONDS = 75
HOLD_APT_LOCK = "systemd-run --quiet --unit=owner-unattended-upgrades python3 -c " + shlex.quote(
    "import fcntl, time\n"
    "held = [open(p, 'w') for p in ('/var/lib/dpkg/lock-frontend', '/var/lib/dpkg/lock')]\n"
    "[fcntl.lockf(f, fcntl.LOCK_EX) for f in held]\n"
    f"time.sleep({LOCK_SECONDS})\n"
)
# A GPU given to the second machine after the lab came: the toolkit's runtime appears where k3s
# looks for it (the test's stand-in for it; the toolkit cannot be installed here).
NVIDIA_RUNTIME = "/usr/bin/nvidia-container-runtime"

KEPT = machine_state.REWRITTEN_BY_RESET


def _root(machines: testbed.Testbed, machine: testbed.Machine, script: str) -> str:
    return machine_state.root_shell(machines, machine, script)


@pytest.fixture(scope="module")
def before_the_lab(machines: testbed.Testbed) -> Iterator[dict[str, machine_state.Inventory]]:
    found = {}
    for machine in machines.layout.machines:
        _root(machines, machine, machine_state.PLANT + machine_state.OWNER_HAS_PODMAN)
        found[machine.name] = machine_state.inventory(machines, machine)
    yield found
    for machine in machines.layout.machines:  # the owner's iptables, for the tests after these
        _root(
            machines, machine, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q iptables >/dev/null; true"
        )


@pytest.fixture(scope="module")
def inputs(lab: LabConfig, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The stack's inputs with Kubernetes installed from the stand-in as k3s's airgap files."""
    files = tmp_path_factory.mktemp("airgap")
    (files / "k3s").write_bytes(STANDIN.read_bytes())
    (files / "k3s").chmod(0o755)
    (files / "k3s-airgap-images-amd64.tar").write_bytes(b"\0" * 1024)
    inventory = build_inventory(lab, None)
    variables = inventory["all"]["vars"]
    variables["lab_airgap"] = {
        "k3s_binary": str(files / "k3s"),
        "images_tarball": str(files / "k3s-airgap-images-amd64.tar"),
    }
    variables["lab_skip"] = {k: v for k, v in variables["lab_skip"].items() if k != "kubernetesInstall"}
    return bootstrap_inputs(lab, STACK, inventory=inventory)


@pytest.fixture(scope="module")
def provider() -> HostBootstrapProvider:
    return HostBootstrapProvider()


@pytest.fixture(scope="module")
def converged(
    machines: testbed.Testbed,
    provider: HostBootstrapProvider,
    inputs: dict[str, Any],
    before_the_lab: dict[str, machine_state.Inventory],
) -> dict[str, Any]:
    _root(machines, machines.layout.machines[1], HOLD_APT_LOCK)
    return provider.create(inputs).outs


def _pod_processes(machines: testbed.Testbed, machine: testbed.Machine) -> list[str]:
    listed = machine_state.inventory(machines, machine).sections["processes"]
    return sorted(p for p in listed if p.startswith("/kubepods.slice/") or "containerd-shim" in p)


def test_site_installs_k3s_and_its_pods_run(converged: dict[str, Any], machines: testbed.Testbed) -> None:
    """The stand-in ran under the role's unit: what reset meets below is what k3s leaves."""
    assert converged["kubeconfig"] and set(converged["nodes"]) == {m.name for m in machines.layout.machines}
    for machine in machines.layout.machines:
        state = machine_state.inventory(machines, machine)
        running = _pod_processes(machines, machine)
        assert len([p for p in running if p.startswith("/kubepods.slice/")]) == 2, running
        assert len([p for p in running if "containerd-shim" in p]) == 2, running
        kinds = {
            line.split()[2] for line in state.sections["mounts"] if "/kubelet/" in line or "/k3s/" in line
        }
        assert kinds == {"tmpfs", "overlay"}, kinds
        assert any(line.split()[2] == "nsfs" for line in state.sections["mounts"])
        assert {"cni0", "flannel.1"} <= state.sections["links"]
        assert any("KUBE-" in rule for rule in state.sections["firewall"])


def test_a_gpu_added_later_gets_the_nvidia_runtime(
    converged: dict[str, Any],
    machines: testbed.Testbed,
    provider: HostBootstrapProvider,
    inputs: dict[str, Any],
) -> None:
    """k3s looks for the runtime only when it starts: site.yml restarts it when it is there now."""
    second = machines.layout.machines[1]
    config = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    assert "nvidia" not in _root(machines, second, f"cat {config}")
    _root(machines, second, f"printf '#!/bin/sh\\nexit 0\\n' > {NVIDIA_RUNTIME}; chmod 0755 {NVIDIA_RUNTIME}")
    try:
        provider.update("hosts-testbed", converged, inputs)
        assert f'BinaryName = "{NVIDIA_RUNTIME}"' in _root(machines, second, f"cat {config}")
        assert len(_pod_processes(machines, second)) == 4, "restarting k3s must not restart its pods"
    finally:
        _root(machines, second, f"rm -f {NVIDIA_RUNTIME}")


@pytest.fixture(scope="module")
def reset(
    converged: dict[str, Any],
    machines: testbed.Testbed,
    provider: HostBootstrapProvider,
    before_the_lab: dict[str, machine_state.Inventory],
) -> dict[str, tuple[machine_state.Inventory, list[str]]]:
    """Each machine after reset.yml, with what changed since before the lab came."""
    _root(machines, machines.layout.machines[0], OWNER_GOES_ON)
    provider.delete("hosts-testbed", converged)
    found = {}
    for machine in machines.layout.machines:
        after = machine_state.inventory(machines, machine)
        found[machine.name] = (after, before_the_lab[machine.name].changes(after, ignore=KEPT))
    return found


def test_reset_leaves_the_second_machine_as_it_was(
    reset: dict[str, tuple[machine_state.Inventory, list[str]]], machines: testbed.Testbed
) -> None:
    second = machines.layout.machines[1].name
    _after, changes = reset[second]
    assert changes == [], f"{second} after reset:\n" + "\n".join(changes)


# The system users the lab's packages created stay while a package the lab installed stays, here
# the one the owner took over (reset cannot tell which package's maintainer script made which
# user, and removing one a remaining package owns files for would break it): the account files
# differ from before by those users.
ACCOUNT_FILES = ("/etc/passwd ", "/etc/shadow ")


def _owners_later_change(change: str, owners_files: frozenset[str]) -> bool:
    """What the owner of the first machine did while the lab ran, as the inventory shows it: the
    podman rules, with the portmap chains they go through (the cluster made them first, podman
    uses them now: they stay) and the nat table they sit in, the podman configuration, the
    package installed by hand with its files (`owners_files`), and the users kept with it."""
    section, _, line = change.partition(": ")
    sign, _, entry = line.partition(" ")
    if section == "etc" and entry.startswith(ACCOUNT_FILES):
        return True
    if sign != "+":
        return False
    if section == "firewall":
        words = entry.split()
        rule = " ".join(words[1:])
        portmap = "CNI-HOSTPORT-" in entry and "cbr0" not in entry and not words[2].startswith("CNI-DN-")
        # The nat table podman's rules now sit in, with its built-in chains.
        table = rule == "*nat" or rule in {f":{chain} ACCEPT" for chain in ("PREROUTING", "POSTROUTING")}
        return rule in PODMAN_RULES or portmap or table
    if section in ("etc", "cni"):
        return entry.startswith(PODMAN_CONFIG) or entry.split()[0].rstrip("/") in owners_files
    return section in ("packages", "manual") and entry.split()[0] == BY_HAND


def test_reset_leaves_the_owners_later_changes_and_nothing_of_the_lab(
    reset: dict[str, tuple[machine_state.Inventory, list[str]]], machines: testbed.Testbed
) -> None:
    """The first machine: as it was, plus exactly what its owner did meanwhile."""
    first = machines.layout.machines[0].name
    after, changes = reset[first]
    assert BY_HAND in after.sections["manual"], f"{BY_HAND}, installed by hand, was not left to the owner"
    assert f"{BY_HAND} install" in after.sections["packages"]
    missing = {f"iptables {rule}" for rule in PODMAN_RULES} - after.sections["firewall"]
    assert not missing, f"podman's rules were removed: {missing}"
    owners_files = frozenset(_root(machines, machines.layout.machines[0], f"dpkg -L {BY_HAND}").split())
    unexpected = [change for change in changes if not _owners_later_change(change, owners_files)]
    assert unexpected == [], f"{first} after reset:\n" + "\n".join(unexpected)
