"""The `observability` block: the monitoring stack from pinned charts, on by default, off with one key,
within its budget, its host-needing exporters apart from the `restricted` namespaces, Grafana's
admin password a Pulumi secret and nothing else."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from pulumi.runtime.rpc import wrap_rpc_secret

from lab.cluster import observability
from lab.cluster.generated_secret import VALUE, GeneratedSecretProvider
from lab.cluster.observability import BUDGET, SIZES
from lab.cluster.program_run import FAKE_GENERATED_SECRET, GENERATED_SECRET, is_secret, unwrap_secrets
from lab.cluster.versions import (
    DCGM_EXPORTER_VERSION,
    GRAFANA_VERSION,
    KUEUE_CHART,
    NODE_EXPORTER_VERSION,
    PROMETHEUS_VERSION,
)
from lab.config import parse_config, read_stack_values, stack_file
from lab.config.monitoring import GRAFANA_ADMIN_SECRET, GRAFANA_PASSWORD_OUTPUT
from tests.support.program import cluster_stacks, labels_of, name_of, recorded, run_program
from tests.support.rules.cluster_rules import component

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


def test_grafana_admin_password_is_a_pulumi_secret_only() -> None:
    """Drawn by the provider (never an input), kept as a secret output, handed to Grafana through
    the lab's Secret (the chart's `admin.existingSecret`), exported as a secret: in plain text
    nowhere, the Helm release's values included."""
    run = recorded("example-gpu")
    (generated,) = [r for r in run.resources if r.type == GENERATED_SECRET]
    assert generated.secret_outputs == [VALUE] and FAKE_GENERATED_SECRET not in json.dumps(generated.inputs)
    (secret,) = run.of_kind("Secret")
    assert name_of(secret) == GRAFANA_ADMIN_SECRET == "grafana-admin"
    assert secret.inputs["metadata"]["namespace"] == "k8scifar-monitoring"
    assert is_secret(secret.inputs["stringData"])
    assert unwrap_secrets(secret.inputs["stringData"]) == {
        "admin-user": "admin",
        "admin-password": FAKE_GENERATED_SECRET,
    }
    (grafana,) = [r for r in run.helm_releases() if r.inputs.get("name") == "grafana"]
    assert grafana.inputs["values"]["admin"] == {
        "existingSecret": "grafana-admin",
        "userKey": "admin-user",
        "passwordKey": "admin-password",
    }
    assert secret.urn in grafana.dependencies  # the Secret exists before Grafana starts
    assert run.outputs[GRAFANA_PASSWORD_OUTPUT] == FAKE_GENERATED_SECRET
    assert GRAFANA_PASSWORD_OUTPUT in run.secret_outputs
    assert run.outputs["dashboard"] == "labctl dashboard --stack example-gpu"
    plain = [r.name for r in run.resources if r is not secret and _in_plain(r.inputs)]
    assert plain == []


def _in_plain(value: object) -> bool:
    """Whether the fake password sits in `value` outside a secret."""
    if is_secret(value):
        return False
    if isinstance(value, dict):
        return any(_in_plain(v) for v in value.values())
    if isinstance(value, list):
        return any(_in_plain(v) for v in value)
    return isinstance(value, str) and FAKE_GENERATED_SECRET in value


def test_the_plain_text_check_finds_a_password_outside_a_secret() -> None:
    assert _in_plain({"values": {"adminPassword": FAKE_GENERATED_SECRET}})
    assert not _in_plain({"stringData": wrap_rpc_secret({"admin-password": FAKE_GENERATED_SECRET})})


def test_no_grafana_password_without_the_stack() -> None:
    values = {**read_stack_values(stack_file("example-cpu")), "observability": {"enabled": False}}
    run = run_program("example-cpu", values)
    assert not [r for r in run.resources if r.type == GENERATED_SECRET] and not run.of_kind("Secret")
    assert GRAFANA_PASSWORD_OUTPUT not in run.outputs and "dashboard" not in run.outputs


def test_the_password_is_drawn_once_and_kept() -> None:
    provider = GeneratedSecretProvider()
    first = provider.create({"purpose": "grafana-admin"}).outs[VALUE]
    second = provider.create({"purpose": "grafana-admin"}).outs[VALUE]
    assert first != second and len(first) == 32 and re.fullmatch(r"[A-Za-z0-9_-]+", first)
    kept = {"purpose": "grafana-admin", VALUE: first}
    assert provider.diff("secret-grafana-admin", kept, {"purpose": "grafana-admin"}).changes is False


def test_the_engine_can_load_the_password_provider(tmp_path: Path) -> None:
    """The provider host unpickles `__provider` the way pulumi.dynamic does, in a fresh Python."""
    (generated,) = [r for r in recorded("example-gpu").resources if r.type == GENERATED_SECRET]
    pickled = generated.inputs["__provider"]["value"]  # the engine keeps it as a secret value
    script = (
        "import base64, sys, dill\n"
        "provider = dill.loads(base64.b64decode(sys.stdin.read()))\n"
        "print(type(provider).__name__, len(provider.create({'purpose': 'p'}).outs['value']))\n"
    )
    # This checkout's code, as the provider host of a `pulumi up` from it loads it.
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-c", script]
    done = subprocess.run(
        command, input=pickled, capture_output=True, text=True, cwd=tmp_path, env=env, check=True
    )
    assert done.stdout.split() == ["GeneratedSecretProvider", "32"]
