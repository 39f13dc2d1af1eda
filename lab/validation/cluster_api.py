"""`labctl validate` on a stack that names a cluster's kubeconfig: the suite's cluster and workload
checks asked of the cluster's API through the official client (lab.cli.common.stackcluster),
where a lab the stack bootstraps is checked by testinfra on its nodes, kubectl on the server
among them.

The machines are the cluster owner's: no node is logged in to, so the host checks are one line
that says so. Each check asks lab.validation.suite.checks what is wrong, as the suite does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Set
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s_client

from lab.cli.common import stackcluster
from lab.cluster.labels import pod_selector
from lab.config import LabConfig
from lab.config.facts import SYSTEM_NAMESPACE
from lab.validation.parts import ALL, Part
from lab.validation.runner import Outcome
from lab.validation.suite import checks

WHERE = "cluster"
HOSTS_SKIPPED = (
    "the stack names the cluster's kubeconfig, so its machines are its owner's and no node is"
    " logged in to (kernel settings, packages, the export, the registry mirror, the NVIDIA toolkit)"
)


def _selector(lab: LabConfig, app: str, component: str) -> str:
    return quote(pod_selector(lab.namespace, app, component), safe="")


def _logs(api: k8s_client.ApiClient, namespace: str, pods: dict[str, Any]) -> str:
    """Every container log of `pods` (the ranks' pods run one container each), one after another."""
    said = []
    for pod in pods.get("items", []):
        name = pod["metadata"]["name"]
        log = stackcluster.read(api, f"/api/v1/namespaces/{namespace}/pods/{name}/log") or b""
        said.append(log.decode(errors="replace"))
    return "\n".join(said)


def outcomes(lab: LabConfig, parts: Set[Part] = ALL) -> list[Outcome]:
    """The outcome of every check of `parts`, as the API server answers; ClusterUnreachable, one
    line, when it does not. A read it denies (403) fails the checks that need it, and the others
    still run: each check reads what it needs when it runs, each list once."""
    # Imported here: lab.cluster loads pulumi_kubernetes, which `labctl` loads only where it must.
    from lab.cluster import gpu, registry, training
    from lab.cluster.namespace import gpu_namespace
    from lab.remote.gpu_nodes import gpu_shortfalls

    found = [Outcome("host_checks", WHERE, "skipped", HOSTS_SKIPPED)] if Part.HOSTS in parts else []

    def check(name: str, problems: Callable[[], list[str]], skip: str | None = None) -> None:
        if skip is not None:
            found.append(Outcome(name, WHERE, "skipped", skip))
            return
        try:
            said = problems()
        except stackcluster.Forbidden as err:
            said = [str(err)]
        found.append(Outcome(name, WHERE, "failed" if said else "passed", "; ".join(said)))

    no_gpus = None if lab.has_gpus else checks.NO_GPUS
    with stackcluster.client(lab) as api:

        @functools.cache
        def listed(path: str) -> dict[str, Any]:
            return stackcluster.items(api, path)

        def pods(namespace: str, app: str, component: str) -> dict[str, Any]:
            selector = _selector(lab, app, component)
            return listed(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")

        nodes = "/api/v1/nodes"
        if Part.CLUSTER in parts:
            names = [n.name for n in lab.nodes]
            check("configured_nodes_are_ready", lambda: checks.node_problems(listed(nodes), names))
            system = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods"
            check("system_pods_run", lambda: checks.system_pod_problems(listed(system)))
        if Part.WORKLOAD in parts:
            check("gpus_are_allocatable_as_configured", lambda: gpu_shortfalls(lab, listed(nodes)), no_gpus)
            check(
                "device_plugin_runs_on_every_gpu_node",
                lambda: checks.pod_problems(
                    pods(gpu_namespace(lab), gpu.APP, gpu.COMPONENT), len(lab.gpu_nodes), checks.DEVICE_PLUGIN
                ),
                no_gpus or (checks.PROVIDED_DEVICE_PLUGIN if lab.provides.device_plugin else None),
            )
            claims = f"/api/v1/namespaces/{lab.namespace}/persistentvolumeclaims"
            check("claims_are_bound", lambda: checks.claim_problems(listed(claims)))
            registry_pods = (lab.namespace, registry.APP, registry.COMPONENT)
            check("registry_runs", lambda: checks.pod_problems(pods(*registry_pods), 1, "registry"))

            def ranks() -> dict[str, Any]:
                return pods(lab.namespace, training.APP, training.COMPONENT)

            check("training_ranks_run", lambda: checks.training_pod_problems(ranks(), lab.world))
            check(
                "training_ranks_formed_their_group",
                lambda: checks.group_problems(_logs(api, lab.namespace, ranks())),
            )
    return found
