"""The lab's namespaces: one holds its objects, one each holds the pods that cannot be `restricted`.

One name finds (and on destroy removes) every lab object. The image build and the NVIDIA device
plugin need more than the Pod Security Standards' `restricted` or even `baseline` admits, so each
runs alone in a namespace of its own that enforces `privileged` (lab.cluster.security says why),
and the lab's namespace stays `restricted`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.labels import labels
from lab.cluster.security import PRIVILEGED, namespace_level, pod_security_labels
from lab.config import BUILD_NAMESPACE_SUFFIX, GPU_NAMESPACE_SUFFIX, LabConfig

APP = "k8scifar"
COMPONENT = "namespace"


@dataclass(frozen=True)
class Namespaces:
    lab: k8s.core.v1.Namespace
    build: k8s.core.v1.Namespace
    gpu: k8s.core.v1.Namespace | None  # GPU labs only


def build_namespace(lab: LabConfig) -> str:
    return lab.namespace + BUILD_NAMESPACE_SUFFIX


def gpu_namespace(lab: LabConfig) -> str:
    return lab.namespace + GPU_NAMESPACE_SUFFIX


def lab_namespace(
    resource: str, lab: LabConfig, name: str, level: str, provider: k8s.Provider, parent: pulumi.Resource
) -> k8s.core.v1.Namespace:
    """A namespace the lab creates, and so removes on destroy, enforcing Pod Security `level`."""
    pod_security = pod_security_labels(level, lab.kubernetes_minor)
    return k8s.core.v1.Namespace(
        resource,
        # The lab's labels name the lab's namespace as their instance, whichever namespace this is.
        metadata={"name": name, "labels": {**labels(lab.namespace, APP, COMPONENT), **pod_security}},
        opts=pulumi.ResourceOptions(parent=parent, provider=provider),
    )


def declare_namespaces(lab: LabConfig, provider: k8s.Provider, parent: pulumi.Resource) -> Namespaces:
    main = lab_namespace("namespace", lab, lab.namespace, namespace_level(lab), provider, parent)
    build = lab_namespace("build-namespace", lab, build_namespace(lab), PRIVILEGED, provider, parent)
    gpu = None
    if lab.has_gpus:
        gpu = lab_namespace("gpu-namespace", lab, gpu_namespace(lab), PRIVILEGED, provider, parent)
    return Namespaces(main, build, gpu)
