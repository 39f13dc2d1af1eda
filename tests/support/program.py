"""Helpers for the program's tests: the run recorded under the engine's mocks (lab/cluster/program_run.py),
schema validation of every Kubernetes object, and accessors for the objects' fields.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import kubernetes_validate

from lab.cluster.program_run import (
    DYNAMIC_RESOURCE,
    FAKE_KUBECONFIG,
    FAKE_TOKEN,
    ProgramRun,
    Registered,
    fake_digest,
    kubernetes_object,
    run_program,
)
from lab.cluster.versions import KUEUE_CHART
from lab.config import load_stack
from tests.support.shipped import shipped_stacks

__all__ = [
    "DYNAMIC_RESOURCE",
    "FAKE_KUBECONFIG",
    "FAKE_TOKEN",
    "ProgramRun",
    "Registered",
    "fake_digest",
    "kubernetes_object",
    "run_program",
]


def validate_object(obj: dict[str, Any], version: str) -> None:
    """Strict schema validation of one object; raises kubernetes_validate's error when it fails."""
    kubernetes_validate.validate(obj, version, strict=True)


WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def labels_of(resource: Registered) -> dict[str, str]:
    return resource.inputs.get("metadata", {}).get("labels", {})


def name_of(resource: Registered) -> str:
    return resource.inputs.get("metadata", {}).get("name", resource.name)


def pod_spec(resource: Registered) -> dict[str, Any]:
    """The pod template's spec of a workload (Deployment, DaemonSet, StatefulSet, Job)."""
    return resource.inputs["spec"]["template"]["spec"]


def pod_labels(resource: Registered) -> dict[str, str]:
    return resource.inputs["spec"]["template"].get("metadata", {}).get("labels", {})


def containers(resource: Registered) -> list[dict[str, Any]]:
    """Init and regular containers of a workload's pods."""
    spec = pod_spec(resource)
    return [*spec.get("initContainers", []), *spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """A container's environment: name to literal value, or to its `valueFrom` source."""
    return {e["name"]: e["value"] if "value" in e else e.get("valueFrom") for e in container.get("env", [])}


def cluster_stacks() -> list[str]:
    """The stacks that install Kubernetes, and so declare the in-cluster objects."""
    return [stack for stack in shipped_stacks() if load_stack(stack).installs_kubernetes]


@cache
def recorded(stack: str) -> ProgramRun:
    """The program's run for `stack`, recorded once for the whole test session; read it, never change it."""
    return run_program(stack)


def broken(stack: str) -> ProgramRun:
    """A private copy of a real run to break."""
    return copy.deepcopy(recorded(stack))


def kueue_releases(run: ProgramRun) -> list[Registered]:
    """The Helm releases of Kueue's chart (the monitoring stack has releases of its own)."""
    return [r for r in run.helm_releases() if r.inputs["chart"] == KUEUE_CHART]
