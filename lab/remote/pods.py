"""The training pods as the cluster sees them, read with kubectl on the server node over SSH."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import STACKS_DIR, LabConfig
from lab.remote.server_cluster import kubectl_get

COMPONENT_LABEL = "app.kubernetes.io/component"
POD_INDEX = "apps.kubernetes.io/pod-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class Rank:
    """A training pod: its index, the global ranks its workers hold, and where it runs."""

    pod: str
    component: str  # the training run's or the sweep's (app.kubernetes.io/component)
    index: int  # the pod's ordinal (a sweep pod's completion index)
    rank: str  # its ranks as shown: "4", or "4-5" for a pod of two workers
    node: str
    phase: str
    restarts: int


def training_components() -> set[str]:
    """The DDP StatefulSet's and the sweep Job's components; the dataset and image-build Jobs are not
    ranks. Imported here, not with the module: lab.cluster declares objects through
    pulumi_kubernetes, which every other `labctl` command would then load for nothing."""
    from lab.cluster import sweep, training

    return {training.COMPONENT, sweep.COMPONENT}


def ranks(pods: dict[str, Any], ranks_per_pod: int = 1) -> list[Rank]:
    """The pods of the DDP StatefulSet in rank order, then the sweep Job's by index.

    A training pod of `ranks_per_pod` workers holds the global ranks from index x ranks_per_pod on
    (torchrun hands each agent a contiguous block, in node-rank order: trainer/launch.py); a sweep
    pod is a run of its own, one rank.
    """
    from lab.cluster import training  # here, not with the module: training_components says why

    found = []
    components = training_components()
    for pod in pods.get("items", []):
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        labels = meta.get("labels", {})
        if labels.get(COMPONENT_LABEL) not in components:
            continue
        # A StatefulSet pod's ordinal, or a sweep pod's completion index (an annotation before 1.28).
        annotations = meta.get("annotations", {})
        index = labels.get(POD_INDEX) or labels.get(COMPLETION_INDEX) or annotations.get(COMPLETION_INDEX)
        ordinal = int(index if index is not None else meta["name"].rsplit("-", 1)[-1])
        component = labels[COMPONENT_LABEL]
        per_pod = ranks_per_pod if component == training.COMPONENT else 1
        first, last = ordinal * per_pod, (ordinal + 1) * per_pod - 1
        found.append(
            Rank(
                pod=meta["name"],
                component=component,
                index=ordinal,
                rank=str(first) if first == last else f"{first}-{last}",
                node=spec.get("nodeName") or "-",
                phase=status.get("phase", "Unknown"),
                restarts=sum(c.get("restartCount", 0) for c in status.get("containerStatuses", [])),
            )
        )
    return sorted(found, key=lambda r: (r.component != training.COMPONENT, r.index, r.pod))


def training_ranks(cfg: LabConfig, stack: str, stacks_dir: Path = STACKS_DIR) -> list[Rank]:
    """The lab namespace's training pods, as the server's kubectl lists them."""
    pods = kubectl_get(cfg, stack, stacks_dir, "pods", "-n", cfg.namespace)
    return ranks(pods, cfg.world.ranks_per_pod)
