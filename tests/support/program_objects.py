"""What the seam tests ask of the program's recorded run: which workloads use GPUs, what waits for
what, the values handed to the Prometheus chart."""

from __future__ import annotations

from collections import deque
from typing import Any

from lab.cluster.observability import PROMETHEUS
from lab.cluster.pods import GPU_RESOURCE, GPU_RUNTIME_CLASS
from tests.support.program import ProgramRun, Registered, containers, name_of, pod_spec


def gpu_workloads(run: ProgramRun) -> list[Registered]:
    """Every workload whose pods ask for a GPU through the nvidia runtime."""
    return [
        w
        for w in run.resources
        if w.is_kubernetes and "template" in w.inputs.get("spec", {})
        if pod_spec(w).get("runtimeClassName") == GPU_RUNTIME_CLASS
        and any(GPU_RESOURCE in c.get("resources", {}).get("limits", {}) for c in containers(w))
    ]


def waits_for(run: ProgramRun, resource: Registered, urn: str) -> bool:
    """Whether `resource` is created after `urn`, through its dependencies and theirs."""
    registered = {r.urn: r for r in run.resources}  # reads (`.get`) are not registrations
    seen, todo = set(), deque(resource.dependencies)
    while todo:
        dependency = todo.popleft()
        if dependency == urn:
            return True
        if dependency not in seen and dependency in registered:
            seen.add(dependency)
            todo.extend(registered[dependency].dependencies)
    return False


def prometheus_values(run: ProgramRun) -> dict[str, Any]:
    """The values the program hands the Prometheus chart."""
    (release,) = [
        r for r in run.helm_releases() if name_of(r) == PROMETHEUS or r.inputs.get("name") == PROMETHEUS
    ]
    return release.inputs["values"]
