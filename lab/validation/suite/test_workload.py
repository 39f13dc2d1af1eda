"""Checks of the lab's workload in its cluster, through kubectl on the server node: what `pulumi up`
declares there (its claims, the registry, the training ranks)."""

from __future__ import annotations

from typing import Any

from lab.cluster import registry, training
from lab.cluster.labels import pod_selector
from lab.config import LabConfig
from lab.validation.suite import checks
from lab.validation.suite.conftest import Kubectl


def test_claims_are_bound(kubectl: Kubectl, lab: LabConfig) -> None:
    checks.require(checks.claim_problems(kubectl.get("pvc", "-n", lab.namespace)))


def test_registry_answers(host: Any, kubectl: Kubectl, lab: LabConfig) -> None:
    selector = pod_selector(lab.namespace, registry.APP, registry.COMPONENT)
    pods = kubectl.get("pods", "-n", lab.namespace, "-l", selector)
    checks.require(checks.pod_problems(pods, 1, "registry"))
    url = f"http://{lab.registry_endpoint}/v2/"
    status = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' {url}").stdout
    assert status == "200", f"{url} answered {status or 'nothing'}"


def test_training_ranks_run_and_formed_their_group(kubectl: Kubectl, lab: LabConfig) -> None:
    selector = pod_selector(lab.namespace, training.APP, training.COMPONENT)
    pods = kubectl.get("pods", "-n", lab.namespace, "-l", selector)
    checks.require(checks.training_pod_problems(pods, lab.world))
    logs = kubectl.run(f"logs -n {lab.namespace} -l {selector} --tail=-1 --max-log-requests={lab.world.pods}")
    checks.require(checks.group_problems(logs.stdout))
