"""Seams: Kueue, as the program configures and declares it, against `pulumi up`'s awaits, the lab's
other workloads, and `pulumi destroy`.

tests/support/rules/kueue_behaviour.py restates Kueue's rules (timeouts, preemption, webhooks) from its
source; the other sides are pulumi-kubernetes' awaits (the StatefulSet waits until its rollout
is ready, up to the resource's custom timeout) and Helm's install and uninstall actions. Every
input comes from the program's run under the engine's mocks: the manager configuration handed
to Kueue's chart, the custom timeouts, labels and dependencies of each object.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from lab.config import GangScheduler, load_stack
from tests.support.program import (
    ProgramRun,
    Registered,
    cluster_stacks,
    kueue_releases,
    labels_of,
    name_of,
    recorded,
)
from tests.support.program_objects import waits_for
from tests.support.rules.cluster_rules import component
from tests.support.rules.kueue_behaviour import may_preempt, pods_ready_timeouts, priority, seconds, selects

KUEUE_STACKS = [s for s in cluster_stacks() if load_stack(s).gang_scheduler is GangScheduler.KUEUE]
SWEEP_STACKS = [s for s in KUEUE_STACKS if load_stack(s).sweep is not None]
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet", "Pod"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server (SetDefaults_Namespace)


def _release(run: ProgramRun) -> Registered:
    (release,) = kueue_releases(run)
    return release


def _config(run: ProgramRun) -> dict[str, Any]:
    values = _release(run).inputs["values"]
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


def _custom(run: ProgramRun, kind: str) -> list[Registered]:
    return [r for r in run.custom_objects() if r.kind == kind]


# Timeouts.


def timeout_problems(run: ProgramRun) -> list[str]:
    """Kueue's PodsReady clocks must outlast `up`'s await of the ranks: then `up` reports a run
    that does not start with its pods as they stand, before Kueue evicts and re-gates them."""
    statefulset = run.one("StatefulSet")
    awaits = {seconds(t) for t in (statefulset.create_timeout, statefulset.update_timeout)}
    return [
        f"Kueue's {clock} ({limit / 60:g} min) runs out before `up`'s await of the ranks ({wait / 60:g} min)"
        for clock, limit in pods_ready_timeouts(_config(run)).items()
        for wait in sorted(awaits)
        if limit <= wait
    ]


@pytest.mark.parametrize("stack", KUEUE_STACKS)
def test_kueue_evicts_a_slow_run_only_after_up_has_reported_it(stack: str) -> None:
    assert timeout_problems(recorded(stack)) == []


def test_the_timeout_check_catches_kueues_old_ten_minutes() -> None:
    run = copy.deepcopy(recorded("example-gpu"))
    config = _config(run)
    config["waitForPodsReady"] = {"timeout": "10m", "blockAdmission": True}
    _release(run).inputs["values"]["managerConfig"]["controllerManagerConfigYaml"] = yaml.safe_dump(config)
    assert timeout_problems(run) == [
        "Kueue's timeout (10 min) runs out before `up`'s await of the ranks (15 min)",
        "Kueue's recoveryTimeout (10 min) runs out before `up`'s await of the ranks (15 min)",
    ]


# A new run against a running sweep.


def preemption_problems(run: ProgramRun) -> list[str]:
    """A run declared while the lab's sweep holds the quota must evict the sweep, not wait behind it
    for as long as the sweep runs while `up` waits 15 minutes; and never the other way round."""
    classes = {name_of(c): int(c.inputs["value"]) for c in _custom(run, "WorkloadPriorityClass")}
    (cluster_queue,) = _custom(run, "ClusterQueue")
    policy = cluster_queue.inputs["spec"].get("preemption", {})
    (run_sts,) = component(run, "training")
    (sweep,) = component(run, "sweep")
    ranks, sets = priority(labels_of(run_sts), classes), priority(labels_of(sweep), classes)
    problems = []
    if not may_preempt(policy, pending=ranks, admitted=sets, pending_is_newer=True):
        problems.append(f"a new run (priority {ranks}) waits behind a running sweep (priority {sets})")
    if may_preempt(policy, pending=sets, admitted=ranks, pending_is_newer=True):
        problems.append("a sweep would evict a running training run")
    return problems


@pytest.mark.parametrize("stack", SWEEP_STACKS)
def test_a_new_run_does_not_queue_behind_a_running_sweep(stack: str) -> None:
    assert preemption_problems(recorded(stack)) == []


def test_the_preemption_check_catches_a_queue_that_never_preempts() -> None:
    run = copy.deepcopy(recorded(SWEEP_STACKS[0]))
    (cluster_queue,) = _custom(run, "ClusterQueue")
    del cluster_queue.inputs["spec"]["preemption"]
    assert preemption_problems(run) == ["a new run (priority 100) waits behind a running sweep (priority 10)"]


# Kueue's webhooks and the lab's other pods.


def webhook_problems(run: ProgramRun) -> list[str]:
    """Every workload whose pods Kueue's fail-closed webhooks see must be created after Kueue serves,
    i.e. after the Helm release, whose await ends once Kueue's Deployment is available."""
    selector = _config(run)["managedJobsNamespaceSelector"]
    namespaces = {
        name_of(n): {**labels_of(n), NAMESPACE_NAME_LABEL: name_of(n)} for n in run.of_kind("Namespace")
    }
    release = _release(run)
    return [
        f"{w.kind} {name_of(w)} may be created before Kueue's webhooks answer"
        for w in run.kubernetes_objects()
        if w.kind in WORKLOAD_KINDS
        if selects(selector, namespaces.get(w.inputs["metadata"].get("namespace", ""), {}))
        if not waits_for(run, w, release.urn)
    ]


