"""Hand-written checks of the Kueue objects the program declares, against Kueue's published API.

kubernetes-validate knows no custom resources, so each rule below restates a field rule of
Kueue's v1beta2 API types or of its Configuration, and each check returns the problems it finds:

- kubernetes-sigs/kueue apis/kueue/v1beta2/resourceflavor_types.go (spec: nodeLabels, nodeTaints,
  tolerations, topologyName; "at least one nodeLabel is required when topology is set"; nodeLabels
  up to 8);
- apis/kueue/v1beta2/topology_types.go at v0.18.3 (spec.levels: 1 to 16 unique nodeLabels, each a
  label name, "the kubernetes.io/hostname label can only be used at the lowest level");
- apis/kueue/v1beta2/clusterqueue_types.go (resourceGroups: at most 16; coveredResources 1 to 64;
  flavors 1 to 64, each listing every covered resource in the same order; nominalQuota a
  non-negative quantity; queueingStrategy StrictFIFO or BestEffortFIFO; cohortName,
  namespaceSelector, ...);
- apis/kueue/v1beta2/localqueue_types.go (spec: clusterQueue, a DNS-1123 subdomain; stopPolicy;
  fairSharing);
- apis/kueue/v1beta2/workloadpriorityclass_types.go (no spec: `value`, an int32, required, and
  `description`, at most 2048 characters);
- the ClusterQueue's preemption (clusterqueue_types.go ClusterQueuePreemption: withinClusterQueue
  Never, LowerPriority or LowerOrNewerEqualPriority; reclaimWithinCohort Never, LowerPriority or Any);
- charts/kueue/values.yaml, `managerConfig.controllerManagerConfigYaml`: a
  config.kueue.x-k8s.io/v1beta2 Configuration (waitForPodsReady with timeout, blockAdmission,
  requeuingStrategy, recoveryTimeout; integrations.frameworks; managedJobsNamespaceSelector;
  resources.excludeResourcePrefixes), and site/content/en/docs/tasks/run/statefulset.md: the
  `statefulset` integration needs the `pod` one.
"""

from __future__ import annotations

import re
from typing import Any

