"""The DDP training run: a headless Service and a StatefulSet of pods that each run a block of ranks.

The StatefulSet gives each pod a stable name and ordinal; the headless Service gives rank 0 a
stable DNS name that every pod's torchrun rendezvouses at. Each pod is one torchrun node
(`python -m trainer launch`) with one worker per GPU it holds (lab.config.world), placed by its
environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, PET_NPROC_PER_NODE, RANK). A pod turns Ready
once its ranks have joined the process group and trained a step, so `pulumi up` returns when
every rank trains; when the run is complete, rank 0 scales the StatefulSet to zero.

How many replicas the program declares (`declared_replicas`): a run is its name (`run_name`, a
hash of what it computes, world size included). The program reads the StatefulSet the cluster
holds as it runs; when that is this very run and its rank 0 has scaled it to zero (`handed_back`),
the program declares zero, and the run's world size in every other case. No `ignoreChanges`: the engine puts
the stored value of an ignored property in place of the program's, also when it replaces the
resource (pulumi/pulumi pkg/resource/deploy/step_generator.go `processIgnoreChanges`), and a
`pulumi refresh` stores the live count (pulumi-kubernetes provider/pkg/provider/provider.go
Read), so a finished run's zero would be the next run's count. And no replacement for a change of
`spec.replicas` alone: pulumi-kubernetes compares the new inputs with the live state it stored
(provider.go Diff), so an unrefreshed state after a scale-down differs from a finished run's zero
in the replica count only, which is an in-place update to what the cluster already has.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.awaits import TRAINING_TIMEOUT
from lab.cluster.gang import TOPOLOGY_ANNOTATION, Gang, gang_opts
from lab.cluster.image import TrainerImage
from lab.cluster.live_jobs import read_object
from lab.cluster.pods import (
    HOSTNAME_TOPOLOGY,
    field_env,
    mount,
    train_args,
    trainer_container,
    training_mounts,
    training_pod,
    training_volumes,
)
from lab.cluster.release import ReleaseRights, declare_release_rights
from lab.cluster.scope import Scope
from lab.cluster.storage import Storage
from lab.config import LabConfig, Placement
from trainer import contract

APP = "trainer"
COMPONENT = "training"
NAME = "trainer"
# torchrun restarts a failed worker group this often inside the pod before the container fails.
MAX_RESTARTS = 3
# The readiness signal lives in a memory-backed volume of the pod: it must not outlive the pod.
SIGNALS_DIR = "/run/k8scifar"
READY_FILE = f"{SIGNALS_DIR}/training"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
RUN_ANNOTATION = "k8scifar/run"
POD_INDEX_LABEL_MINOR = 28  # the StatefulSet controller sets the label from 1.28 on
POD_NETWORK_INTERFACE = "eth0"
# The field managers pulumi-kubernetes writes under: this name for its plain create, with a suffix
# of its own for a server-side apply (as the API server lists them in `metadata.managedFields`).
LAB_FIELD_MANAGER = "pulumi-kubernetes"


@dataclass(frozen=True)
class Training:
    service: k8s.core.v1.Service
    statefulset: k8s.apps.v1.StatefulSet
    rights: ReleaseRights


def run_name(lab: LabConfig, image_tag: str) -> str:
    """A name that changes exactly when what the run computes changes: a new name is a new run.

    Checkpoint retention is left out on purpose: keeping more checkpoints is not a new run.
    """
    t = lab.trainer
    inputs = {
        "image": image_tag,
        "model": t.model.value,
        "epochs": t.epochs,
        "steps": t.steps,
        "batch_size": lab.batch_size,
        "lr": t.learning_rate,
        "seed": t.seed,
        "backend": lab.backend,
        "compression": t.compression.value,
        "target_accuracy": t.target_accuracy,
        "world_size": lab.replicas,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:10]
    return f"{t.model.value}-{digest}"


def replicas_holders(statefulset: Mapping[str, Any]) -> set[str]:
    """The field managers that hold the StatefulSet's `spec.replicas` (its `metadata.managedFields`)."""
    return {
        str(entry.get("manager"))
        for entry in (statefulset.get("metadata") or {}).get("managedFields") or []
        if isinstance(entry, dict) and "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    }


def handed_back(statefulset: Mapping[str, Any], run: str) -> bool:
    """Whether `statefulset`, as the API server reports it, is the run `run` scaled to zero by its
    own rank 0: the run's annotation, no replicas, and `spec.replicas` held by no field manager but
    the lab's own.

    Rank 0 writes the zero through the `scale` subresource (trainer/pod/handoff.py), and the API
    server records a write of zero there under no manager at all: autoscaling/v1's
    `ScaleSpec.replicas` is `omitempty`, so to the field manager a zero is no field, and the scale
    handler takes `spec.replicas` from every entry of the StatefulSet (k8s.io/api autoscaling/v1
    types.go; apimachinery pkg/util/managedfields/scalehandler.go `ToParent`; measured on
    Kubernetes 1.34.4 by tests/controlplane/test_pulumi_up.py). An `up` that then declares the
    zero writes it under the lab's own manager. A zero written to the StatefulSet itself (`kubectl
    edit` or `patch`) is held by its writer: no finished run. `kubectl scale --replicas=0` reaches
    the API server as the hand-off does and is taken as one: `up` leaves it at zero until the
    run's inputs change."""
    metadata = statefulset.get("metadata") or {}
    spec = statefulset.get("spec") or {}
    if (metadata.get("annotations") or {}).get(RUN_ANNOTATION) != run or spec.get("replicas") != 0:
        return False
    return all(holder.startswith(LAB_FIELD_MANAGER) for holder in replicas_holders(statefulset))


def declared_replicas(lab: LabConfig, kubeconfig: str, namespace: str, run: str) -> int:
    """The StatefulSet's `spec.replicas` for run `run`: zero once its rank 0 has handed the run back
    (`handed_back`), the run's pods otherwise; with no cluster to ask (a first `up`, `labctl
    render`, an API server that does not answer), the run's pods."""
    if kubeconfig:
        live = read_object(kubeconfig, "StatefulSet", namespace, NAME, lab.allow_kubeconfig_commands)
        if live is not None and handed_back(live, run):
            return 0
    return lab.world.pods


def pod_address(lab: LabConfig, pod: str) -> str:
    """A rank's stable DNS name through the headless Service."""
    return f"{pod}.{NAME}.{lab.namespace}.svc.cluster.local"


def master_address(lab: LabConfig) -> str:
    """Rank 0's stable DNS name: where torchrun's rendezvous store listens."""
    return pod_address(lab, f"{NAME}-0")


def _rank_env(lab: LabConfig) -> list[dict[str, Any]]:
    env = [
        {"name": contract.MASTER_ADDR, "value": master_address(lab)},
        {"name": contract.MASTER_PORT, "value": str(lab.trainer.port)},
        {"name": contract.WORLD_SIZE, "value": str(lab.world.ranks)},
        {"name": contract.NPROC_PER_NODE, "value": str(lab.world.ranks_per_pod)},
        # Older clusters have no pod-index label; the trainer then reads the ordinal off the name.
        field_env(contract.POD_NAME, "metadata.name"),
        # The kubelet expands $(POD_NAME), declared above, into this pod's own DNS name.
        {"name": contract.LAB_LOCAL_ADDR, "value": pod_address(lab, f"$({contract.POD_NAME})")},
    ]
    if lab.kubernetes_minor >= POD_INDEX_LABEL_MINOR:
        env.append(field_env(contract.RANK, f"metadata.labels['{POD_INDEX_LABEL}']"))
    return env


def _network(lab: LabConfig) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Pod fields and environment for the collectives' network: the host's NICs or the pod's."""
    if not lab.trainer.host_network:
        return {}, [
            {"name": name, "value": POD_NETWORK_INTERFACE} for name in contract.SOCKET_IFNAME_VARIABLES
        ]
    # On the host network each node has its own interface name; the trainer picks its node's.
    interfaces = ",".join(f"{n.name}={n.interface}" for n in lab.nodes if n.interface)
    env = [field_env(contract.NODE_NAME, "spec.nodeName")]
    if interfaces:
        env.append({"name": contract.LAB_SOCKET_IFNAMES, "value": interfaces})
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, env


def _ports(lab: LabConfig) -> dict[str, Any]:
    """The rendezvous port as a container port, on the pod network only.

    On a host-network pod the API server turns every containerPort into a hostPort of the same
    number (kubernetes pkg/apis/core/v1/defaults.go, defaultHostNetworkPorts), and the scheduler
    places no two pods with one hostPort on a node (NodePorts filter): packed ranks, which share
    a template, could then never share their node. Only rank 0 listens on the port (torchrun's
    store, `is_host`), and the Service targets it by number, so nothing needs it declared there.
    """
    if lab.trainer.host_network:
        return {}
    ports = [{"name": "rendezvous", "containerPort": lab.trainer.port}]
    if lab.observability.enabled:
        ports.append({"name": "metrics", "containerPort": lab.observability.metrics_port})
    return {"ports": ports}


def _placement(lab: LabConfig, selector: dict[str, str]) -> dict[str, Any]:
    """The pods' affinity field: `spread` keeps them on different nodes (as evenly as the GPUs allow when
    there are more pods than nodes); `pack` keeps them on one node, unless Kueue's topology-aware
    scheduling packs them (the template's annotation, `_template_annotations`), and then none."""
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": HOSTNAME_TOPOLOGY}
    if lab.trainer.placement is Placement.SPREAD:
        nodes = len(lab.gpu_nodes) if lab.has_gpus else len(lab.nodes)
        if lab.world.pods > nodes:
            preferred = {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
            }
            return {"affinity": {"podAntiAffinity": preferred}}
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    if lab.packs_by_topology:
        return {}
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def _template_annotations(lab: LabConfig, gang: Gang | None) -> dict[str, str]:
    """Kueue's topology request, where it packs the pods: as few nodes as hold them (lab.cluster.gang)."""
    if gang is None or not lab.packs_by_topology:
        return {}
    return {TOPOLOGY_ANNOTATION: HOSTNAME_TOPOLOGY}


def launch_args(lab: LabConfig, name: str) -> list[str]:
    """The pod's arguments: torchrun (one node per pod) around the trainer's `train`."""
    train = train_args(lab, contract.RUNS_MOUNT, name, on_complete="release")
    # Each rank serves its metrics for Prometheus to scrape (lab.cluster.observability).
    metrics = ["--metrics-port", str(lab.observability.metrics_port)] if lab.observability.enabled else []
    return ["launch", "--max-restarts", str(MAX_RESTARTS), "--", *train, "--ready-file", READY_FILE, *metrics]


def _pod_spec(
    scope: Scope, storage: Storage, image: TrainerImage, name: str, account: pulumi.Input[str]
) -> dict[str, Any]:
    lab = scope.lab
    network_fields, network_env = _network(lab)
    container = trainer_container(
        image.reference,
        launch_args(lab, name),
        [*training_mounts(), mount("signals", SIGNALS_DIR)],
        env=_rank_env(lab) + network_env,
        **_ports(lab),
        # Ready means "this rank has joined the process group and trains" (trainer/pod/readiness.py).
        readinessProbe={
            "exec": {"command": ["python", "-m", "trainer", "probe", "--ready", READY_FILE]},
            "periodSeconds": 10,
            "timeoutSeconds": 10,
        },
        # A crashed rank's last log lines become its termination message, which the pod's
        # status (and so `pulumi up`'s report on a failed StatefulSet) carries.
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    volumes = [
        *training_volumes(storage, lab.world.ranks_per_pod),
        {"name": "signals", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    return training_pod(
        lab,
        container,
        volumes,
        ranks=lab.world.ranks_per_pod,
        **_placement(lab, scope.selector(APP, COMPONENT)),
        # The token is how rank 0 scales the StatefulSet to zero; its Role allows nothing else.
        api_access=True,
        serviceAccountName=account,
        **network_fields,
    )


def replaced_on(spec: Mapping[str, Any]) -> list[str]:
    """The StatefulSet's replaceOnChanges: every field of its spec but the replica count."""
    return [f"spec.{key}" for key in spec if key != "replicas"]


def declare_training(
    scope: Scope, storage: Storage, image: TrainerImage, dataset: pulumi.Resource, gang: Gang | None
) -> Training:
    lab = scope.lab
    queue_labels, queue = gang_opts(gang, COMPONENT)
    name = run_name(lab, image.tag)
    rights = declare_release_rights(scope, NAME, APP, COMPONENT)
    service = k8s.core.v1.Service(
        "trainer",
        metadata=scope.metadata(NAME, APP, COMPONENT),
        spec={
            "clusterIP": "None",
            # Ranks must resolve rank 0 long before any of them is Ready (Ready = run complete).
            "publishNotReadyAddresses": True,
            "selector": scope.selector(APP, COMPONENT),
            # By number: host-network ranks declare no container port to name (_ports).
            "ports": [{"name": "rendezvous", "port": lab.trainer.port, "targetPort": lab.trainer.port}],
        },
        opts=scope.opts(),
    )
    # Derived from the secret kubeconfig, but it is only a replica count.
    replicas = pulumi.Output.unsecret(
        pulumi.Output.all(scope.kubeconfig, scope.namespace).apply(
            lambda v: declared_replicas(lab, v[0], v[1], name)
        )
    )
    spec = {
        "serviceName": service.metadata.name,
        # Zero once the run's rank 0 has handed it back, the run's pods otherwise (module docstring).
        "replicas": replicas,
        # Every rank must be up at once for the rendezvous; ordered start-up would deadlock.
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": scope.selector(APP, COMPONENT)},
        "template": {
            "metadata": {
                "labels": scope.labels(APP, COMPONENT),
                **({"annotations": a} if (a := _template_annotations(lab, gang)) else {}),
            },
            "spec": _pod_spec(scope, storage, image, name, rights.service_account.metadata.name),
        },
    }
    statefulset = k8s.apps.v1.StatefulSet(
        "trainer",
        metadata={
            **scope.metadata(NAME, APP, COMPONENT, annotations={RUN_ANNOTATION: name}),
            # With Kueue the ranks are one pod group, admitted all together or not at all, ahead of a sweep.
            "labels": {**scope.labels(APP, COMPONENT), **queue_labels},
        },
        spec=spec,
        opts=scope.opts(
            image.job,
            dataset,
            *rights.resources,
            *queue,
            # A rolling update waits for each new rank to turn Ready, which it cannot do while
            # the other ranks still run the old inputs: a new run replaces the whole set instead,
            # old pods first so that their GPUs are free. The replica count alone is no new run:
            # it changes in place (module docstring).
            replace_on_changes=replaced_on(spec),
            delete_before_replace=True,
            custom_timeouts=pulumi.CustomTimeouts(create=TRAINING_TIMEOUT, update=TRAINING_TIMEOUT),
        ),
    )
    return Training(service, statefulset, rights)
