"""The cluster_leftovers role run for real by Ansible on this machine, the way reset.yml runs it.

Firewall rules: with stand-ins for iptables-save and iptables-restore, in the text iptables-save
prints. The rules kube-proxy, flannel and the cluster network's CNI plugins leave go; the rules
another tool had before the lab came stay, and so do those another tool made while the lab ran
(a podman network's CNI chains, the owner's rule whose comment says KUBE-).

Mounts, network namespaces and links: in a private mount and network namespace, with what a
node that ran pods has (tmpfs, overlay and NFS mounts under the kubelet's directory, stacked and
busy ones, pod network namespaces, flannel's links), and what the owner has beside it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lab.paths import ANSIBLE_DIR
from tests.support.local_play import LOCAL, run_play, run_tasks

# A machine whose owner runs podman with the CNI firewall plugin (CNI-FORWARD, CNI-ADMIN).
OWNERS = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [10:600]
:OUTPUT ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
COMMIT
"""
# The same machine with the lab's cluster running: kube-proxy's and flannel's chains, new counters.
CLUSTER_CHAINS = ":FLANNEL-FWD - [0:0]\n:KUBE-FORWARD - [0:0]\n"
CLUSTER_RULES = """\
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A FLANNEL-FWD -s 10.42.0.0/16 -j ACCEPT
"""
WITH_THE_CLUSTER = (
    OWNERS.replace(":CNI-ADMIN - [0:0]", ":CNI-ADMIN - [3:180]")
    .replace(":CNI-FORWARD - [0:0]\n", ":CNI-FORWARD - [3:180]\n" + CLUSTER_CHAINS)
    .replace("COMMIT\n", CLUSTER_RULES + "COMMIT\n")
)

# A machine with no CNI user before the lab.
PLAIN_FILTER = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
COMMIT
"""
PLAIN_NAT_CHAINS = """\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
"""
PLAIN = PLAIN_FILTER + PLAIN_NAT_CHAINS + "COMMIT\n"
# The cluster's nat rules as kube-proxy, flannel and the portmap plugin (a hostPort pod on the
# cluster network, cbr0) write them (containernetworking/plugins portmap_iptables.go).
CLUSTER_NAT_CHAINS = """\
:CNI-DN-1a2b3c4d5e6f708192a3b - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
:CNI-HOSTPORT-SETMARK - [0:0]
:FLANNEL-POSTRTG - [0:0]
:KUBE-SERVICES - [0:0]
"""
CLUSTER_NAT_RULES = """\
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A CNI-DN-1a2b3c4d5e6f708192a3b -s 10.42.0.9/32 -p tcp -m tcp --dport 5000 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-1a2b3c4d5e6f708192a3b -p tcp -m tcp --dport 5000 -j DNAT --to-destination 10.42.0.9:5000
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"cbr0\\" id: \\"0f1e2d\\"" -m multiport --dports 5000 -j CNI-DN-1a2b3c4d5e6f708192a3b
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000
-A FLANNEL-POSTRTG -s 10.42.0.0/24 -d 10.42.0.0/16 -m comment --comment "flanneld masq" -j RETURN
"""  # noqa: E501
# What podman (CNI networks) adds while the lab runs: its network's masquerading chain, a port
# forward through the same shared portmap chains, and the owner's own rule whose comment says KUBE-.
PODMAN_NAT_CHAINS = ":CNI-4e5f6a7b8c9d0e1f2a3b4c5d - [0:0]\n:CNI-DN-9f8e7d6c5b4a39281706f - [0:0]\n"
PODMAN_NAT_RULES = """\
-A POSTROUTING -s 10.88.0.4/32 -m comment --comment "name: \\"podman\\" id: \\"aa11bb\\"" -j CNI-4e5f6a7b8c9d0e1f2a3b4c5d
-A CNI-4e5f6a7b8c9d0e1f2a3b4c5d -d 10.88.0.0/16 -m comment --comment "name: \\"podman\\" id: \\"aa11bb\\"" -j ACCEPT
-A CNI-4e5f6a7b8c9d0e1f2a3b4c5d ! -d 224.0.0.0/4 -m comment --comment "name: \\"podman\\" id: \\"aa11bb\\"" -j MASQUERADE
-A CNI-DN-9f8e7d6c5b4a39281706f -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.88.0.4:80
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"podman\\" id: \\"aa11bb\\"" -m multiport --dports 8080 -j CNI-DN-9f8e7d6c5b4a39281706f
"""  # noqa: E501
OWNER_FILTER_RULE = (
    '-A INPUT -s 192.168.7.0/24 -m comment --comment "allow KUBE-API from the office" -j ACCEPT\n'
)


def _nat(chains: str, rules: str, filter_table: str = PLAIN_FILTER) -> str:
    """The plain machine's tables with these chains and rules added to nat."""
    return filter_table + PLAIN_NAT_CHAINS + chains + rules + "COMMIT\n"


