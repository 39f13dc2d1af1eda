"""Seam: the training StatefulSet's pod template against the API server's defaulting and the
scheduler's NodePorts filter (tests/support/rules/kube_rules.py restates both from kubernetes).

With `placement: pack` every rank must land on one node. On the host network the API server
turns each container port into a host port of the same number, and the scheduler places no two
pods with one host port on a node: the second rank of a packed host-network run would never
schedule. The ranks' pods are built as the StatefulSet controller builds them (one per replica
from the template the program declares), defaulted, and placed the way the stack's placement
requires.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.config import Placement, load_stack
from tests.support.program import cluster_stacks, pod_spec, recorded
from tests.support.rules.kube_rules import admitted_pod, host_ports, port_conflicts


def ranks_on_one_node(template: dict[str, Any], replicas: int, placement: Placement) -> list[str]:
    """Host-port conflicts among the ranks that `placement` puts on one node: every rank with
    pack, one with spread (its anti-affinity keeps the others away)."""
    sharing = replicas if placement is Placement.PACK else 1
    used: list[tuple[str, str, int]] = []
    problems = []
    for rank in range(sharing):
        wanted = host_ports(admitted_pod(template))
        problems += [f"rank {rank}: {c} is taken" for c in port_conflicts(used, wanted)]
        used += wanted
    return problems


@pytest.mark.parametrize("stack", cluster_stacks())
def test_the_ranks_a_placement_puts_on_one_node_fit_there(stack: str) -> None:
    lab = load_stack(stack)
    statefulset = recorded(stack).one("StatefulSet")
    assert ranks_on_one_node(pod_spec(statefulset), lab.replicas, lab.trainer.placement) == []


def test_a_packed_host_network_stack_ships() -> None:
    packed = [
        s
        for s in cluster_stacks()
        if load_stack(s).trainer.host_network and load_stack(s).trainer.placement is Placement.PACK
    ]
    assert packed, "no shipped stack packs host-network ranks: this seam would go unchecked"


def test_a_declared_container_port_on_the_host_network_keeps_the_second_rank_off_the_node() -> None:
    """The defect this seam had: the ranks declared the rendezvous port as a container port."""
    lab = load_stack("example-kubeadm")
    template = copy.deepcopy(pod_spec(recorded("example-kubeadm").one("StatefulSet")))
    template["containers"][0]["ports"] = [{"name": "rendezvous", "containerPort": lab.trainer.port}]
    assert ranks_on_one_node(template, lab.replicas, lab.trainer.placement) == [
        f"rank 1: TCP/{lab.trainer.port} on 0.0.0.0 is taken"
    ]
    template["hostNetwork"] = False  # on the pod network nothing is defaulted: no clash
    assert ranks_on_one_node(template, lab.replicas, lab.trainer.placement) == []
