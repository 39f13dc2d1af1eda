"""The dataset Job: CIFAR-10 onto the dataset volume, checksum-verified, once.

The trainer's `data download` finds a present and verified copy and does nothing, so the Job
is safe to run again; it runs the trainer image, which is why it waits for the image build.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.image import TrainerImage
from lab.cluster.pods import claim_volume, mount, pod_security, trainer_container
from lab.cluster.scope import Scope
from lab.cluster.security import SIZES, harden
from lab.cluster.storage import DATASETS, Storage
from trainer import contract

APP = "trainer"
COMPONENT = "dataset"
DOWNLOAD_TIMEOUT = "30m"


def declare_dataset(scope: Scope, storage: Storage, image: TrainerImage) -> k8s.batch.v1.Job:
    container = trainer_container(
        image.reference,
        ["data", "download", "--dir", contract.DATA_MOUNT],
        [mount("data", contract.DATA_MOUNT)],
        resources=SIZES["dataset"].resources(),
    )
    return k8s.batch.v1.Job(
        "dataset",
        metadata=scope.job_metadata("dataset", APP, COMPONENT),
        spec={
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT)},
                "spec": harden(
                    {
                        "restartPolicy": "Never",
                        "securityContext": pod_security(scope.lab),
                        "containers": [container],
                        "volumes": [claim_volume("data", storage.claim_name(DATASETS))],
                    }
                ),
            },
        },
        opts=scope.opts(
            image.job,
            custom_timeouts=pulumi.CustomTimeouts(create=DOWNLOAD_TIMEOUT, update=DOWNLOAD_TIMEOUT),
        ),
    )