FAKES = {
    "iptables-save": 'cat "$LAB_TEST_RULES"',
    "iptables-restore": 'cat > "$LAB_TEST_RESTORED"',
    # The other variants answer with nothing, whatever this machine has installed.
    **{f"{tool}-{verb}": "true" for tool in ("ip6tables", "iptables-legacy", "ip6tables-legacy")
       for verb in ("save", "restore")},
}  # fmt: skip

RESET_PLAY = """\
- name: Remove what the cluster left
  hosts: all
  tasks:
    - name: Include the role
      ansible.builtin.include_role:
        name: cluster_leftovers
"""


def _rules_reset(tmp_path: Path, before: str, after: str, extra: dict | None = None) -> list[str]:
    """Snapshot `before`, then reset with `after` in iptables; the lines handed to iptables-restore."""
    rules, restored = tmp_path / "rules", tmp_path / "restored"
    environment = {"LAB_TEST_RULES": str(rules), "LAB_TEST_RESTORED": str(restored)}
    variables = {
        "lab_state_dir": str(tmp_path / "state"),
        "lab_pod_network": "10.42.0.0/16",
        "lab_service_network": "10.43.0.0/16",
        "cluster_leftovers_cni_entries": [],
        "cluster_leftovers_cni_cache": str(tmp_path / "cni-results"),
        "cluster_leftovers_mount_dirs": [str(tmp_path / "kubelet")],
        "cluster_leftovers_netns": str(tmp_path / "netns" / "cni-"),
        **(extra or {}),
    }
    (tmp_path / "state").mkdir()
    rules.write_text(before)
    done = run_tasks("cluster_leftovers", "snapshot.yml", tmp_path / "install", variables, FAKES, environment)
    assert done.returncode == 0, done.stdout + done.stderr

    rules.write_text(after)
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    done = run_play(
        tmp_path / "reset", RESET_PLAY, inventory, {"lab_stack": "test", **variables}, FAKES, environment
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return restored.read_text().splitlines() if restored.exists() else after.splitlines()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounts, links and namespaces need root; CI runs as root"
)


@needs_root
def test_reset_keeps_the_rules_another_tool_had(tmp_path: Path) -> None:
    left = _rules_reset(tmp_path, OWNERS, WITH_THE_CLUSTER)
    assert [line for line in left if "KUBE-" in line or "FLANNEL" in line] == []
    owners = [line for line in OWNERS.splitlines() if "CNI-" in line and not line.startswith(":")]
    assert set(owners) <= set(left), "the owner's podman rules were removed"
    assert ":CNI-ADMIN - [3:180]" in left and ":CNI-FORWARD - [3:180]" in left
    assert left[0] == "*filter" and left[-1] == "COMMIT"


@needs_root
def test_reset_keeps_the_rules_another_tool_made_while_the_lab_ran(tmp_path: Path) -> None:
    """podman's network came after the install: its chains, its port forward through the portmap
    chains it shares with the cluster, and the owner's rule that mentions KUBE- all stay."""
    owners_filter = PLAIN_FILTER.replace("COMMIT", OWNER_FILTER_RULE + "COMMIT")
    after = _nat(CLUSTER_NAT_CHAINS + PODMAN_NAT_CHAINS, CLUSTER_NAT_RULES + PODMAN_NAT_RULES, owners_filter)
    left = _rules_reset(tmp_path, PLAIN, after)

    assert OWNER_FILTER_RULE.strip() in left
    podman = (PODMAN_NAT_CHAINS + PODMAN_NAT_RULES).splitlines()
    assert set(podman) <= set(left), f"podman's rules were removed: {set(podman) - set(left)}"
    # The shared portmap chains' own rules and the rules entering them from the built-in chains.
    builtin = ("-A PREROUTING ", "-A OUTPUT ", "-A POSTROUTING ")
    shared = [
        line
        for line in CLUSTER_NAT_RULES.splitlines()
        if (line.startswith("-A CNI-HOSTPORT-") and "cbr0" not in line)
        or (line.startswith(builtin) and " -j CNI-HOSTPORT-" in line)
    ]
    assert set(shared) <= set(left), "the portmap chains podman's port forward goes through were removed"
    gone = ["KUBE-", "FLANNEL", "cbr0", "CNI-DN-1a2b3c4d5e6f708192a3b"]
    cluster = [line for line in left if any(word in line for word in gone)]
    assert cluster == [OWNER_FILTER_RULE.strip()]


