"""The `observability` block: the monitoring stack from pinned charts, on by default, off with one key,
within its budget, its host-needing exporters apart from the `restricted` namespaces."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lab.cluster import observability
from lab.cluster.observability import BUDGET, SIZES
from lab.cluster.versions import (
    DCGM_EXPORTER_VERSION,
    GRAFANA_VERSION,
    KUEUE_CHART,
    NODE_EXPORTER_VERSION,
    PROMETHEUS_VERSION,
)
from lab.config import parse_config, read_stack_values, stack_file
from tests.program.harness import cluster_stacks, labels_of, name_of, recorded, run_program
from tests.program.test_cluster_consistency import component

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
UNITS = {"m": Decimal("0.001"), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "": Decimal(1)}


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity in the units this module writes (m, Mi, Gi, plain)."""
    for suffix in ("Mi", "Gi", "m"):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * UNITS[suffix]
    return Decimal(text)


def over_budget(sizes: dict, budget: dict[str, str], gpus: bool) -> list[str]:
    """What the server node holds at most: every container of the stack (one node carries all of
    it on a one-node lab), against BUDGET."""
    names = ["prometheus", "config-reload", "grafana", "node-exporter", *(["dcgm-exporter"] if gpus else [])]
    problems = []
    for resource in ("cpu", "memory"):
        total = sum(quantity(sizes[n].resources()["limits"][resource]) for n in names)
        if total > quantity(budget[resource]):
            problems.append(f"{resource}: limits add up to {total}, over the budget {budget[resource]}")
    return problems


@pytest.mark.parametrize("stack", cluster_stacks())
def test_every_lab_installs_the_stack_from_pinned_charts(stack: str) -> None:
    run = recorded(stack)
    releases = {
        r.inputs["name"]: (r.inputs["version"], r.inputs["namespace"])
        for r in run.helm_releases()
        if r.inputs["chart"] != KUEUE_CHART
    }
    lab = parse_config(read_stack_values(stack_file(stack)))
    monitoring, exporters = observability.monitoring_namespace(lab), observability.exporters_namespace(lab)
    expected = {
        "prometheus": (PROMETHEUS_VERSION, monitoring),
        "grafana": (GRAFANA_VERSION, monitoring),
        "node-exporter": (NODE_EXPORTER_VERSION, exporters),
    }
    if lab.has_gpus:
        expected["dcgm-exporter"] = (DCGM_EXPORTER_VERSION, exporters)
    assert releases == expected
    levels = {name_of(n): labels_of(n)[PSA_ENFORCE] for n in run.of_kind("Namespace")}
    assert (levels[monitoring], levels[exporters], levels[lab.namespace]) == (
        "restricted",
        "privileged",
        "privileged" if lab.trainer.host_network else "restricted",
    )
    for release in run.helm_releases():
        if release.inputs["chart"] != KUEUE_CHART:
            assert "resources" in str(release.inputs["values"]), name_of(release)


def test_one_key_turns_it_off() -> None:
    values = {**read_stack_values(stack_file("example-gpu")), "observability": {"enabled": False}}
    run = run_program("example-gpu", values)
    assert [r.inputs["chart"] for r in run.helm_releases()] == [KUEUE_CHART]
    assert not [p for p in run.of_kind("NetworkPolicy") if name_of(p) == "trainer-metrics"]
    (sts,) = component(run, "training")
    assert "--metrics-port" not in sts.inputs["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("gpus", [False, True])
def test_the_stack_fits_its_budget_on_the_server_node(gpus: bool) -> None:
    assert over_budget(SIZES, BUDGET, gpus) == []


def test_the_budget_check_catches_a_larger_limit() -> None:
    assert over_budget(SIZES, {"cpu": "1", "memory": "1792Mi"}, gpus=True) == [
        "cpu: limits add up to 1.100, over the budget 1"
    ]
