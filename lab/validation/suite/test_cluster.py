"""Checks of Kubernetes itself, as the bootstrap or the cluster's owner made it, through kubectl on
the server node: its nodes and its own pods. What `pulumi up` declares in it is test_workload.py's."""

from __future__ import annotations

from lab.config import LabConfig
from lab.config.facts import SYSTEM_NAMESPACE
from lab.validation.suite import checks
from lab.validation.suite.conftest import Kubectl


def test_configured_nodes_are_ready(kubectl: Kubectl, lab: LabConfig) -> None:
    checks.require(checks.node_problems(kubectl.get("nodes"), [n.name for n in lab.nodes]))


def test_system_pods_run(kubectl: Kubectl) -> None:
    checks.require(checks.system_pod_problems(kubectl.get("pods", "-n", SYSTEM_NAMESPACE)))