@needs_root
def test_reset_removes_the_portmap_chains_when_only_the_cluster_used_them(tmp_path: Path) -> None:
    left = _rules_reset(tmp_path, PLAIN, _nat(CLUSTER_NAT_CHAINS, CLUSTER_NAT_RULES))
    assert left == PLAIN.splitlines()


# Mounts, namespaces and links, planted in a private mount and network namespace.

PLANT = r"""
set -e
cd "$LAB_TEST_DIR"
# /sys as this network namespace sees it (Ansible's interface facts read /sys/class/net).
mount -t sysfs sysfs /sys
kubelet=kubelet k3s=k3s netns=netns
pod=$kubelet/pods/0d1c-uid
mkdir -p $pod/volumes/kubernetes.io~projected/kube-api-access-x $pod/volumes/kubernetes.io~nfs/pv-data \
  $k3s/task/k8s.io/c1/rootfs $k3s/sandboxes/s1/shm $k3s/lower $k3s/upper $k3s/work \
  "$kubelet/pods/with space" owner/kubelet-keep $kubelet-old/pods $netns
mount -t tmpfs tmpfs $pod/volumes/kubernetes.io~projected/kube-api-access-x
mount -t tmpfs 10.77.0.11:/srv/k8scifar $pod/volumes/kubernetes.io~nfs/pv-data
mount -t overlay overlay -o lowerdir=$k3s/lower,upperdir=$k3s/upper,workdir=$k3s/work \
  $k3s/task/k8s.io/c1/rootfs
mount -t tmpfs shm $k3s/sandboxes/s1/shm
mount -t tmpfs shm $k3s/sandboxes/s1/shm
mount -t tmpfs tmpfs "$kubelet/pods/with space"
mount -t tmpfs tmpfs $kubelet-old/pods
mount -t tmpfs tmpfs owner/kubelet-keep
# A process still inside one of the pod's volumes, as a container's working directory.
(cd $pod/volumes/kubernetes.io~projected/kube-api-access-x && exec sleep 300) &
echo $! > busy.pid
# A dead pod's network namespace, and one a live process is in (podman's, say).
touch $netns/cni-dead $netns/cni-alive
unshare --net=$netns/cni-dead true
unshare --net sleep 300 &
echo $! > alive.pid
sleep 0.2
mount --bind /proc/$(cat alive.pid)/ns/net $netns/cni-alive
# flannel's links with the node's pod subnet, and the owner's bridge of another network.
# cni0 is flannel's (the node's pod subnet) or another CNI user's of the same default name.
ip link add cni0 type bridge && ip address add "$CNI0_ADDRESS" dev cni0
ip link add flannel.1 type vxlan id 1 dstport 8472 && ip address add 10.42.0.0/32 dev flannel.1
ip link add br-owner type bridge && ip address add 10.42.9.1/24 dev br-owner
"""
AFTER = r"""
rc=$?
cd "$LAB_TEST_DIR"
cat /proc/self/mounts > mounts-after
ip -o link show > links-after
ls netns > netns-after
kill $(cat busy.pid alive.pid) 2>/dev/null
exit $rc
"""


