"""Static NFS volumes on the bootstrap's export, each bound to exactly one claim; or, where the
stack says the cluster provides the volume (`provides.volume`), static volumes on the folder every
node mounts, or claims the cluster's StorageClass provisions.

The host bootstrap exports `<exportPath>` and creates `datasets/` and `runs/` in it,
owned by the trainer's uid. Static PersistentVolumes point at those directories and name
their claim (`claimRef`), and each claim names its volume (`volumeName`) with no storage class:
nothing is provisioned dynamically and no other claim can take these volumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.scope import Scope
from lab.config.facts import RUNS_FOLDER

APP = "nfs"
COMPONENT = "storage"
# NFSv4 only: without a version the kubelet's mount falls back to v3 when v4 fails, and v3 needs
# rpcbind and mountd ports the lab does not open (nfs(5), nfsvers; v4 negotiates its minor version).
MOUNT_OPTIONS = ["nfsvers=4"]


@dataclass(frozen=True)
class Share:
    """One directory of the export and the claim that mounts it."""

    directory: str
    claim: str
    size: str  # NFS enforces no quota; the size only has to satisfy the claim's request


DATASETS = Share("datasets", "datasets", "2Gi")
RUNS = Share(RUNS_FOLDER, "runs", "50Gi")
SHARES = (DATASETS, RUNS)


@dataclass(frozen=True)
class Storage:
    claims: dict[str, k8s.core.v1.PersistentVolumeClaim]
    # Where each claim's data is, read from the object that holds it.
    locations: dict[str, pulumi.Output[str]]

    def claim_name(self, share: Share) -> pulumi.Output[str]:
        """The claim's name as an output, so whatever mounts it is created after it."""
        return self.claims[share.claim].metadata.name

    def location(self, share: Share) -> pulumi.Output[str]:
        """Where the share is: `server:path` of the NFS export, the folder on every node, or the
        claim and the StorageClass that provisioned it."""
        return self.locations[share.claim]


def volume_name(scope: Scope, share: Share) -> str:
    # PersistentVolumes are cluster-wide: the namespace keeps two labs on one cluster apart.
    return f"{scope.lab.namespace}-{share.directory}"


def export_path(scope: Scope, share: Share) -> str:
    return f"{scope.lab.nfs.export_path}/{share.directory}"


def _source(scope: Scope, share: Share) -> dict[str, Any]:
    """The static volume's source: the lab's NFS export, or the folder every node mounts."""
    provided = scope.lab.provides.volume
    if provided is None:
        return {
            "mountOptions": MOUNT_OPTIONS,
            "nfs": {"server": scope.lab.nfs_server.address, "path": export_path(scope, share)},
        }
    assert provided.shared_folder is not None
    # `Directory`: the kubelet refuses to mount a folder that is not there, where the default
    # would create an empty one root owns (kubernetes pkg/volume/hostpath, checkType; "hostPath"
    # in the volumes concept page). No mountOptions: the API server refuses them on a hostPath
    # volume, "may not specify mount options for this volume type" (kubernetes
    # pkg/volume/validation/pv_validation.go, ValidatePersistentVolume).
    return {"hostPath": {"path": f"{provided.shared_folder}/{share.directory}", "type": "Directory"}}


def _declare_share(
    scope: Scope, share: Share
) -> tuple[k8s.core.v1.PersistentVolumeClaim, pulumi.Output[str]]:
    access = ["ReadWriteMany"]
    provided = scope.lab.provides.volume
    if provided is not None and provided.storage_class is not None:
        # The cluster's StorageClass provisions the volume the claim asks for.
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{share.directory}-claim",
            metadata=scope.metadata(share.claim, APP, COMPONENT),
            spec={
                "accessModes": access,
                "storageClassName": provided.storage_class,
                "resources": {"requests": {"storage": share.size}},
            },
            opts=scope.opts(),
        )
        where = pulumi.Output.concat(
            "claim ",
            claim.metadata.namespace,
            "/",
            claim.metadata.name,
            " of StorageClass ",
            provided.storage_class,
        )
        return claim, where
    volume = k8s.core.v1.PersistentVolume(
        f"{share.directory}-volume",
        metadata=scope.cluster_metadata(volume_name(scope, share), APP, COMPONENT),
        spec={
            "capacity": {"storage": share.size},
            "accessModes": access,
            # Deleting the lab's objects must never delete datasets, results or images.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": scope.lab.namespace, "name": share.claim},
            **_source(scope, share),
        },
        opts=scope.opts(),
    )
    claim = k8s.core.v1.PersistentVolumeClaim(
        f"{share.directory}-claim",
        metadata=scope.metadata(share.claim, APP, COMPONENT),
        spec={
            "accessModes": access,
            "storageClassName": "",
            "volumeName": volume.metadata.name,
            "resources": {"requests": {"storage": share.size}},
        },
        opts=scope.opts(),
    )
    spec = volume.spec
    if provided is None:
        where = pulumi.Output.concat(spec.nfs.server, ":", spec.nfs.path)
    else:
        where = pulumi.Output.concat(spec.host_path.path, " on every node")
    return claim, where


def declare_storage(scope: Scope) -> Storage:
    declared = {share.claim: _declare_share(scope, share) for share in SHARES}
    return Storage(
        claims={claim: pair[0] for claim, pair in declared.items()},
        locations={claim: pair[1] for claim, pair in declared.items()},
    )
