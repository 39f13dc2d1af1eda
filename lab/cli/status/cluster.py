"""`labctl status` on a stack that names a cluster's kubeconfig: the lab's pods, StatefulSet and Jobs
and the nodes' GPUs, read through the cluster's API (lab.cli.common.stackcluster), where a lab it
bootstrapped is read with the server's own kubectl over SSH (lab.remote)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.cli.common import stackcluster
from lab.config import LabConfig
from lab.remote.gpu_nodes import gpu_shortfalls
from lab.remote.pods import Rank, ranks


@dataclass(frozen=True)
class Workload:
    """A StatefulSet or Job of the lab's namespace, and how far it is."""

    kind: str
    name: str
    state: str


@dataclass(frozen=True)
class ClusterView:
    gpu_lines: list[str]  # one per node whose allocatable GPUs are not the stack's
    ranks: list[Rank]
    workloads: list[Workload]


def read(cfg: LabConfig) -> ClusterView:
    """The lab's part of the cluster as its API server answers; ClusterUnreachable, one line, when
    it does not."""
    namespace = f"/namespaces/{cfg.namespace}"
    with stackcluster.client(cfg) as api:
        nodes = stackcluster.items(api, "/api/v1/nodes") if cfg.has_gpus else {"items": []}
        pods = stackcluster.items(api, f"/api/v1{namespace}/pods")
        sets = stackcluster.items(api, f"/apis/apps/v1{namespace}/statefulsets")
        jobs = stackcluster.items(api, f"/apis/batch/v1{namespace}/jobs")
    return ClusterView(
        gpu_shortfalls(cfg, nodes) if cfg.has_gpus else [],
        ranks(pods, cfg.world.ranks_per_pod),
        workloads(sets, jobs),
    )


def workloads(sets: dict[str, Any], jobs: dict[str, Any]) -> list[Workload]:
    """Each StatefulSet with its ready pods, each Job with its outcome or its pods at work."""
    found = []
    for item in sets.get("items", []):
        spec, status = item.get("spec") or {}, item.get("status") or {}
        ready = f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)} ready"
        found.append(Workload("StatefulSet", item["metadata"]["name"], ready))
    for item in jobs.get("items", []):
        found.append(Workload("Job", item["metadata"]["name"], job_state(item)))
    return found


def job_state(job: dict[str, Any]) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    done = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in done:
        return "complete"
    if "Failed" in done:
        return f"failed ({done['Failed'].get('reason') or 'no reason given'})"
    if spec.get("suspend"):
        # What Kueue does to a Job until it admits the whole of it.
        return "suspended (waiting for admission)"
    return f"{status.get('active', 0)} active, {status.get('succeeded', 0)} succeeded"
