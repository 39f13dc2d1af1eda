"""What reaches a pod behind a NodePort Service, and whether k3s's policy controller lets it in, restated
from the code that decides it.

1. kube-proxy, iptables mode (kubernetes pkg/proxy/iptables/proxier.go `syncProxyRules`): a
   connection to `<address>:<nodePort>` is handled on the machine that owns `<address>`
   (`KUBE-SERVICES` jumps to `KUBE-NODEPORTS` only with `-m addrtype --dst-type LOCAL`), through
   the Service's `KUBE-EXT-` chain:
   - `externalTrafficPolicy: Cluster`: "masquerade traffic for ... external destinations", every
     connection, then any endpoint;
   - `Local`: traffic from the pod network goes to any endpoint unchanged; traffic whose source is
     an address of this machine (`--src-type LOCAL`) is masqueraded ("masquerade LOCAL traffic
     for ... external destinations") and goes to any endpoint; anything else goes to this
     machine's own endpoints only (`KUBE-SVL-`), its source kept, and is dropped where there are
     none.
   Masquerading gives the connection the address of the interface it leaves by: towards a pod of
   the same machine, its pod bridge, whose address is the gateway of the machine's pod subnet.
2. kube-router's network policy controller, which k3s embeds (cloudnativelabs/kube-router
   pkg/controllers/netpol/pod.go `setupPodNetpolRules`): every pod's chain first accepts a packet
   whose source is an address of the pod's own machine ("rule to permit the traffic to pods when
   source is the pod's local node", `-m addrtype --src-type LOCAL -j ACCEPT`), then applies the
   NetworkPolicies that select the pod; with none admitting the packet it is rejected.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LOCAL_NODE = "kube-router's rule for the pod's own machine"
POLICY = "a NetworkPolicy"


@dataclass(frozen=True)
class Machine:
    name: str
    address: str  # the address the lab knows it by
    bridge: str  # its pod bridge's address (the gateway of its pod subnet)

    @property
    def local(self) -> frozenset[str]:
        """The addresses `--src-type LOCAL` matches on this machine."""
        return frozenset({self.address, self.bridge, "127.0.0.1"})


def delivered_source(
    client: str,
    receiving: Machine,
    endpoint: Machine,
    traffic_policy: str,
    pod_network: str,
) -> str | None:
    """The source address the endpoint pod sees for a connection from `client` to the NodePort on
    `receiving`'s address, or None where kube-proxy drops it (rule 1)."""
    towards_endpoint = receiving.bridge if endpoint == receiving else receiving.address
    if traffic_policy != "Local":
        return towards_endpoint  # masqueraded, whatever its source
    if ipaddress.ip_address(client) in ipaddress.ip_network(pod_network):
        return client
    if client in receiving.local:
        return towards_endpoint
    return client if endpoint == receiving else None


def _in_block(address: str, block: Mapping[str, Any]) -> bool:
    ip = ipaddress.ip_address(address)
    if ip not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(ip in ipaddress.ip_network(cidr) for cidr in block.get("except", []))


def admitted_by(
    source: str, pod_machine: Machine, ingress: Iterable[Mapping[str, Any]], port: int
) -> str | None:
    """Which rule lets a TCP packet from `source` to `port` into a pod on `pod_machine` whose
    policies admit `ingress` (NetworkPolicy ingress rules), or None where it is rejected (rule 2).
    Peers other than ipBlocks (pods, namespaces) never match a node's address."""
    if source in pod_machine.local:
        return LOCAL_NODE
    for rule in ingress:
        ports = rule.get("ports") or [{}]
        if not any(p.get("port") in (None, port) and p.get("protocol", "TCP") == "TCP" for p in ports):
            continue
        peers = rule.get("from") or []
        if not peers or any("ipBlock" in peer and _in_block(source, peer["ipBlock"]) for peer in peers):
            return POLICY
    return None
