"""Network policies: each lab namespace denies all traffic both ways, then admits the flows its pods need.

| pods | in | out |
| --- | --- | --- |
| ranks | other ranks: rendezvous, ephemeral ports (NCCL, Gloo); Prometheus: metrics | other ranks, DNS, API |
| sweep | nothing | nothing (one rank on its own loopback) |
| dataset | nothing | cluster DNS, the internet on 80/443 |
| registry `push` | build pods, port 5000 | nothing |
| registry `pull` | the nodes' addresses, port 5001 | nothing |
| image build | nothing | cluster DNS, the internet on 80/443, the registry's push port, the API server |
| device plugin | nothing | nothing (it speaks to the kubelet over a Unix socket) |

Ranks reach the API server because rank 0 scales its finished StatefulSet to zero.

The NFS volumes are mounted by each node's kernel on the kubelet's behalf, not from the pods'
network, so no pod needs a rule for NFS. "The internet" leaves out the private, shared and
link-local ranges (RFC 1918, RFC 6598, 169.254.0.0/16 with cloud metadata services, fc00::/7,
fe80::/10): the download and the build reach public mirrors, never the lab's own network or the
cluster. Ranks on the host network (`trainer.hostNetwork: true`) are outside any NetworkPolicy;
there the nodes' firewall applies. The policies need a CNI that enforces them: k3s's embedded
controller (kube-router) does; the bare flannel of the kubeadm role does not (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster import dataset, image, observability, registry, training
from lab.cluster.scope import Scope
from lab.config.facts import API_PORT, DNS_POD_LABELS, EPHEMERAL_PORTS, SYSTEM_NAMESPACE

APP = "k8scifar"
COMPONENT = "network-policy"
DNS_PORT = 53
WEB_PORTS = (80, 443)
NOT_INTERNET = {
    "0.0.0.0/0": [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "127.0.0.0/8",
    ],
    "::/0": ["fc00::/7", "fe80::/10", "::1/128"],
}
DNS_PODS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SYSTEM_NAMESPACE}},
    "podSelector": {"matchLabels": DNS_POD_LABELS},
}
BOTH = ["Ingress", "Egress"]


def _host(address: str) -> dict[str, Any]:
    return {"ipBlock": {"cidr": f"{address}/{128 if ':' in address else 32}"}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _trainer_ports(scope: Scope) -> list[dict[str, Any]]:
    low, high = EPHEMERAL_PORTS
    return [*_tcp(scope.lab.trainer.port), {"protocol": "TCP", "port": low, "endPort": high}]


def _dns() -> dict[str, Any]:
    return {"to": [DNS_PODS], "ports": [{"protocol": proto, "port": DNS_PORT} for proto in ("UDP", "TCP")]}


def _internet() -> dict[str, Any]:
    blocks = [{"ipBlock": {"cidr": cidr, "except": rest}} for cidr, rest in NOT_INTERNET.items()]
    return {"to": blocks, "ports": _tcp(*WEB_PORTS)}


def _pods(scope: Scope, app: str, component: str) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": scope.selector(app, component)}}


def _in_namespace(namespace: pulumi.Input[str], peer: dict[str, Any]) -> dict[str, Any]:
    selector = pulumi.Output.from_input(namespace).apply(
        lambda name: {"matchLabels": {"kubernetes.io/metadata.name": name}}
    )
    return {"namespaceSelector": selector, **peer}


def _policy(scope: Scope, name: str, spec: dict[str, Any]) -> k8s.networking.v1.NetworkPolicy:
    return k8s.networking.v1.NetworkPolicy(
        name, metadata=scope.metadata(name, APP, COMPONENT), spec=spec, opts=scope.opts()
    )


def _deny_all(scope: Scope, name: str) -> k8s.networking.v1.NetworkPolicy:
    return _policy(scope, name, {"podSelector": {}, "policyTypes": BOTH})


def _lab_policies(scope: Scope, build: Scope) -> list[pulumi.Resource]:
    ranks = _pods(scope, training.APP, training.COMPONENT)
    builds = _in_namespace(build.namespace, _pods(build, image.APP, image.COMPONENT))
    nodes = [_host(n.address) for n in scope.lab.nodes]
    registry_pods = _pods(scope, registry.APP, registry.COMPONENT)
    # The policy sees the API server's endpoint, the server node's address and port, once
    # kube-proxy has translated the `kubernetes` Service's address.
    api_server = {"to": [_host(scope.lab.server.address)], "ports": _tcp(API_PORT)}
    return [
        _deny_all(scope, "deny-all"),
        _policy(
            scope,
            "trainer-collectives",
            {
                **ranks,
                "policyTypes": BOTH,
                "ingress": [{"from": [ranks], "ports": _trainer_ports(scope)}],
                "egress": [{"to": [ranks], "ports": _trainer_ports(scope)}, _dns(), api_server],
            },
        ),
        *_metrics_policy(scope, ranks),
        _policy(
            scope,
            "dataset-download",
            {
                **_pods(scope, dataset.APP, dataset.COMPONENT),
                "policyTypes": ["Egress"],
                "egress": [_dns(), _internet()],
            },
        ),
        _policy(
            scope,
            "registry-push",
            {
                **registry_pods,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [builds], "ports": _tcp(registry.PORT)}],
            },
        ),
        _policy(
            scope,
            "registry-pull",
            {
                **registry_pods,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": nodes, "ports": _tcp(registry.PULL_PORT)}],
            },
        ),
    ]


def _metrics_policy(scope: Scope, ranks: dict[str, Any]) -> list[pulumi.Resource]:
    """Prometheus, and nothing else, may reach the ranks' metrics port."""
    if not scope.lab.observability.enabled:
        return []
    spec = {**ranks, "policyTypes": ["Ingress"], "ingress": [observability.metrics_ingress(scope)]}
    return [_policy(scope, "trainer-metrics", spec)]


def _build_policies(scope: Scope, build: Scope) -> list[pulumi.Resource]:
    registry_pods = _in_namespace(scope.namespace, _pods(scope, registry.APP, registry.COMPONENT))
    return [
        _deny_all(build, "build-deny-all"),
        _policy(
            build,
            "build-egress",
            {
                **_pods(build, image.APP, image.COMPONENT),
                "policyTypes": ["Egress"],
                "egress": [
                    _dns(),
                    _internet(),
                    {"to": [registry_pods], "ports": _tcp(registry.PORT)},
                    # The digest is recorded through the API (lab/cluster/digest_record.py).
                    {"to": [_host(scope.lab.server.address)], "ports": _tcp(API_PORT)},
                ],
            },
        ),
    ]


def declare_network_policies(scope: Scope, build: Scope, gpu: Scope | None) -> list[pulumi.Resource]:
    """The policies of the lab's namespace (`scope`), the build's and, on GPU labs, the device plugin's."""
    policies = [*_lab_policies(scope, build), *_build_policies(scope, build)]
    if gpu is not None:
        policies.append(_deny_all(gpu, "gpu-deny-all"))
    return policies
