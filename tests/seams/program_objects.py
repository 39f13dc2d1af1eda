"""What the seam tests ask of the program's recorded run: which workloads use GPUs, what waits for what."""

from __future__ import annotations

from collections import deque

from lab.cluster.pods import GPU_RESOURCE, GPU_RUNTIME_CLASS
from tests.program.harness import ProgramRun, Registered, containers, pod_spec


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
