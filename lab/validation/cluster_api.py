"""`labctl validate` on a stack that names a cluster's kubeconfig: the suite's cluster and workload
checks asked of the cluster's API through the official client (lab.cli.common.stackcluster),
where a lab the stack bootstraps is checked by testinfra on its nodes, kubectl on the server
among them.

The machines are the cluster owner's: no node is logged in to, so the host checks are one line
that says so. Each check asks lab.validation.suite.checks what is wrong, as the suite does.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s_client

from lab.cli.common import stackcluster
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
    from lab.cluster.labels import pod_selector

    return quote(pod_selector(lab.namespace, app, component), safe="")


def _pods(api: k8s_client.ApiClient, namespace: str, selector: str) -> dict[str, Any]:
    return stackcluster.items(api, f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")


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
    line, when it does not. One read it denies (403) fails the check that needs it alone."""
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

    no_gpus = None if lab.has_gpus else "no node of this lab has a GPU configured"
    with stackcluster.client(lab) as api:
        nodes = stackcluster.items(api, "/api/v1/nodes")
        if Part.CLUSTER in parts:
            names = [n.name for n in lab.nodes]
            check("configured_nodes_are_ready", lambda: checks.node_problems(nodes, names))
            system = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods"
            check("system_pods_run", lambda: checks.system_pod_problems(stackcluster.items(api, system)))
        if Part.WORKLOAD in parts:
            check("gpus_are_allocatable_as_configured", lambda: gpu_shortfalls(lab, nodes), no_gpus)
            plugin_pods = _selector(lab, gpu.APP, gpu.COMPONENT)
            provided = "the cluster provides the device plugin (provides.devicePlugin)"
            check(
                "device_plugin_runs_on_every_gpu_node",
                lambda: checks.pod_problems(
                    _pods(api, gpu_namespace(lab), plugin_pods), len(lab.gpu_nodes), "NVIDIA device plugin"
                ),
                no_gpus or (provided if lab.provides.device_plugin else None),
            )
            claims = stackcluster.items(api, f"/api/v1/namespaces/{lab.namespace}/persistentvolumeclaims")
            check("claims_are_bound", lambda: checks.claim_problems(claims))
            pods = _pods(api, lab.namespace, _selector(lab, registry.APP, registry.COMPONENT))
            check("registry_runs", lambda: checks.pod_problems(pods, 1, "registry"))
            ranks = _pods(api, lab.namespace, _selector(lab, training.APP, training.COMPONENT))
            check("training_ranks_run", lambda: checks.training_pod_problems(ranks, lab.world))
            logs = _logs(api, lab.namespace, ranks)
            check("training_ranks_formed_their_group", lambda: checks.group_problems(logs))
    return found