API_VERSION = "kueue.x-k8s.io/v1beta2"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?|[mkMGTPE]|[eE][0-9]+)?$")  # non-negative
SPEC_FIELDS = {
    "ResourceFlavor": {"nodeLabels", "nodeTaints", "tolerations", "topologyName"},
    "ClusterQueue": {
        "resourceGroups", "cohortName", "queueingStrategy", "namespaceSelector", "flavorFungibility",
        "preemption", "admissionChecksStrategy", "stopPolicy", "fairSharing", "admissionScope",
    },
    "LocalQueue": {"clusterQueue", "stopPolicy", "fairSharing"},
    "Topology": {"levels"},
}  # fmt: skip
HOSTNAME = "kubernetes.io/hostname"
LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
WAIT_FOR_PODS_READY_FIELDS = {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
PRIORITY_CLASS_FIELDS = {"apiVersion", "kind", "metadata", "value", "description"}
WITHIN_CLUSTER_QUEUE = {"Never", "LowerPriority", "LowerOrNewerEqualPriority"}
RECLAIM_WITHIN_COHORT = {"Never", "LowerPriority", "Any"}


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def check_object(obj: dict[str, Any]) -> list[str]:
    """apiVersion, kind, name and the spec's fields of one Kueue object."""
    kind = obj.get("kind", "")
    where = f"{kind} {_name(obj)!r}"
    if obj.get("apiVersion") != API_VERSION or kind not in {*SPEC_FIELDS, "WorkloadPriorityClass"}:
        return [f"{where}: expected a {API_VERSION} kind the lab declares, not {kind!r}"]
    problems = []
    if not DNS_SUBDOMAIN.match(_name(obj)) or len(_name(obj)) > 253:
        problems.append(f"{where}: the name must be a DNS-1123 subdomain")
    if kind == "WorkloadPriorityClass":
        return problems + _priority_class(obj, where)
    unknown = set(obj.get("spec", {})) - SPEC_FIELDS[kind]
    if unknown:
        problems.append(f"{where}: unknown spec fields {sorted(unknown)}")
    if kind == "ClusterQueue":
        problems += _cluster_queue(obj["spec"], where)
    if kind == "LocalQueue" and not DNS_SUBDOMAIN.match(str(obj["spec"].get("clusterQueue", ""))):
        problems.append(f"{where}: spec.clusterQueue must name a ClusterQueue")
    if kind == "Topology":
        problems += _topology(obj["spec"], where)
    tas_flavor = kind == "ResourceFlavor" and "topologyName" in obj["spec"]
    if tas_flavor and not 1 <= len(obj["spec"].get("nodeLabels", {})) <= 8:
        problems.append(f"{where}: a flavor with a topology needs 1 to 8 nodeLabels")
    return problems


def _topology(spec: dict[str, Any], where: str) -> list[str]:
    labels = [level.get("nodeLabel", "") for level in spec.get("levels", [])]
    problems = []
    if not 1 <= len(labels) <= 16 or len(set(labels)) != len(labels):
        problems.append(f"{where}: levels must be 1 to 16 distinct node labels")
    problems += [f"{where}: {label!r} is not a label name" for label in labels if not LABEL_NAME.match(label)]
    if HOSTNAME in labels[:-1]:
        problems.append(f"{where}: {HOSTNAME} can only be the lowest level")
    return problems


def _priority_class(obj: dict[str, Any], where: str) -> list[str]:
    problems = [f"{where}: unknown field {f!r}" for f in sorted(set(obj) - PRIORITY_CLASS_FIELDS)]
    value = obj.get("value")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # numbers come back from the engine's mocks as floats
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        problems.append(f"{where}: value must be an int32")
    if len(str(obj.get("description", ""))) > 2048:
        problems.append(f"{where}: description is longer than 2048 characters")
    return problems


def _cluster_queue(spec: dict[str, Any], where: str) -> list[str]:
    problems = []
    preemption = spec.get("preemption", {})
    if preemption.get("withinClusterQueue", "Never") not in WITHIN_CLUSTER_QUEUE:
        problems.append(
            f"{where}: preemption.withinClusterQueue must be one of {sorted(WITHIN_CLUSTER_QUEUE)}"
        )
    if preemption.get("reclaimWithinCohort", "Never") not in RECLAIM_WITHIN_COHORT:
        problems.append(
            f"{where}: preemption.reclaimWithinCohort must be one of {sorted(RECLAIM_WITHIN_COHORT)}"
        )
    if spec.get("queueingStrategy", "BestEffortFIFO") not in {"StrictFIFO", "BestEffortFIFO"}:
        problems.append(f"{where}: queueingStrategy must be StrictFIFO or BestEffortFIFO")
    groups = spec.get("resourceGroups", [])
    if len(groups) > 16:
        problems.append(f"{where}: at most 16 resourceGroups")
    for group in groups:
        covered = group.get("coveredResources", [])
        if not 1 <= len(covered) <= 64 or len(set(covered)) != len(covered):
            problems.append(f"{where}: coveredResources must list 1 to 64 distinct resources")
        flavors = group.get("flavors", [])
        if not 1 <= len(flavors) <= 64:
            problems.append(f"{where}: a resource group needs 1 to 64 flavors")
        for flavor in flavors:
            names = [r.get("name") for r in flavor.get("resources", [])]
            if names != covered:
                name = flavor.get("name")
                problems.append(f"{where}: flavor {name!r} lists {names}, not the covered {covered} in order")
            for quota in flavor.get("resources", []):
                if not QUANTITY.match(str(quota.get("nominalQuota", ""))):
                    problems.append(f"{where}: nominalQuota of {quota.get('name')} is not a quantity >= 0")
    return problems


def check_manager_config(config: dict[str, Any]) -> list[str]:
    """The Configuration the program hands Kueue's chart."""
    problems = []
    if (config.get("apiVersion"), config.get("kind")) != ("config.kueue.x-k8s.io/v1beta2", "Configuration"):
        problems.append("the manager config must be a config.kueue.x-k8s.io/v1beta2 Configuration")
    wait = config.get("waitForPodsReady")
    if not isinstance(wait, dict) or set(wait) - WAIT_FOR_PODS_READY_FIELDS or "timeout" not in wait:
        problems.append(f"waitForPodsReady must set a timeout and only {sorted(WAIT_FOR_PODS_READY_FIELDS)}")
    frameworks = config.get("integrations", {}).get("frameworks", [])
    if "statefulset" in frameworks and "pod" not in frameworks:
        problems.append("the statefulset integration needs the pod integration")
    return problems
