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

Where the stack packs a GPU lab's ranks (`trainer.placement: pack`), the flavor is a
topology-aware one (TAS, beta and on by default since Kueue 0.14, pkg/features/kube_features.go):
a Topology with the one level `kubernetes.io/hostname` (the lowest level, the only place Kueue
admits that label, apis/kueue/v1beta2/topology_types.go), the flavor naming it with the GPU
nodes' label (a TAS flavor needs at least one nodeLabel, resourceflavor_types.go), and the
training pods asking for `podset-preferred-topology: kubernetes.io/hostname`. Kueue then places
the pods greedily on the nodes with the most free GPUs first, which puts them on as few nodes as
hold them (site/content/en/docs/concepts/topology_aware_scheduling.md, "Balanced Placement" on the
default greedy algorithm), from the nodes' allocatable GPUs less what other pods use. In a
ClusterQueue whose flavors are all TAS, a workload without a topology request (the sweep) is
admitted by TAS unconstrained (pkg/scheduler/flavorassigner/tas_flavorassigner.go, isTASImplied).
Kueue leaves CPU and memory to the scheduler (`excludeResourcePrefixes`), so requests that pods
may carry for them never make a workload inadmissible.

Where Kueue meets the rest of the lab (docs/seams.md):

- Timeouts: `pulumi up` waits for the ranks (lab.cluster.awaits); Kueue's PodsReady and recovery
  timeouts are longer, so `up` reports a run that does not start with its pods as they stand, and
  Kueue evicts it (freeing its GPUs) only after that.
- Priorities: the training run outranks the sweep and the ClusterQueue preempts lower priorities,
  so a new run does not queue for days behind a running sweep while `up` waits; the sweep's sets
  resume from their checkpoints when it is admitted again.
