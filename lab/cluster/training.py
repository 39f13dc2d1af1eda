"""The DDP training run: a headless Service and a StatefulSet with one rank per pod.

The StatefulSet gives each pod a stable name and ordinal; the headless Service gives rank 0 a
stable DNS name that every rank rendezvouses at. Ranks find their place from the environment
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), the same contract torchrun fills in on one machine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.image import TrainerImage
from lab.cluster.pods import (
    RUNS_DIR,
    field_env,
    train_args,
    trainer_container,
    training_mounts,
    training_pod,
    training_volumes,
)
from lab.cluster.scope import Scope, kubernetes_minor
from lab.cluster.storage import Storage
from lab.config import LabConfig, Placement

APP = "trainer"
COMPONENT = "training"
NAME = "trainer"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# A rank turns Ready when the whole run is complete, and `pulumi up` waits for that.
TRAINING_TIMEOUT = "12h"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
POD_INDEX_LABEL_MINOR = 28  # the StatefulSet controller sets the label from 1.28 on
POD_NETWORK_INTERFACE = "eth0"


@dataclass(frozen=True)
class Training:
    service: k8s.core.v1.Service
    statefulset: k8s.apps.v1.StatefulSet
    run_name: str

    @property
    def pod_zero(self) -> str:
        """Rank 0's pod, the one that prints progress."""
        return f"{NAME}-0"


def run_name(lab: LabConfig, image_tag: str) -> str:
    """A name that changes exactly when what the run computes changes: a new name is a new run.

    Checkpoint retention is left out on purpose: keeping more checkpoints is not a new run.
    """
    t = lab.trainer
    inputs = {
        "image": image_tag,
        "model": t.model.value,
        "epochs": t.epochs,
        "batch_size": t.batch_size,
        "lr": t.learning_rate,
        "seed": t.seed,
        "backend": lab.backend,
        "compression": t.compression.value,
        "target_accuracy": t.target_accuracy,
        "world_size": lab.replicas,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:10]
    return f"{t.model.value}-{digest}"


def master_address(lab: LabConfig) -> str:
    """Rank 0's stable DNS name through the headless Service."""
    return f"{NAME}-0.{NAME}.{lab.namespace}.svc.cluster.local"


def _rank_env(lab: LabConfig) -> list[dict[str, Any]]:
    env = [
        {"name": "MASTER_ADDR", "value": master_address(lab)},
        {"name": "MASTER_PORT", "value": str(lab.trainer.port)},
        {"name": "WORLD_SIZE", "value": str(lab.replicas)},
        # Older clusters have no pod-index label; the trainer then reads the ordinal off the name.
        field_env("POD_NAME", "metadata.name"),
    ]
    if kubernetes_minor(lab) >= POD_INDEX_LABEL_MINOR:
        env.append(field_env("RANK", f"metadata.labels['{POD_INDEX_LABEL}']"))
    return env


def _network(lab: LabConfig) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Pod fields and environment for the collectives' network: the host's NICs or the pod's."""
    if not lab.trainer.host_network:
        return {}, [
            {"name": "NCCL_SOCKET_IFNAME", "value": POD_NETWORK_INTERFACE},
            {"name": "GLOO_SOCKET_IFNAME", "value": POD_NETWORK_INTERFACE},
        ]
    # On the host network each node has its own interface name; the trainer picks its node's.
    interfaces = ",".join(f"{n.name}={n.interface}" for n in lab.nodes if n.interface)
    env = [field_env("NODE_NAME", "spec.nodeName")]
    if interfaces:
        env.append({"name": "LAB_SOCKET_IFNAMES", "value": interfaces})
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, env


def _placement(lab: LabConfig, selector: dict[str, str]) -> dict[str, Any]:
    term = [{"labelSelector": {"matchLabels": selector}, "topologyKey": HOSTNAME_TOPOLOGY}]
    if lab.trainer.placement is Placement.SPREAD:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}


def _pod_spec(scope: Scope, storage: Storage, image: TrainerImage, name: str) -> dict[str, Any]:
    lab = scope.lab
    network_fields, network_env = _network(lab)
    container = trainer_container(
        image.reference,
        train_args(lab, RUNS_DIR, name, on_complete="wait"),
        training_mounts(),
        env=_rank_env(lab) + network_env,
        ports=[{"name": "rendezvous", "containerPort": lab.trainer.port}],
        # Ready means "this run is complete": the pod stays up and says so instead of restarting.
        readinessProbe={
            "exec": {"command": ["python", "-m", "trainer", "probe", "--run", f"{RUNS_DIR}/{name}"]},
            "periodSeconds": 30,
            "timeoutSeconds": 20,
        },
    )
    volumes = training_volumes(storage)
    return training_pod(
        lab, container, volumes, affinity=_placement(lab, scope.selector(APP, COMPONENT)), **network_fields
    )


def declare_training(
    scope: Scope, storage: Storage, image: TrainerImage, dataset: pulumi.Resource
) -> Training:
    lab = scope.lab
    name = run_name(lab, image.tag)
    service = k8s.core.v1.Service(
        "trainer",
        metadata=scope.metadata(NAME, APP, COMPONENT),
        spec={
            "clusterIP": "None",
            # Ranks must resolve rank 0 long before any of them is Ready (Ready = run complete).
            "publishNotReadyAddresses": True,
            "selector": scope.selector(APP, COMPONENT),
            "ports": [{"name": "rendezvous", "port": lab.trainer.port, "targetPort": "rendezvous"}],
        },
        opts=scope.opts(),
    )
    statefulset = k8s.apps.v1.StatefulSet(
        "trainer",
        metadata=scope.metadata(NAME, APP, COMPONENT, annotations={"k8scifar/run": name}),
        spec={
            "serviceName": service.metadata.name,
            "replicas": lab.replicas,
            # Every rank must be up at once for the rendezvous; ordered start-up would deadlock.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": scope.selector(APP, COMPONENT)},
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT)},
                "spec": _pod_spec(scope, storage, image, name),
            },
        },
        opts=scope.opts(
            image.job,
            dataset,
            # A rolling update waits for each new rank to turn Ready, which it cannot do while
            # the other ranks still run the old inputs: a new run replaces the whole set instead,
            # old pods first so that their GPUs are free.
            replace_on_changes=["spec"],
            delete_before_replace=True,
            custom_timeouts=pulumi.CustomTimeouts(create=TRAINING_TIMEOUT, update=TRAINING_TIMEOUT),
        ),
    )
    return Training(service, statefulset, name)
