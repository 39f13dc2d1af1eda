"""The cluster's objects agree with each other and with the stack, for every stack file.

Each rule is a check (tests/support/rules/cluster_rules.py): a function of the recorded program
run and the lab configuration that returns the problems it finds. Every check passes on every
shipped stack, and every check is shown to catch a deliberately broken copy of a real run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lab.config import load_stack, parse_config, read_stack_values, stack_file
from tests.support.program import (
    ProgramRun,
    Registered,
    broken,
    cluster_stacks,
    kubernetes_object,
    pod_spec,
    recorded,
    run_program,
    validate_object,
)
from tests.support.rules.cluster_rules import (
    CHECKS,
    Check,
    check_claims,
    check_gpu_only_on_gpu_labs,
    check_headless_service,
    check_namespace_and_labels,
    check_network_policies,
    check_placement,
    check_pod_security,
    check_release_rights,
    check_rendezvous,
    check_start_order,
    check_sweep,
    check_trainer_image,
    objects_named,
    one,
    trainer_container,
)


@pytest.mark.parametrize("stack", cluster_stacks())
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_check_passes_on_every_stack(check: Check, stack: str) -> None:
    assert check(recorded(stack), load_stack(stack)) == []


# Branches no shipped stack takes: a random sweep on a CPU lab, and a cluster older than 1.28.
VARIANTS: dict[str, dict[str, Any]] = {
    "cpu-random-sweep": {
        "sweep": {
            "strategy": "random",
            "samples": 5,
            "parameters": {"learningRate": {"min": 0.01, "max": 1.0, "log": True}, "epochs": [2, 4]},
        }
    },
    "kubernetes-1.27": {"kubernetesVersion": "1.27.16"},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_check_and_schema_holds_on_variants_of_the_cpu_stack(variant: str) -> None:
    values = {**read_stack_values(stack_file("example-cpu")), **VARIANTS[variant]}
    run = run_program("example-cpu", values)
    lab = parse_config(values)
    for resource in run.kubernetes_objects():
        validate_object(kubernetes_object(resource), lab.kubernetes_version)
    assert [p for check in CHECKS for p in check(run, lab)] == []


# Each check catches a deliberately broken object.


def _workload(run: ProgramRun, name: str) -> Registered:
    found = one(run, name)
    assert found is not None
    return found


def _break_service_selector(run: ProgramRun) -> None:
    service = objects_named(run, "Service")["trainer"]
    service.inputs["spec"]["selector"]["app.kubernetes.io/component"] = "other"


def _break_claim_name(run: ProgramRun) -> None:
    pod_spec(_workload(run, "training"))["volumes"][1]["persistentVolumeClaim"]["claimName"] = "run"


def _break_image(run: ProgramRun) -> None:
    trainer_container(_workload(run, "dataset"))["image"] = "docker.io/someone/trainer:latest"


def _break_gpu_limit(run: ProgramRun) -> None:
    trainer_container(_workload(run, "training"))["resources"] = {}


def _break_cpu_runtime(run: ProgramRun) -> None:
    pod_spec(_workload(run, "training"))["runtimeClassName"] = "nvidia"


def _break_placement(run: ProgramRun) -> None:
    affinity = pod_spec(_workload(run, "training"))["affinity"]
    affinity["podAffinity"] = affinity.pop("podAntiAffinity")


def _break_completions(run: ProgramRun) -> None:
    next(r for r in run.of_kind("Job") if r.name == "sweep").inputs["spec"]["completions"] -= 1


def _break_start_order(run: ProgramRun) -> None:
    dataset = _workload(run, "dataset")
    sts = _workload(run, "training")
    sts.dependencies = [d for d in sts.dependencies if d != dataset.urn]


def _break_master_address(run: ProgramRun) -> None:
    env = trainer_container(_workload(run, "training"))["env"]
    next(e for e in env if e["name"] == "MASTER_ADDR")["value"] = "trainer-0.trainer"


def _break_namespace(run: ProgramRun) -> None:
    objects_named(run, "ConfigMap").popitem()[1].inputs["metadata"]["namespace"] = "default"


def _break_security(run: ProgramRun) -> None:
    del trainer_container(_workload(run, "training"))["securityContext"]["capabilities"]


def _break_network_policy(run: ProgramRun) -> None:
    for policy in run.of_kind("NetworkPolicy"):
        for rule in policy.inputs["spec"].get("ingress", []):
            rule["ports"] = [p for p in rule.get("ports", []) if p.get("port") != 29500]


def _break_release_rights(run: ProgramRun) -> None:
    objects_named(run, "Role")["trainer-release"].inputs["rules"][0]["resources"] = ["statefulsets"]


BREAKAGES = [
    (check_headless_service, "example-gpu", _break_service_selector, "selector"),
    (check_claims, "example-cpu", _break_claim_name, "'run'"),
    (check_trainer_image, "example-gpu", _break_image, "someone"),
    (check_gpu_only_on_gpu_labs, "example-gpu", _break_gpu_limit, "and 1 GPUs"),
    (check_gpu_only_on_gpu_labs, "example-cpu", _break_cpu_runtime, "CPU lab"),
    (check_placement, "example-gpu", _break_placement, "podAffinity"),
    (check_sweep, "example-sweep", _break_completions, "completions"),
    (check_start_order, "example-gpu", _break_start_order, "dataset"),
    (check_rendezvous, "example-gpu", _break_master_address, "MASTER_ADDR"),
    (check_namespace_and_labels, "example-cpu", _break_namespace, "default"),
    (check_pod_security, "example-gpu", _break_security, "privileges"),
    (check_network_policies, "example-gpu", _break_network_policy, "29500"),
    (check_release_rights, "example-gpu", _break_release_rights, "'statefulsets'"),
]


@pytest.mark.parametrize(
    ("check", "stack", "breakage", "message"), BREAKAGES, ids=lambda v: getattr(v, "__name__", None)
)
def test_check_catches_a_broken_object(
    check: Check, stack: str, breakage: Callable[[ProgramRun], None], message: str
) -> None:
    run = broken(stack)
    breakage(run)
    problems = check(run, load_stack(stack))
    assert any(message in p for p in problems), problems


def test_every_check_is_shown_failing() -> None:
    assert {b[0] for b in BREAKAGES} == set(CHECKS)
