"""The private registry: one store, written only by image builds, read by the nodes through a read-only door.

One pod runs CNCF Distribution twice over the same storage:

- `push` (port 5000) behind a ClusterIP Service. Only the build pods may reach it (the
  `registry-push` NetworkPolicy): nothing outside the cluster can, and no other pod.
- `pull` (port 5001) with the storage in read-only maintenance mode (distribution
  docs/content/about/configuration.md, `storage.maintenance.readonly`; set through the
  environment as a map, distribution/distribution#1736), behind the NodePort every node's
  container runtime pulls from. `externalTrafficPolicy: Local` keeps the address of a client
  on another machine, so the `registry-pull` NetworkPolicy can admit the nodes' addresses and
  nothing else; the pod runs on the server, which is the address the nodes pull from. The server's
  own pulls are masqueraded by kube-proxy to its pod bridge and pass by k3s's policy controller's
  rule for a pod's own machine (tests/seams/test_registry_pull.py). Whoever reaches the port can
  only read.

The images live in an emptyDir on the server's own disk, off the NFS export (whose every client's
root could otherwise rewrite them). It goes with the pod: a registry pod that is deleted or
moved loses its images, and the next `pulumi up` with a changed tree builds again; docs/security.md
says what that costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.pods import GPU_TOLERATION, mount, pod_security
from lab.cluster.scope import Scope
from lab.cluster.security import SIZES, container_security, harden
from lab.cluster.versions import REGISTRY_IMAGE

APP = "registry"
COMPONENT = "registry"
NAME = "registry"
PULL_SERVICE = "registry-pull"
PORT = 5000  # push: build pods only
PULL_PORT = 5001  # pull: read-only, the nodes only
STORAGE_DIR = "/var/lib/registry"
REPOSITORY = "k8scifar/trainer"
# The CUDA PyTorch image and its build cache: several GB each.
IMAGES_SIZE = "40Gi"
READ_ONLY_VARIABLE = "REGISTRY_STORAGE_MAINTENANCE_READONLY"


@dataclass(frozen=True)
class Registry:
    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    pull_service: k8s.core.v1.Service
    push_host: str  # host:port the build Job pushes to, inside the cluster
    placement: dict[str, Any]  # pod spec fields: the node the registry runs on; builds run there too

    @property
    def resources(self) -> list[pulumi.Resource]:
        return [self.deployment, self.service, self.pull_service]


def placement(scope: Scope) -> dict[str, Any]:
    """The pod spec fields that put a pod on the server: the address the nodes pull from, and the
    disk that holds the images. The stack names that node, so a taint that keeps other work off a
    GPU node (pods.GPU_TOLERATION) does not keep these pods from it."""
    server = {"kubernetes.io/hostname": scope.lab.server.name}
    return {"nodeSelector": server, "tolerations": [GPU_TOLERATION]}


def in_cluster_host(scope: Scope) -> str:
    return f"{NAME}.{scope.lab.namespace}.svc.cluster.local:{PORT}"


def _container(name: str, port: int, env: list[dict[str, Any]]) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/v2/", "port": port}, "periodSeconds": 10}
    return {
        "name": name,
        "image": REGISTRY_IMAGE,
        "ports": [{"name": name, "containerPort": port}],
        "env": [
            {"name": "REGISTRY_HTTP_ADDR", "value": f":{port}"},
            {"name": "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY", "value": STORAGE_DIR},
            # Registry 3 exports traces to localhost:4318 unless told not to, and logs every failed
            # export (distribution/distribution#4270, docs note in #4669).
            {"name": "OTEL_TRACES_EXPORTER", "value": "none"},
            *env,
        ],
        "readinessProbe": {**probe, "initialDelaySeconds": 2},
        "livenessProbe": {**probe, "initialDelaySeconds": 30, "failureThreshold": 6},
        "resources": SIZES["registry"].resources(),
        "securityContext": container_security(),
        "volumeMounts": [mount("images", STORAGE_DIR)],
    }


def declare_registry(scope: Scope) -> Registry:
    read_only = json.dumps({"enabled": True})
    containers = [
        _container("push", PORT, []),
        _container("pull", PULL_PORT, [{"name": READ_ONLY_VARIABLE, "value": read_only}]),
    ]
    deployment = k8s.apps.v1.Deployment(
        "registry",
        metadata=scope.metadata(NAME, APP, COMPONENT),
        spec={
            "replicas": 1,
            # Two registries writing one directory could corrupt it: stop the old before the new.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": scope.selector(APP, COMPONENT)},
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT)},
                "spec": harden(
                    {
                        "securityContext": pod_security(scope.lab),
                        **placement(scope),
                        "containers": containers,
                        "volumes": [{"name": "images", "emptyDir": {"sizeLimit": IMAGES_SIZE}}],
                    }
                ),
            },
        },
        opts=scope.opts(),
    )
    service = k8s.core.v1.Service(
        "registry",
        metadata=scope.metadata(NAME, APP, COMPONENT),
        spec={
            "type": "ClusterIP",
            "selector": scope.selector(APP, COMPONENT),
            "ports": [{"name": "push", "port": PORT, "targetPort": "push"}],
        },
        opts=scope.opts(),
    )
    pull_service = k8s.core.v1.Service(
        "registry-pull",
        metadata=scope.metadata(PULL_SERVICE, APP, COMPONENT),
        spec={
            "type": "NodePort",
            # The client's own address reaches the pod, so the NetworkPolicy can tell nodes apart.
            "externalTrafficPolicy": "Local",
            "selector": scope.selector(APP, COMPONENT),
            "ports": [
                {"name": "pull", "port": PULL_PORT, "targetPort": "pull", "nodePort": scope.lab.registry.port}
            ],
        },
        opts=scope.opts(),
    )
    return Registry(deployment, service, pull_service, in_cluster_host(scope), placement(scope))


def image_reference(endpoint: str, tag: str) -> str:
    """The trainer image's name at `endpoint` (host:port)."""
    return f"{endpoint}/{REPOSITORY}:{tag}"


def image_by_digest(endpoint: str, digest: str) -> str:
    """The trainer image at `endpoint`, named by its content: no later push can change what it means."""
    return f"{endpoint}/{REPOSITORY}@{digest}"
