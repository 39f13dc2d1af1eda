"""Network policies: the namespace is closed to incoming traffic except where the lab needs it.

- Trainer ranks reach each other on the rendezvous port and on the ephemeral ports NCCL and
  Gloo open for their collectives, and nothing else reaches them; they reach out to DNS and to
  the API server (rank 0 scales its finished StatefulSet to zero).
- The registry takes pushes and pulls on its port. Nodes pull through the NodePort, and
  kube-proxy may rewrite the source to a node or CNI gateway address, which no policy can
  list in advance: the port is open, everything else of the pod is not.
- Every other pod (dataset, build, sweep, device plugin) accepts no connection at all.
Ranks on the host network are outside any NetworkPolicy; docs/cluster.md says so.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster import registry, training
from lab.cluster.scope import Scope
from lab.kubeconfig import API_PORT

APP = "k8scifar"
COMPONENT = "network-policy"
# Linux's default ip_local_port_range: where NCCL's and Gloo's listening sockets are bound.
EPHEMERAL_PORTS = (32768, 60999)
DNS_PORT = 53


def _trainer_ports(scope: Scope) -> list[dict[str, Any]]:
    low, high = EPHEMERAL_PORTS
    return [
        {"protocol": "TCP", "port": scope.lab.trainer.port},
        {"protocol": "TCP", "port": low, "endPort": high},
    ]


def _policy(scope: Scope, name: str, spec: dict[str, Any]) -> k8s.networking.v1.NetworkPolicy:
    return k8s.networking.v1.NetworkPolicy(
        name, metadata=scope.metadata(name, APP, COMPONENT), spec=spec, opts=scope.opts()
    )


def declare_network_policies(scope: Scope) -> list[pulumi.Resource]:
    trainers = {"podSelector": {"matchLabels": scope.selector(training.APP, training.COMPONENT)}}
    dns = [{"protocol": proto, "port": DNS_PORT} for proto in ("UDP", "TCP")]
    # The policy sees the API server's endpoint, the server node's address and port, once
    # kube-proxy has translated the `kubernetes` Service's address.
    api_server = {
        "to": [{"ipBlock": {"cidr": str(ipaddress.ip_network(scope.lab.server.address))}}],
        "ports": [{"protocol": "TCP", "port": API_PORT}],
    }
    return [
        _policy(scope, "deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]}),
        _policy(
            scope,
            "trainer-collectives",
            {
                **trainers,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [trainers], "ports": _trainer_ports(scope)}],
                "egress": [{"to": [trainers], "ports": _trainer_ports(scope)}, {"ports": dns}, api_server],
            },
        ),
        _policy(
            scope,
            "registry-pulls",
            {
                "podSelector": {"matchLabels": scope.selector(registry.APP, registry.COMPONENT)},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": registry.PORT}]}],
            },
        ),
    ]
