"""The private registry the trainer image is pushed to and every node pulls from.

One Service of type NodePort serves both sides: in-cluster pushers (the build Job) use its
ClusterIP through the Service's DNS name, and each node's container runtime pulls from
`<server address>:<registry port>`, the plain-HTTP mirror the host bootstrap configures.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.pods import container_security, mount, pod_security
from lab.cluster.scope import Scope
from lab.cluster.versions import REGISTRY_IMAGE

APP = "registry"
COMPONENT = "registry"
NAME = "registry"
PORT = 5000
STORAGE_DIR = "/var/lib/registry"
REPOSITORY = "k8scifar/trainer"
# The CUDA PyTorch image and its build cache: several GB each.
IMAGES_SIZE = "40Gi"


@dataclass(frozen=True)
class Registry:
    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    push_host: str  # host:port the build Job pushes to, inside the cluster

    @property
    def resources(self) -> list[pulumi.Resource]:
        return [self.deployment, self.service]


def in_cluster_host(scope: Scope) -> str:
    return f"{NAME}.{scope.lab.namespace}.svc.cluster.local:{PORT}"


def declare_registry(scope: Scope) -> Registry:
    probe = {"httpGet": {"path": "/v2/", "port": PORT}, "periodSeconds": 10}
    container = {
        "name": "registry",
        "image": REGISTRY_IMAGE,
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": [{"name": "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY", "value": STORAGE_DIR}],
        "readinessProbe": {**probe, "initialDelaySeconds": 2},
        "livenessProbe": {**probe, "initialDelaySeconds": 30, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "securityContext": container_security(),
        "volumeMounts": [mount("images", STORAGE_DIR)],
    }
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
                "spec": {
                    # The export's directories belong to the trainer's uid and root is squashed.
                    "securityContext": pod_security(scope.lab),
                    "containers": [container],
                    # Images live on the server's own disk, off the NFS export that every node's
                    # root can write: see docs/security.md for why an emptyDir and what it costs.
                    "nodeSelector": {"kubernetes.io/hostname": scope.lab.server.name},
                    "volumes": [{"name": "images", "emptyDir": {"sizeLimit": IMAGES_SIZE}}],
                },
            },
        },
        opts=scope.opts(),
    )
    service = k8s.core.v1.Service(
        "registry",
        metadata=scope.metadata(NAME, APP, COMPONENT),
        spec={
            "type": "NodePort",
            "selector": scope.selector(APP, COMPONENT),
            "ports": [
                {
                    "name": "http",
                    "port": PORT,
                    "targetPort": "http",
                    "nodePort": scope.lab.registry.port,
                }
            ],
        },
        opts=scope.opts(),
    )
    return Registry(deployment, service, in_cluster_host(scope))


def image_reference(endpoint: str, tag: str) -> str:
    """The trainer image's name at `endpoint` (host:port)."""
    return f"{endpoint}/{REPOSITORY}:{tag}"