- Webhooks: Kueue's pod and Job webhooks fail closed on every pod of the lab's namespace, queued
  or not (the chart's `mpod.kb.io` and `mjob.kb.io` take `managedJobsNamespaceSelector`), so every
  workload there is declared after the release, whose await ends once Kueue serves.
- A Kueue already there (`provides.kueue`): the lab installs no chart and declares its
  queue objects on that Kueue's CRDs, whose webhooks must already serve; nothing waits for a
  release, and destroy leaves that Kueue as it found it.
- Destroy: the program declares `kueue-system` itself; a namespace Helm creates for a release
  (`create_namespace`) is not part of the release and outlives `helm uninstall` (helm
  pkg/action/install.go creates it beside the release's manifest, which is all uninstall deletes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from lab.cluster.awaits import TRAINING_TIMEOUT, minutes
from lab.cluster.namespace import lab_namespace
from lab.cluster.pods import GPU_NODE_LABEL, GPU_RESOURCE, HOSTNAME_TOPOLOGY
from lab.cluster.scope import Scope
from lab.cluster.security import RESTRICTED
from lab.cluster.versions import KUEUE_CHART, KUEUE_VERSION
from lab.config import GangScheduler, LabConfig

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_NAMESPACE = "kueue-system"
LOCAL_QUEUE = "lab"
APP = "kueue"
COMPONENT = "scheduling"
FRAMEWORKS = ["batch/job", "pod", "statefulset"]
# Kueue's clocks start at admission (timeout) or at a started run's first unready pod (recovery,
# apis/config/v1beta2/configuration_types.go), never before the StatefulSet exists, where `up`'s
# await starts: a few minutes more than the await and `up` always speaks first.
PODS_READY_TIMEOUT = f"{minutes(TRAINING_TIMEOUT) + 5}m"
# Workload priorities by the component that carries them (lab.cluster.training, lab.cluster.sweep).
PRIORITIES = {"training": 100, "sweep": 10}
# A pending workload may evict admitted ones of lower priority in the same ClusterQueue
# (apis/kueue/v1beta2/clusterqueue_types.go, ClusterQueuePreemption.withinClusterQueue).
PREEMPTION = {"withinClusterQueue": "LowerPriority"}
PODS = "pods"
# A pod template's request to Kueue's topology-aware scheduling: its pods in one domain of this
# level if they fit, else in as few as hold them (apis/kueue/v1beta2/topology_types.go).
TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class Gang:
    # What Kueue's objects and the lab's workloads wait for: the release the lab installs, or
    # nothing on a Kueue that is already there.
    serving: tuple[pulumi.Resource, ...]
    queue: k8s.apiextensions.CustomResource
    queue_name: str
    lab_namespace: str
    priorities: dict[str, WorkloadPriorityClass]

    def labels(self, component: str) -> dict[str, str]:
        """The labels that put a StatefulSet or Job in the lab's queue at its component's priority."""
        return {QUEUE_LABEL: self.queue_name, PRIORITY_LABEL: priority_class(self.lab_namespace, component)}


def priority_class(lab_namespace: str, component: str) -> str:
    return f"{lab_namespace}-{component}"


class WorkloadPriorityClass(pulumi.CustomResource):
    """Kueue's WorkloadPriorityClass (apis/kueue/v1beta2/workloadpriorityclass_types.go): `value` and
    `description` sit beside `metadata`, with no `spec`, which the Python CustomResource of
    pulumi-kubernetes cannot carry. Registered under the type token that class uses for every
    custom resource, `kubernetes:<apiVersion>:<kind>`, so the same provider handles it."""

    def __init__(
        self,
        resource_name: str,
        metadata: dict[str, Any],
        value: int,
        description: str,
        opts: pulumi.ResourceOptions,
    ) -> None:
        kind = "WorkloadPriorityClass"
        props = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": metadata,
            "value": value,
            "description": description,
        }
        super().__init__(f"kubernetes:{API_VERSION}:{kind}", resource_name, props, opts)


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
            "recoveryTimeout": PODS_READY_TIMEOUT,
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
    serving = () if lab.provides.kueue else (_release(scope),)
    flavor_name, queue_name = f"{lab.namespace}-nodes", lab.namespace
    flavor = k8s.apiextensions.CustomResource(
        "kueue-flavor",
        api_version=API_VERSION,
        kind="ResourceFlavor",
        metadata=scope.cluster_metadata(flavor_name, APP, COMPONENT),
        # Every node, the pods' own selectors already say which nodes fit; the GPU nodes, where
        # Kueue packs the pods by topology.
        spec=_topology_flavor(scope, serving) if lab.packs_by_topology else {},
        opts=scope.opts(*serving),
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
            "preemption": PREEMPTION,
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
        opts=scope.opts(*serving, flavor),
    )
    queue = k8s.apiextensions.CustomResource(
        "kueue-local-queue",
        api_version=API_VERSION,
        kind="LocalQueue",
        metadata=scope.metadata(LOCAL_QUEUE, APP, COMPONENT),
        spec={"clusterQueue": queue_name},
        opts=scope.opts(*serving, cluster_queue),
    )
    priorities = {
        component: WorkloadPriorityClass(
            f"kueue-priority-{component}",
            metadata=scope.cluster_metadata(priority_class(lab.namespace, component), APP, COMPONENT),
            value=value,
            description=f"The lab's {component} workloads",
            opts=scope.opts(*serving),
        )
        for component, value in PRIORITIES.items()
    }
    return Gang(serving, queue, LOCAL_QUEUE, lab.namespace, priorities)


def _release(scope: Scope) -> k8s.helm.v3.Release:
    """Kueue from its pinned chart, in the `kueue-system` namespace the program declares."""
    # The chart's controller runs as non-root with every capability dropped: `restricted` fits.
    namespace = lab_namespace(
        "kueue-namespace", scope.lab, KUEUE_NAMESPACE, RESTRICTED, scope.provider, scope.parent
    )
    return k8s.helm.v3.Release(
        "kueue",
        chart=KUEUE_CHART,
        version=KUEUE_VERSION,
        namespace=namespace.metadata.name,
        values={"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(scope.lab))}},
        opts=scope.opts(namespace),
    )


def _topology_flavor(scope: Scope, serving: tuple[pulumi.Resource, ...]) -> dict[str, Any]:
    """A flavor spec for topology-aware scheduling over the lab's GPU nodes, one node per domain."""
    topology = k8s.apiextensions.CustomResource(
        "kueue-topology",
        api_version=API_VERSION,
        kind="Topology",
        metadata=scope.cluster_metadata(f"{scope.lab.namespace}-nodes", APP, COMPONENT),
        spec={"levels": [{"nodeLabel": HOSTNAME_TOPOLOGY}]},
        opts=scope.opts(*serving),
    )
    return {"nodeLabels": {GPU_NODE_LABEL: "true"}, "topologyName": topology.metadata["name"]}


def gang_opts(gang: Gang | None, component: str) -> tuple[dict[str, str], list[pulumi.Resource]]:
    """The labels and dependencies that get a `component` workload admitted by Kueue (none without it)."""
    if gang is None:
        return {}, []
    return gang.labels(component), [gang.queue, gang.priorities[component]]
