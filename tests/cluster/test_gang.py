"""Gang scheduling under the engine's mocks: Kueue from its pinned chart, the lab's queue objects
(checked by hand against Kueue's API, tests/cluster/kueue_rules.py), the queue label on the
training StatefulSet and the sweep, and `scheduling.gang: none` declaring none of it.

What Kueue then does (admitting, gating pods, evicting a run whose ranks are not all Ready) runs
in a cluster only; none exists on these machines."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from lab.cluster.versions import KUEUE_CHART, KUEUE_VERSION
from lab.config import ConfigError, parse_config, read_stack_values, stack_file
from tests.support.program import (
    ProgramRun,
    Registered,
    cluster_stacks,
    kubernetes_object,
    kueue_releases,
    labels_of,
    name_of,
    recorded,
    run_program,
)
from tests.support.rules.cluster_rules import component
from tests.support.rules.kueue_rules import check_manager_config, check_object

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _custom(run: ProgramRun, kind: str) -> Registered:
    (found,) = [r for r in run.custom_objects() if r.kind == kind]
    return found


def _config(run: ProgramRun) -> dict[str, Any]:
    (release,) = kueue_releases(run)
    return yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])


@pytest.mark.parametrize("stack", cluster_stacks())
def test_kueue_comes_from_its_pinned_chart_and_admits_whole_runs(stack: str) -> None:
    run = recorded(stack)
    lab = parse_config(read_stack_values(stack_file(stack)))
    (release,) = kueue_releases(run)
    assert (release.inputs["chart"], release.inputs["version"]) == (KUEUE_CHART, KUEUE_VERSION)
    # Its namespace is the program's, so destroy removes it (tests/seams/test_kueue_awaits.py).
    (namespace,) = [n for n in run.of_kind("Namespace") if name_of(n) == "kueue-system"]
    assert release.inputs["namespace"] == "kueue-system" and not release.inputs.get("createNamespace")
    assert namespace.urn in release.dependencies
    config = _config(run)
    assert check_manager_config(config) == []
    assert config["waitForPodsReady"]["blockAdmission"] is True
    assert config["managedJobsNamespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": lab.namespace}
    }
    objects = [kubernetes_object(r) for r in run.custom_objects()]
    kinds = ["ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", "WorkloadPriorityClass"]
    kinds = sorted([*kinds, "Topology"]) if lab.packs_by_topology else kinds
    assert sorted(o["kind"] for o in objects) == kinds
    assert [p for o in objects for p in check_object(o)] == []
    for custom in run.custom_objects():
        assert release.urn in custom.dependencies, f"{custom.kind} before Kueue's CRDs exist"


@pytest.mark.parametrize("stack", cluster_stacks())
def test_the_queue_holds_a_whole_training_run_and_no_more_than_the_lab(stack: str) -> None:
    run = recorded(stack)
    lab = parse_config(read_stack_values(stack_file(stack)))
    flavor, cluster_queue, local = (_custom(run, k) for k in ("ResourceFlavor", "ClusterQueue", "LocalQueue"))
    assert local.inputs["spec"]["clusterQueue"] == cluster_queue.inputs["metadata"]["name"]
    spec = cluster_queue.inputs["spec"]
    assert spec["queueingStrategy"] == "StrictFIFO"  # a later sweep never overtakes a waiting run
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": lab.namespace}}
    (group,) = spec["resourceGroups"]
    (quota,) = group["flavors"]
    assert quota["name"] == flavor.inputs["metadata"]["name"]
    limits = {r["name"]: int(r["nominalQuota"]) for r in quota["resources"]}
    if lab.has_gpus:
        assert limits["nvidia.com/gpu"] == lab.total_gpus
    assert lab.replicas <= limits["pods"] <= max(lab.total_gpus or len(lab.nodes), lab.replicas)
    for workload in [*component(run, "training"), *component(run, "sweep")]:
        assert labels_of(workload)[QUEUE_LABEL] == local.inputs["metadata"]["name"]
        assert local.urn in workload.dependencies


def test_the_sweep_queues_behind_the_training_run() -> None:
    run = recorded("example-sweep")
    (sts,) = component(run, "training")
    (sweep,) = component(run, "sweep")
    assert sts.urn in sweep.dependencies


def test_gang_none_declares_no_scheduler_and_no_queue_label() -> None:
    values = {**read_stack_values(stack_file("example-sweep")), "scheduling": {"gang": "none"}}
    run = run_program("example-sweep", values)
    assert kueue_releases(run) == [] and run.custom_objects() == []
    for workload in [*component(run, "training"), *component(run, "sweep")]:
        assert QUEUE_LABEL not in labels_of(workload)


def test_the_default_follows_the_kubernetes_version_and_kueue_on_an_old_cluster_is_refused() -> None:
    values = read_stack_values(stack_file("example-cpu"))
    assert parse_config(values).gang_scheduler.value == "kueue"
    old = {**values, "kubernetesVersion": "1.28.15"}
    assert parse_config(old).gang_scheduler.value == "none"
    with pytest.raises(ConfigError) as caught:
        parse_config({**old, "scheduling": {"gang": "kueue"}})
    assert caught.value.problems == [
        "k8scifar:scheduling.gang: Kueue needs Kubernetes 1.29 or later and the lab runs 1.28.15;"
        " use none or a newer kubernetesVersion"
    ]


BROKEN: list[tuple[str, Any, str]] = [
    ("ClusterQueue", lambda s: s["resourceGroups"][0]["flavors"][0]["resources"].reverse(), "in order"),
    ("ClusterQueue", lambda s: s.update(queueingStrategy="Fifo"), "queueingStrategy"),
    ("ClusterQueue", lambda s: s.update(cohort="lab"), "unknown spec fields ['cohort']"),
    ("LocalQueue", lambda s: s.update(clusterQueue="Lab Queue"), "must name a ClusterQueue"),
]


@pytest.mark.parametrize(("kind", "breakage", "message"), BROKEN)
def test_the_hand_written_checks_catch_a_broken_object(kind: str, breakage: Any, message: str) -> None:
    obj = copy.deepcopy(kubernetes_object(_custom(recorded("example-gpu"), kind)))
    breakage(obj["spec"])
    assert any(message in p for p in check_object(obj)), check_object(obj)


def test_the_manager_config_check_catches_a_v1beta1_style_config() -> None:
    config = _config(recorded("example-gpu"))
    config["waitForPodsReady"]["enable"] = True  # v1beta1's switch; v1beta2 has none
    config["integrations"]["frameworks"].remove("pod")
    problems = check_manager_config(config)
    assert any("waitForPodsReady" in p for p in problems) and any("pod integration" in p for p in problems)


def test_on_a_kueue_already_there_only_the_lab_queue_objects_are_declared() -> None:
    values = read_stack_values(stack_file("example-gpu"))
    values["scheduling"] = {"gang": "kueue"}
    values["provides"] = {"kueue": True}
    run = run_program("example-gpu", values)
    assert kueue_releases(run) == []
    assert [n for n in run.of_kind("Namespace") if name_of(n) == "kueue-system"] == []
    objects = [kubernetes_object(r) for r in run.custom_objects()]
    assert sorted(o["kind"] for o in objects) == sorted(
        ["ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", "WorkloadPriorityClass"]
    )
    assert [p for o in objects for p in check_object(o)] == []
    local = _custom(run, "LocalQueue")
    for workload in component(run, "training"):
        assert labels_of(workload)[QUEUE_LABEL] == local.inputs["metadata"]["name"]
        assert local.urn in workload.dependencies


def test_kueue_installed_needs_kueue_as_the_gang_scheduler() -> None:
    values = {
        **read_stack_values(stack_file("example-cpu")),
        "scheduling": {"gang": "none"},
        "provides": {"kueue": True},
    }
    with pytest.raises(ConfigError, match=r"provides\.kueue: the lab's gang scheduler is none"):
        parse_config(values)
