"""Pod building blocks the trainer image's workloads share: security, volumes, GPU access, arguments.

The StatefulSet, the sweep and the dataset Job all run the trainer image; these helpers keep
their security settings, mounts and GPU wiring identical, so the consistency checks can hold
every one of them to the same rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lab.cluster import security
from lab.cluster.security import SIZES, container_security, harden
from lab.cluster.storage import DATASETS, RUNS, Storage
from lab.config import LabConfig
from trainer import contract

if TYPE_CHECKING:
    import pulumi

GPU_RESOURCE = "nvidia.com/gpu"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
GPU_RUNTIME_CLASS = "nvidia"
# The node label every kubelet sets to its node's name: the topology of "one node".
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# GPU nodes are often tainted so that only GPU work lands there (e.g. nvidia.com/gpu=present:NoSchedule):
# the device plugin and every pod that asks for a GPU tolerate it, whatever its value.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# The kubelet SIGKILLs the trainer a grace period after its SIGTERM: the emergency checkpoint, then exit.
EMERGENCY_CHECKPOINT_SECONDS = 30
GRACE_PERIOD_SECONDS = EMERGENCY_CHECKPOINT_SECONDS + 15

# NCCL and Gloo move tensors through shared memory; the container runtime's 64 MiB default is too
# small. Per rank of the pod, in GiB: NCCL's shared-memory transport joins the ranks of one pod.
SHM_GIB_PER_RANK = 2


def pod_security(lab: LabConfig) -> dict[str, Any]:
    """Pod-level security: the export's owner, never root, the runtime's default seccomp filter."""
    return security.pod_security(lab.trainer.uid)


def claim_volume(name: str, claim: Any, read_only: bool = False) -> dict[str, Any]:
    volume: dict[str, Any] = {"claimName": claim}
    if read_only:
        volume["readOnly"] = True
    return {"name": name, "persistentVolumeClaim": volume}


def mount(name: str, path: str, read_only: bool = False) -> dict[str, Any]:
    return {"name": name, "mountPath": path, **({"readOnly": True} if read_only else {})}


def training_volumes(storage: Storage, ranks: int = 1) -> list[dict[str, Any]]:
    """The dataset (read-only), the runs volume and a memory-backed /dev/shm for `ranks` ranks."""
    shm = f"{SHM_GIB_PER_RANK * ranks}Gi"
    return [
        claim_volume("data", storage.claim_name(DATASETS), read_only=True),
        claim_volume("runs", storage.claim_name(RUNS)),
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
    ]


def training_mounts() -> list[dict[str, Any]]:
    return [
        mount("data", contract.DATA_MOUNT, read_only=True),
        mount("runs", contract.RUNS_MOUNT),
        mount("shm", "/dev/shm"),
    ]


def gpu_pod_fields(lab: LabConfig) -> dict[str, Any]:
    """What a pod needs to get a GPU on a GPU lab, and nothing on a CPU lab."""
    if not lab.has_gpus:
        return {}
    return {
        "runtimeClassName": GPU_RUNTIME_CLASS,
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
    }


def training_resources(lab: LabConfig, ranks: int = 1) -> dict[str, Any]:
    """The CPU and memory of `ranks` training processes, and a whole GPU for each on GPU labs."""
    return SIZES["trainer"].times(ranks).resources(**({GPU_RESOURCE: ranks} if lab.has_gpus else {}))


def trainer_container(
    image: pulumi.Input[str], args: list[str], mounts: list[dict[str, Any]], **fields: Any
) -> dict[str, Any]:
    """A container of the trainer image, unprivileged."""
    return {
        "name": "trainer",
        "image": image,
        # By digest: the reference names one image, so a cached copy is always right.
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "securityContext": container_security(),
        "volumeMounts": mounts,
        "resources": SIZES["trainer"].resources(),
        **fields,
    }


def training_pod(
    lab: LabConfig,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    api_access: bool = False,
    ranks: int = 1,
    **fields: Any,
) -> dict[str, Any]:
    """The pod spec of `ranks` training processes: a GPU each on GPU labs, time for the emergency
    checkpoint; a service-account token only with `api_access` (lab.cluster.security.harden)."""
    return harden(
        {
            **gpu_pod_fields(lab),
            **fields,
            "terminationGracePeriodSeconds": GRACE_PERIOD_SECONDS,
            "securityContext": pod_security(lab),
            "containers": [{**container, "resources": training_resources(lab, ranks)}],
            "volumes": volumes,
        },
        api_access=api_access,
    )


# Pods hold the dataset to CIFAR-10's published sums, never a synthetic set's manifest: whoever
# can write the share could write a manifest too.
REQUIRE_CIFAR10 = "--require-cifar10"


def train_args(lab: LabConfig, runs: str, run_name: str, on_complete: str) -> list[str]:
    """The trainer's `train` subcommand with the stack's settings."""
    t = lab.trainer
    args = [
        "train",
        "--data", contract.DATA_MOUNT,
        REQUIRE_CIFAR10,
        "--runs", runs,
        "--run-name", run_name,
        "--model", t.model.value,
    ]  # fmt: skip
    # Left unset, the budget and learning rate are the model's recipe, which the trainer knows.
    if t.epochs is not None:
        args += ["--epochs", str(t.epochs)]
    if t.steps is not None:
        args += ["--steps", str(t.steps)]
    args += ["--batch-size", str(lab.batch_size)]
    if t.learning_rate is not None:
        args += ["--lr", str(t.learning_rate)]
    args += [
        "--seed", str(t.seed),
        "--backend", lab.backend,
        "--compression", t.compression.value,
        "--target-accuracy", str(t.target_accuracy),
        "--checkpoint-keep", str(t.checkpoint_keep),
        "--on-complete", on_complete,
    ]  # fmt: skip
    return args


def field_env(name: str, path: str) -> dict[str, Any]:
    """An environment variable filled in by the downward API."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
