"""The test machines' own pod network, checked against what the kubeadm role's reset removes."""

from __future__ import annotations

import ipaddress
import json

import yaml

from lab.paths import ROOT
from lab.testbed import pod_network
from lab.testbed.layout import Layout

LEFTOVERS = yaml.safe_load((ROOT / "ansible/roles/cluster_leftovers/defaults/main.yml").read_text())


def test_each_machine_takes_its_own_slice_of_the_kubeadm_pod_network() -> None:
    layout = Layout("lab", 3, "10.77.0.0/24")
    subnets = [pod_network.pod_subnet(layout, m) for m in layout.machines]
    assert [str(s) for s in subnets] == ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]
    for machine, subnet in zip(layout.machines, subnets, strict=True):
        plugins = json.loads(pod_network.conflist(subnet))["plugins"]
        ranges = plugins[0]["ipam"]["ranges"]
        assert ranges == [[{"subnet": str(subnet)}]], machine.name
        assert ipaddress.ip_network(ranges[0][0]["subnet"]).subnet_of(pod_network.POD_NETWORK)


def test_reset_clears_the_networks_leases_and_keeps_its_bridge() -> None:
    """host-local's leases and libcni's cache are the cluster's (reset removes them by this network
    name); the bridge and its address are the machine's, made before any cluster, so reset's
    link clean-up must not know its name."""
    assert (
        json.loads(pod_network.conflist(pod_network.POD_NETWORK))["name"]
        == LEFTOVERS["cluster_leftovers_cni_network"]
    )
    assert pod_network.BRIDGE not in LEFTOVERS["cluster_leftovers_links"]
    assert len(pod_network.BRIDGE) <= 15  # Linux's limit on a link name
