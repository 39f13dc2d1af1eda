"""The private registry the trainer image is pushed to and every node pulls from.

One Service of type NodePort serves both sides: in-cluster pushers (the build Job) use its
ClusterIP through the Service's DNS name, and each node's container runtime pulls from
`<server address>:<registry port>`, the plain-HTTP mirror the host bootstrap configures.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.pods import claim_volume, container_security, mount, pod_security
from lab.cluster.scope import Scope
from lab.cluster.storage import REGISTRY, Storage
from lab.cluster.versions import REGISTRY_IMAGE

APP = "registry"
COMPONENT = "registry"
NAME = "registry"
PORT = 5000
STORAGE_DIR = "/var/lib/registry"
REPOSITORY = "k8scifar/trainer"


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


def declare_registry(scope: Scope, storage: Storage) -> Registry:
    probe = {"httpGet": {"path": "/v2/", "port": PORT}, "periodSeconds": 10}
    container = {
        "name": "registry",
        "image": REGISTRY_IMAGE,
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": [
            {"name": "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY", "value": STORAGE_DIR},
            # Registry 3 exports traces to localhost:4318 unless told not to, and logs every failed
            # export (distribution/distribution#4270, docs note in #4669).
            {"name": "OTEL_TRACES_EXPORTER", "value": "none"},
        ],
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
                    "volumes": [claim_volume("images", storage.claim_name(REGISTRY))],
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