@pytest.mark.parametrize("stack", KUEUE_STACKS)
def test_every_pod_kueues_webhooks_see_waits_for_kueue(stack: str) -> None:
    run = recorded(stack)
    assert webhook_problems(run) == []
    assert any(w.kind == "Deployment" for w in run.kubernetes_objects())  # the registry is among them


def test_the_webhook_check_catches_a_registry_declared_beside_kueue() -> None:
    run = copy.deepcopy(recorded("example-cpu"))
    registry = next(r for r in run.of_kind("Deployment") if name_of(r) == "registry")
    registry.dependencies = []
    assert webhook_problems(run) == ["Deployment registry may be created before Kueue's webhooks answer"]


def test_the_selector_rule_reads_expressions() -> None:
    not_system = {"matchExpressions": [{"key": "n", "operator": "NotIn", "values": ["kube-system"]}]}
    assert selects(not_system, {"n": "lab"}) and not selects(not_system, {"n": "kube-system"})
    assert selects({"matchLabels": {"n": "lab"}}, {"n": "lab"}) and not selects(
        {"matchLabels": {"n": "lab"}}, {}
    )


# Destroy.


def namespace_problems(run: ProgramRun) -> list[str]:
    """Helm's install action creates a release's namespace on its own when asked to
    (pkg/action/install.go, CreateNamespace), outside the release's manifest, which is all that
    uninstall deletes (pkg/action/uninstall.go): a namespace left to Helm outlives `destroy`."""
    declared = {name_of(n): n for n in run.of_kind("Namespace")}
    problems = []
    for release in run.helm_releases():
        namespace = release.inputs.get("namespace", "default")
        if release.inputs.get("createNamespace"):
            problems.append(f"Helm creates {namespace} for {name_of(release)}; destroy would leave it")
        elif namespace not in declared or declared[namespace].urn not in release.dependencies:
            problems.append(
                f"{name_of(release)} installs into {namespace}, which the program does not declare first"
            )
    return problems


@pytest.mark.parametrize("stack", KUEUE_STACKS)
def test_destroy_removes_the_namespace_kueue_runs_in(stack: str) -> None:
    assert namespace_problems(recorded(stack)) == []


def test_the_namespace_check_catches_a_namespace_left_to_helm() -> None:
    run = copy.deepcopy(recorded("example-cpu"))
    _release(run).inputs["createNamespace"] = True
    assert namespace_problems(run) == ["Helm creates kueue-system for kueue; destroy would leave it"]


def test_stacks_with_kueue_and_a_sweep_ship() -> None:
    assert KUEUE_STACKS and SWEEP_STACKS, (
        "no shipped stack runs Kueue with a sweep: these seams would go unchecked"
    )
