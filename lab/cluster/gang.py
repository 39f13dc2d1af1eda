"""Gang scheduling with Kueue: the training ranks and the sweep's pods are admitted all or nothing.

Kueue (kubernetes-sigs/kueue) is installed from its pinned official Helm chart and configured to
manage only the lab's namespace, with three integrations: `batch/job` (the sweep's Indexed Job),
and `pod` with `statefulset` (the training ranks; the StatefulSet integration builds on the pod
one, https://kueue.sigs.k8s.io/docs/tasks/run/statefulset/). A workload is admitted when the
lab's ClusterQueue has quota for all of its pods at once; `waitForPodsReady` with
`blockAdmission` admits one workload at a time and evicts one whose pods are not all Ready in
time (https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/), so no run holds
some GPUs while waiting for others. `StrictFIFO` keeps a later sweep from taking GPUs an earlier
training run waits for.

The quota is what the lab rations: its GPUs on GPU labs, pod slots (one per node) on CPU labs.
Kueue leaves CPU and memory to the scheduler (`excludeResourcePrefixes`), so requests that pods
may carry for them never make a workload inadmissible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from lab.cluster.pods import GPU_RESOURCE
from lab.cluster.scope import Scope
from lab.cluster.versions import KUEUE_CHART, KUEUE_VERSION
from lab.config import GangScheduler, LabConfig

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_NAMESPACE = "kueue-system"
LOCAL_QUEUE = "lab"
APP = "kueue"
COMPONENT = "scheduling"
FRAMEWORKS = ["batch/job", "pod", "statefulset"]
# Shorter than the StatefulSet's await in `pulumi up` (15 min): Kueue evicts and requeues a run
# whose ranks are not all training by then, freeing what the ranks that did start hold.
PODS_READY_TIMEOUT = "10m"
PODS = "pods"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class Gang:
    release: k8s.helm.v3.Release
    queue: k8s.apiextensions.CustomResource
    queue_name: str

    @property
    def labels(self) -> dict[str, str]:
        """The label that puts a StatefulSet or Job in the lab's queue."""
        return {QUEUE_LABEL: self.queue_name}


def quotas(lab: LabConfig) -> dict[str, int]:
    """What the lab's ClusterQueue hands out: every GPU, and a pod slot per GPU (per node on CPU labs)."""
    slots = max(lab.total_gpus if lab.has_gpus else len(lab.nodes), lab.replicas)
    return {PODS: slots, GPU_RESOURCE: lab.total_gpus} if lab.has_gpus else {PODS: slots}


def manager_config(lab: LabConfig) -> dict[str, Any]:
    """Kueue's Configuration: the chart's defaults that matter, the lab's namespace, all-or-nothing."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "managedJobsNamespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: lab.namespace}},
        "waitForPodsReady": {
            "timeout": PODS_READY_TIMEOUT,
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction"},
        },
        "integrations": {"frameworks": FRAMEWORKS},
        "resources": {"excludeResourcePrefixes": ["cpu", "memory", "ephemeral-storage", "hugepages-"]},
    }


def declare_gang(scope: Scope) -> Gang | None:
    lab = scope.lab
    if lab.gang_scheduler is GangScheduler.NONE:
        return None
    release = k8s.helm.v3.Release(
        "kueue",
        chart=KUEUE_CHART,
        version=KUEUE_VERSION,
        namespace=KUEUE_NAMESPACE,
        create_namespace=True,
        values={"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(lab))}},
        opts=scope.opts(),
    )
    flavor_name, queue_name = f"{lab.namespace}-nodes", lab.namespace
    flavor = k8s.apiextensions.CustomResource(
        "kueue-flavor",
        api_version=API_VERSION,
        kind="ResourceFlavor",
        metadata=scope.cluster_metadata(flavor_name, APP, COMPONENT),
        spec={},  # every node: the pods' own selectors already say which nodes fit
        opts=scope.opts(release),
    )
    limits = quotas(lab)
    cluster_queue = k8s.apiextensions.CustomResource(
        "kueue-cluster-queue",
        api_version=API_VERSION,
        kind="ClusterQueue",
        metadata=scope.cluster_metadata(queue_name, APP, COMPONENT),
        spec={
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: lab.namespace}},
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": [
                {
                    "coveredResources": list(limits),
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [{"name": r, "nominalQuota": str(q)} for r, q in limits.items()],
                        }
                    ],
                }
            ],
        },
        opts=scope.opts(release, flavor),
    )
    queue = k8s.apiextensions.CustomResource(
        "kueue-local-queue",
        api_version=API_VERSION,
        kind="LocalQueue",
        metadata=scope.metadata(LOCAL_QUEUE, APP, COMPONENT),
        spec={"clusterQueue": queue_name},
        opts=scope.opts(release, cluster_queue),
    )
    return Gang(release, queue, LOCAL_QUEUE)


def gang_opts(gang: Gang | None) -> tuple[dict[str, str], list[pulumi.Resource]]:
    """The queue label and the dependency a workload needs to be admitted by Kueue (none without it)."""
    return (gang.labels, [gang.queue]) if gang else ({}, [])
