"""What Kueue v0.18.3 does with the lab's configuration and objects, restated from its source.

- Timeouts: `waitForPodsReady.timeout` runs from a workload's admission, `recoveryTimeout` from a
  started workload's first unready pod, and `recoveryTimeout` defaults to `timeout`
  (apis/config/v1beta2/configuration_types.go WaitForPodsReady; apis/config/v1beta2/defaults.go).
  Durations are Go durations (metav1.Duration).
- Preemption: a pending workload may preempt an admitted one of its own ClusterQueue only when
  `preemption.withinClusterQueue` is not Never (pkg/scheduler/preemption/preemption.go
  findCandidates); with LowerPriority the victim's priority must be lower, with
  LowerOrNewerEqualPriority lower, or equal and newer (pkg/scheduler/preemption/common,
  SatisfiesPreemptionPolicy). A workload's priority is the value of the WorkloadPriorityClass its
  `kueue.x-k8s.io/priority-class` label names, else 0 (pkg/controller/jobframework/reconciler.go
  ExtractPriority; pkg/constants DefaultPriority).
- Webhooks: the chart registers the pod (`mpod.kb.io`, failurePolicy Fail when the `pod`
  integration is on), Job (`mjob.kb.io`) and StatefulSet webhooks with the namespaceSelector of
  `managerConfig.managedJobsNamespaceSelector` (charts/kueue/templates/webhook/manifests.yaml), so
  every pod created in a namespace it selects is refused while Kueue does not answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULT_PRIORITY = 0
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
UNITS = {"h": 3600, "m": 60, "s": 1}


def seconds(duration: str) -> float:
    """A Go duration (`20m`, `1h30m`, `90s`) in seconds."""
    parts = GO_DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"{duration!r} is not a Go duration of h, m and s")
    return sum(float(n) * UNITS[u] for n, u in parts)


def pods_ready_timeouts(config: Mapping[str, Any]) -> dict[str, float]:
    """Kueue's two PodsReady clocks, in seconds, with Kueue's defaulting."""
    wait = config["waitForPodsReady"]
    timeout = seconds(wait["timeout"])
    return {"timeout": timeout, "recoveryTimeout": seconds(wait.get("recoveryTimeout", wait["timeout"]))}


def priority(labels: Mapping[str, str], classes: Mapping[str, int]) -> int:
    """A workload's priority from its labels and the WorkloadPriorityClasses (name -> value)."""
    name = labels.get(PRIORITY_LABEL)
    return classes[name] if name else DEFAULT_PRIORITY


def may_preempt(preemption: Mapping[str, str], pending: int, admitted: int, pending_is_newer: bool) -> bool:
    """Whether a pending workload of priority `pending` may evict an admitted one of `admitted`."""
    policy = preemption.get("withinClusterQueue", "Never")
    if policy == "LowerPriority":
        return admitted < pending
    if policy == "LowerOrNewerEqualPriority":
        return admitted < pending or (admitted == pending and not pending_is_newer)
    return False


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector with matchLabels and In/NotIn/Exists/DoesNotExist expressions."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        if (
            (operator == "In" and labels.get(key) not in values)
            or (operator == "NotIn" and present and labels[key] in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True
