"""What cluster objects hand to the nodes and the images they run: NFS mount options and the
registry's environment (the build pod's AppArmor profile: test_cluster_objects.py), each object
validated against the official schema of the stack's Kubernetes version."""

from __future__ import annotations

import pytest

from lab.config import load_stack
from tests.support.program import (
    cluster_stacks,
    containers,
    env_of,
    kubernetes_object,
    recorded,
    validate_object,
)


@pytest.mark.parametrize("stack", cluster_stacks())
def test_nfs_volumes_mount_nfsv4_only(stack: str) -> None:
    """Without a version mount.nfs falls back to v3 when v4 fails (nfs(5), nfsvers), and v3 needs
    rpcbind and mountd ports the lab never opens: the mount must fail with v4's error instead."""
    run = recorded(stack)
    volumes = run.of_kind("PersistentVolume")
    assert volumes
    for volume in volumes:
        options = volume.inputs["spec"].get("mountOptions", [])
        versions = [o.partition("=")[2] for o in options if o.partition("=")[0] in {"nfsvers", "vers"}]
        assert versions and all(v.split(".")[0] == "4" for v in versions), (volume.name, options)
        validate_object(kubernetes_object(volume), load_stack(stack).kubernetes_version)


def test_the_registry_exports_no_traces() -> None:
    """Registry 3 sends OpenTelemetry traces to localhost:4318 by default and logs each failed export
    (distribution/distribution#4270); OTEL_TRACES_EXPORTER=none turns the exporter off."""
    run = recorded("example-cpu")
    (deployment,) = [r for r in run.of_kind("Deployment") if r.name == "registry"]
    assert env_of(containers(deployment)[0])["OTEL_TRACES_EXPORTER"] == "none"
    validate_object(kubernetes_object(deployment), load_stack("example-cpu").kubernetes_version)