def _in_namespaces(tmp_path: Path, cni0_address: str) -> None:
    """The role, run after PLANT in private namespaces; AFTER leaves what is left in tmp_path."""
    script = f'{PLANT}\n"$@"\n{AFTER}'
    prefix = ["unshare", "--mount", "--net", "--propagation", "private", "--", "sh", "-c", script, "sh"]
    environment = {
        "LAB_TEST_DIR": str(tmp_path),
        "CNI0_ADDRESS": cni0_address,
        "LAB_TEST_RULES": "/dev/null",
        "LAB_TEST_RESTORED": "/dev/null",
    }
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    variables = {
        "lab_stack": "test",
        "lab_state_dir": str(tmp_path / "state"),
        "lab_pod_network": "10.42.0.0/16",
        "lab_service_network": "10.43.0.0/16",
        "cluster_leftovers_mount_dirs": [str(tmp_path / "kubelet"), str(tmp_path / "k3s")],
        "cluster_leftovers_netns": str(tmp_path / "netns" / "cni-"),
        "cluster_leftovers_cni_entries": [],
        "cluster_leftovers_cni_cache": str(tmp_path / "cni-results"),
    }
    done = run_play(tmp_path / "reset", RESET_PLAY, inventory, variables, FAKES, environment, prefix=prefix)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _mount_points(tmp_path: Path) -> list[str]:
    return [
        line.split()[1].replace("\\040", " ") for line in (tmp_path / "mounts-after").read_text().splitlines()
    ]


def _links(tmp_path: Path) -> list[str]:
    return [
        line.split(":")[1].strip().split("@")[0]
        for line in (tmp_path / "links-after").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def reset_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One reset of a node whose cni0 is flannel's: mounts, namespaces and links are left by the
    same run, so the tests of each read its results instead of running the role again."""
    folder = tmp_path_factory.mktemp("reset-node")
    _in_namespaces(folder, cni0_address="10.42.0.1/24")
    return folder


@needs_root
def test_reset_unmounts_what_pods_mounted_and_leaves_the_owners(reset_node: Path) -> None:
    """Every mount below the cluster's directories goes, tmpfs, overlay, NFS, stacked and busy ones
    and one with a space in its path included; a sibling directory's and the owner's stay."""
    points = _mount_points(reset_node)
    cluster = [p for p in points if p.startswith((f"{reset_node}/kubelet/", f"{reset_node}/k3s/"))]
    assert cluster == [], f"still mounted: {cluster}"
    assert f"{reset_node}/kubelet-old/pods" in points and f"{reset_node}/owner/kubelet-keep" in points


@needs_root
def test_reset_removes_dead_pod_namespaces_and_leaves_live_ones(reset_node: Path) -> None:
    assert (reset_node / "netns-after").read_text().split() == ["cni-alive"]
    assert f"{reset_node}/netns/cni-alive" in _mount_points(reset_node)


@needs_root
def test_reset_deletes_the_cluster_network_links(reset_node: Path) -> None:
    links = _links(reset_node)
    assert "cni0" not in links and "flannel.1" not in links
    assert "br-owner" in links, "a link of another name was deleted for its address"


@needs_root
def test_reset_leaves_a_cni0_of_another_network(tmp_path: Path) -> None:
    """The CNI bridge plugin's default bridge name is cni0 for any network that names none."""
    _in_namespaces(tmp_path, cni0_address="10.88.0.1/16")
    links = _links(tmp_path)
    assert "cni0" in links and "flannel.1" not in links


def test_the_cgroupfs_drivers_pod_cgroups_go_and_systemds_slice_is_left_to_systemd(tmp_path: Path) -> None:
    """After a kubelet with the cgroupfs driver, `kubepods` stays in every hierarchy (kubeadm
    reset leaves it), which a kubelet started later would find as its own."""
    sys.path.insert(0, str(ANSIBLE_DIR / "roles" / "cluster_leftovers" / "library"))
    from cluster_pods import remove_cgroupfs_pods

    for tree in ("cpu/kubepods/burstable/pod1", "memory/kubepods/besteffort", "kubepods/pod2"):
        (tmp_path / tree).mkdir(parents=True)
    (tmp_path / "systemd/kubepods.slice/kubepods-pod3.slice").mkdir(parents=True)
    (tmp_path / "cpu/owner").mkdir()
    removed = remove_cgroupfs_pods(str(tmp_path))
    expected = ("kubepods", "cpu/kubepods", "memory/kubepods")
    assert sorted(removed) == sorted(str(tmp_path / t) for t in expected)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["cpu", "cpu/owner", "memory", "systemd", "systemd/kubepods.slice",
                    "systemd/kubepods.slice/kubepods-pod3.slice"]  # fmt: skip
