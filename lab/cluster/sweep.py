"""The hyperparameter sweep: an Indexed Job, one hyperparameter set per completion index.

The sets come from the trainer's own expansion of the stack's search space and travel in a
ConfigMap as the sweep file; index i trains set i alone (one process, one GPU on GPU labs)
into its own folder `runs/<sweep name>/<i>/`, and at most `parallelism` sets run at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.gang import Gang, gang_opts
from lab.cluster.image import TrainerImage
from lab.cluster.pods import (
    mount,
    train_args,
    trainer_container,
    training_mounts,
    training_pod,
    training_volumes,
)
from lab.cluster.scope import Scope
from lab.cluster.storage import Storage
from lab.config import LabConfig
from trainer import contract
from trainer.sweep import sweep_file, sweep_file_text

APP = "trainer"
COMPONENT = "sweep"
SWEEP_DIR = "/sweep"
SWEEP_FILE_KEY = "sweep.json"
SWEEP_TIMEOUT = "48h"


@dataclass(frozen=True)
class SweepRun:
    job: k8s.batch.v1.Job
    name: str
    sets: int


def sweep_name(content: dict[str, Any], image_tag: str) -> str:
    """Named after the sets and the image: a changed space or changed code is a new sweep."""
    digest = hashlib.sha256(json.dumps([content, image_tag], sort_keys=True).encode()).hexdigest()
    return f"sweep-{digest[:10]}"


def _container(lab: LabConfig, image: TrainerImage, name: str) -> dict[str, Any]:
    # The trainer reads its set's index from JOB_COMPLETION_INDEX, which the Job controller sets,
    # and writes it to <runs>/<run name>/<index>: one folder per set under the sweep's folder.
    args = train_args(lab, contract.RUNS_MOUNT, name, on_complete="exit")
    return trainer_container(
        image.reference,
        [*args, "--sweep", f"{SWEEP_DIR}/{SWEEP_FILE_KEY}"],
        [*training_mounts(), mount("sweep", SWEEP_DIR, read_only=True)],
        # Each set trains alone: a world of one rank, its store on the pod's loopback.
        env=[
            {"name": contract.MASTER_ADDR, "value": "127.0.0.1"},
            {"name": contract.MASTER_PORT, "value": str(lab.trainer.port)},
            {"name": contract.WORLD_SIZE, "value": "1"},
            {"name": contract.RANK, "value": "0"},
        ],
    )


def declare_sweep(
    scope: Scope,
    storage: Storage,
    image: TrainerImage,
    dataset: pulumi.Resource,
    training: pulumi.Resource,
    gang: Gang | None,
) -> SweepRun | None:
    lab = scope.lab
    if lab.sweep is None:
        return None
    content = sweep_file(lab.sweep.space())
    sets = len(content["sets"])
    name = sweep_name(content, image.tag)
    sweep_map = k8s.core.v1.ConfigMap(
        "sweep",
        metadata=scope.metadata(name, APP, COMPONENT),
        data={SWEEP_FILE_KEY: sweep_file_text(lab.sweep.space())},
        immutable=True,
        opts=scope.opts(),
    )
    volumes = [
        *training_volumes(storage),
        {"name": "sweep", "configMap": {"name": sweep_map.metadata.name}},
    ]
    queue_labels, queue = gang_opts(gang, COMPONENT)
    metadata = scope.job_metadata(name, APP, COMPONENT)
    job = k8s.batch.v1.Job(
        "sweep",
        metadata={**metadata, "labels": {**metadata["labels"], **queue_labels}},
        spec={
            "completionMode": "Indexed",
            "completions": sets,
            "parallelism": lab.sweep_parallelism,
            # A retry per set on average; a set that fails for good fails the sweep.
            "backoffLimit": sets,
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT)},
                "spec": training_pod(lab, _container(lab, image, name), volumes, restartPolicy="Never"),
            },
        },
        opts=scope.opts(
            image.job,
            dataset,
            # After the training run: it is queued first, and with Kueue's StrictFIFO it is admitted
            # first; the sweep gets the GPUs the run leaves, all of them once it has scaled to zero.
            training,
            *queue,
            custom_timeouts=pulumi.CustomTimeouts(create=SWEEP_TIMEOUT, update=SWEEP_TIMEOUT),
        ),
    )
    return SweepRun(job, name, sets)
