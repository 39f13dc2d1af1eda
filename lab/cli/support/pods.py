"""The training pods as the cluster sees them, read with kubectl on the server node over SSH."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.cli.common.console import CliError
from lab.config import STACKS_DIR, LabConfig, stack_flags
from lab.remote.gpu_nodes import gpu_shortfalls
from lab.remote.server_cluster import KUBECTL, NO_CLUSTER, cluster_probe, no_cluster
from lab.remote.ssh import Remote

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


def server_kubectl(cfg: LabConfig, stack: str, stacks_dir: Path, *args: str) -> str:
    """`kubectl ARGS` by the server's own kubectl (admin kubeconfig, under sudo): its output."""
    _, kubectl = KUBECTL[cfg.distribution]
    script = f"{cluster_probe(cfg)}; sudo -n {kubectl} {shlex.join(args)}"
    server = Remote.of(stack, cfg.ssh, cfg.server)
    done = server.run(script, timeout=60)
    if done.returncode == NO_CLUSTER:
        raise CliError(no_cluster(cfg, stack, stacks_dir))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise KubectlFailed(
            f"kubectl on {cfg.server.name} failed: {last};"
            f" check `labctl validate {stack_flags(stack, stacks_dir)}`",
            last,
        )
    return done.stdout


class KubectlFailed(CliError):
    """The server's kubectl ran and failed; `last` is the last line it wrote."""

    def __init__(self, message: str, last: str) -> None:
        super().__init__(message)
        self.last = last


def _kubectl_get(cfg: LabConfig, stack: str, stacks_dir: Path, *what: str) -> dict[str, Any]:
    """`kubectl get WHAT -o json` by the server's own kubectl."""
    return json.loads(server_kubectl(cfg, stack, stacks_dir, "get", *what, "-o", "json"))


def training_ranks(cfg: LabConfig, stack: str, stacks_dir: Path = STACKS_DIR) -> list[Rank]:
    """The lab namespace's training pods, as the server's kubectl lists them."""
    pods = _kubectl_get(cfg, stack, stacks_dir, "pods", "-n", cfg.namespace)
    return ranks(pods, cfg.world.ranks_per_pod)


def gpu_node_lines(cfg: LabConfig, stack: str, stacks_dir: Path = STACKS_DIR) -> list[str]:
    """One line per node whose allocatable GPUs are not the stack's (lab.remote.gpu_nodes); none on
    CPU labs."""
    return gpu_shortfalls(cfg, _kubectl_get(cfg, stack, stacks_dir, "nodes")) if cfg.has_gpus else []
