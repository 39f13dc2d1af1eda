"""The pod network of a kubeadm cluster on the test machines: the reference CNI plugins, routed.

A user's kubeadm cluster runs flannel from its release manifest (ansible/roles/kubeadm, the
flannel tasks). That manifest and flannel's images are not among the pinned tools, and a copy of
upstream's manifest may not live in this repository, so the test machines carry a pod network
of their own instead: the CNI `bridge` plugin with `host-local` addresses from one /24 of the
kubeadm pod network per machine, and a route on every machine to every other machine's /24.
Nothing here is a cluster's to remove: the bridge, its gateway address and the routes are made
with the machine and gone with its namespace, so `reset.yml` leaves them as they were before.

Machine N holds the Nth /24, and the routes follow that, so pods reach each other whatever the
cluster thinks. kubeadm's node IPAM hands the /24s out in the order nodes register
(pkg/controller/nodeipam/ipam/range_allocator.go, the next free CIDR) and writes them to each
Node's `spec.podCIDR`: with two machines the server registers at `kubeadm init`, before the one
join, so the two agree; with more, the agents join at once and their `spec.podCIDR` may name
another machine's /24 (nothing in this network reads it).
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from lab.config.facts import CLUSTER_NETWORKS
from lab.testbed.commands import run
from lab.testbed.layout import Layout, Machine
from lab.testbed.network import GUEST_LINK

POD_NETWORK, SERVICE_NETWORK = (ipaddress.IPv4Network(n) for n in CLUSTER_NETWORKS["kubeadm"])
NODE_PREFIX = 24
BRIDGE = "k8c-pods"
# host-local keeps its leases under /var/lib/cni/networks/<network name>; the name the kubeadm
# role's reset already clears (roles/cluster_leftovers, cluster_leftovers_cni_network).
NETWORK_NAME = "cbr0"
# Before flannel's 10-flannel.conflist in containerd's lexical order, were one ever written.
CONFIG = Path("etc/cni/net.d/05-testbed.conflist")


def pod_subnet(layout: Layout, machine: Machine) -> ipaddress.IPv4Network:
    index = layout.machines.index(machine)
    return list(POD_NETWORK.subnets(new_prefix=NODE_PREFIX))[index]


def conflist(subnet: ipaddress.IPv4Network) -> str:
    """The CNI configuration of a machine whose pods take addresses from `subnet`."""
    config = {
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "hairpinMode": True,  # a pod reaching its own Service lands back on its port
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(subnet)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def install(layout: Layout, machine: Machine) -> None:
    """Write the machine's CNI configuration into its tree (before it boots)."""
    path = machine.root / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(conflist(pod_subnet(layout, machine)))


def route(layout: Layout) -> None:
    """Forwarding, the pod bridges and the routes between machines, in each machine's namespace."""
    for machine in layout.machines:
        inside = ["ip", "-n", machine.netns]
        gateway = pod_subnet(layout, machine).network_address + 1
        # /proc/sys is read-only inside the machine; the namespace's own setting is the host's to set.
        run(["ip", "netns", "exec", machine.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        run([*inside, "link", "add", BRIDGE, "type", "bridge"])
        run([*inside, "addr", "add", f"{gateway}/{NODE_PREFIX}", "dev", BRIDGE])
        run([*inside, "link", "set", BRIDGE, "up"])
        # Services' virtual addresses are rewritten by kube-proxy after the route lookup, which
        # fails first on a machine without a default route.
        run([*inside, "route", "add", str(SERVICE_NETWORK), "dev", GUEST_LINK])
        for other in layout.machines:
            if other != machine:
                run([*inside, "route", "add", str(pod_subnet(layout, other)), "via", other.address])
