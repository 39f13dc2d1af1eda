"""Seam: the nodes' image pulls through the registry's NodePort against kube-proxy and k3s's policy
controller (tests/seams/node_port_rules.py restates both, with their sources).

Every node's container runtime pulls from `<server address>:<registry.port>` (the mirror the host
bootstrap writes, `LabConfig.registry_endpoint`); the registry pod runs on the server; the
`registry-pull` NetworkPolicy admits the nodes' addresses. Which rule admits which pull:

- another node's pull reaches the pod with its own address, because `externalTrafficPolicy:
  Local` keeps it, and the NetworkPolicy admits that address;
- the server's own pull is masqueraded to its pod bridge's address (kube-proxy masquerades
  traffic from the machine itself) and passes by kube-router's rule for the pod's own machine,
  not by the NetworkPolicy;
- any other host of the network is refused: with `Cluster` its pull would be masqueraded to the
  server's bridge and pass by that same rule, so the policy would guard nothing.

Both sides as the program declares them (the Service, the Deployment's node, the policy),
recorded under the engine's mocks. k3s stacks only: the kubeadm role's bare flannel enforces no
NetworkPolicy (docs/cluster.md).
"""

from __future__ import annotations

import copy
import ipaddress

import pytest

from lab.cluster.registry import PULL_PORT, PULL_SERVICE
from lab.config import CLUSTER_NETWORKS, Distribution, LabConfig, load_stack
from tests.support.program import ProgramRun, Registered, cluster_stacks, name_of, pod_spec, recorded
from tests.support.rules.node_port_rules import LOCAL_NODE, POLICY, Machine, admitted_by, delivered_source

K3S_STACKS = [s for s in cluster_stacks() if load_stack(s).distribution is Distribution.K3S]


def _named(run: ProgramRun, kind: str, name: str) -> Registered:
    (found,) = [r for r in run.of_kind(kind) if name_of(r) == name]
    return found


def machines(lab: LabConfig) -> dict[str, Machine]:
    """Each node, with a pod bridge on its own subnet of the pod network (the gateway address)."""
    pod_network = ipaddress.ip_network(CLUSTER_NETWORKS[lab.distribution.value][0])
    subnets = pod_network.subnets(new_prefix=24)
    return {n.name: Machine(n.name, n.address, str(next(subnets)[1])) for n in lab.nodes}


def stranger(lab: LabConfig) -> str:
    """A host of the server's network that is no node."""
    taken = {n.address for n in lab.nodes}
    network = ipaddress.ip_network(f"{lab.server.address}/24", strict=False)
    return next(str(a) for a in network.hosts() if str(a) not in taken)


def pulls(run: ProgramRun, lab: LabConfig) -> dict[str, str | None]:
    """Client -> the rule that lets its pull of the registry endpoint in (None: refused), for every
    node and one other host of the network."""
    service = _named(run, "Service", PULL_SERVICE)
    spec = service.inputs["spec"]
    policy = _named(run, "NetworkPolicy", "registry-pull").inputs["spec"]
    registry = _named(run, "Deployment", "registry")
    on = machines(lab)
    pod_machine = on[pod_spec(registry)["nodeSelector"]["kubernetes.io/hostname"]]
    host, port = lab.registry_endpoint.rsplit(":", 1)
    assert int(port) in {p["nodePort"] for p in spec["ports"]}, "the nodes pull from the Service's NodePort"
    receiving = next(m for m in on.values() if m.address == host)
    pod_network = CLUSTER_NETWORKS[lab.distribution.value][0]
    policy_type = spec.get("externalTrafficPolicy", "Cluster")
    outcome = {}
    for client in [*(n.address for n in lab.nodes), stranger(lab)]:
        source = delivered_source(client, receiving, pod_machine, policy_type, pod_network)
        outcome[client] = (
            None if source is None else admitted_by(source, pod_machine, policy["ingress"], PULL_PORT)
        )
    return outcome


def expected(lab: LabConfig) -> dict[str, str | None]:
    registry_node = lab.server.address
    nodes = {n.address: LOCAL_NODE if n.address == registry_node else POLICY for n in lab.nodes}
    return {**nodes, stranger(lab): None}


def test_k3s_stacks_ship() -> None:
    assert K3S_STACKS


@pytest.mark.parametrize("stack", K3S_STACKS)
def test_every_node_pulls_and_no_other_host_does(stack: str) -> None:
    lab = load_stack(stack)
    assert pulls(recorded(stack), lab) == expected(lab)


def test_a_cluster_traffic_policy_lets_every_host_pull() -> None:
    """The rule the row names: with `Cluster` kube-proxy masquerades every pull to the server's own
    bridge, which kube-router's local rule admits: the policy's node list decides nothing."""
    run, lab = copy.deepcopy(recorded("example-cpu")), load_stack("example-cpu")
    _named(run, "Service", PULL_SERVICE).inputs["spec"]["externalTrafficPolicy"] = "Cluster"
    outcome = pulls(run, lab)
    assert outcome[stranger(lab)] == LOCAL_NODE
    assert set(outcome.values()) == {LOCAL_NODE}


def test_a_policy_without_the_agents_refuses_their_pulls() -> None:
    """Another node's pull passes by the policy alone: take its address out and it is refused, while
    the server's own pull still passes by kube-router's local rule."""
    run, lab = copy.deepcopy(recorded("example-cpu")), load_stack("example-cpu")
    ingress = _named(run, "NetworkPolicy", "registry-pull").inputs["spec"]["ingress"]
    for rule in ingress:
        rule["from"] = [p for p in rule["from"] if p["ipBlock"]["cidr"] == f"{lab.server.address}/32"]
    outcome = pulls(run, lab)
    assert outcome[lab.server.address] == LOCAL_NODE
    assert all(outcome[n.address] is None for n in lab.nodes if n.address != lab.server.address)
