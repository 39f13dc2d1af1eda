"""What the cluster already has (`k8scifar:provides`): the parts the lab then neither declares nor
installs, on a cluster the stack names by kubeconfig or on machines the lab bootstraps."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from lab.config.facts import DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, EXPORT_PATH
from lab.config.keys import DnsLabel, KeyModel

# A StorageClass is named as any object is: a DNS subdomain (Kubernetes
# apimachinery/pkg/util/validation, IsDNS1123Subdomain, which ValidateClassName applies).
StorageClassName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN, max_length=DNS_SUBDOMAIN_MAX)]


class Volume(KeyModel):
    """Where the dataset and the runs live when the lab exports no NFS folder of its own: exactly
    one of the two keys."""

    storage_class: StorageClassName | None = Field(
        default=None,
        description="A StorageClass of the cluster that provisions ReadWriteMany volumes: the lab's"
        " two claims (datasets, runs) ask it for theirs.",
    )
    shared_folder: str | None = Field(
        default=None,
        description="A folder every node already mounts at this path (absolute, of letters, digits"
        " and `.` `_` `-`), holding `datasets/` and `runs/` that `trainer.uid` may write: the lab's"
        " volumes are those two folders on each node, and it installs no NFS server or client.",
    )

    @field_validator("shared_folder")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return value
        path = PurePosixPath(value)
        if not re.fullmatch(EXPORT_PATH, value) or ".." in path.parts or path == PurePosixPath("/"):
            raise ValueError(
                f"{value!r} is not an absolute folder below / of letters, digits, '.', '_', '-' and '/';"
                " give the path every node mounts the shared folder at, such as /mnt/shared"
            )
        return str(path)

    @model_validator(mode="after")
    def _one_kind(self) -> Volume:
        if (self.storage_class is None) == (self.shared_folder is None):
            raise ValueError(
                "names the volume by exactly one of storageClass (the cluster provisions it) and"
                " sharedFolder (every node mounts it); keep one"
            )
        return self


class Monitoring(KeyModel):
    """The cluster's own Prometheus, which scrapes the ranks in the lab's place."""

    namespace: DnsLabel = Field(
        description="The namespace the cluster's Prometheus runs in: its pods, and only they, may"
        " reach the ranks' metrics port."
    )


class Provides(KeyModel):
    """What the cluster already has; the lab declares and installs none of it."""

    kueue: bool = Field(
        default=False,
        description="Kueue is already in the cluster, serving the v1beta2 API and managing the lab's"
        " namespace as docs/scaling.md says: the lab declares only its queues, flavor, topology and"
        " priorities there, and installs no chart.",
    )
    device_plugin: bool = Field(
        default=False,
        description="The NVIDIA device plugin and the `nvidia` RuntimeClass are already there (as the"
        " GPU operator installs them): the lab only labels its GPU nodes.",
    )
    monitoring: Monitoring | None = Field(
        default=None,
        description="A Prometheus of the cluster's own scrapes the ranks: the lab installs no"
        " Prometheus, Grafana or exporters, and its ranks still serve `observability.metricsPort`.",
    )
    volume: Volume | None = Field(
        default=None,
        description="The volume for the runs and the dataset (`storageClass` or `sharedFolder`): the"
        " lab exports no NFS folder and installs no NFS server or client.",
    )
