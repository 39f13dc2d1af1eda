"""The namespace that holds every lab object, so that one name finds (and removes) them all."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.labels import labels
from lab.config import LabConfig


def declare_namespace(
    lab: LabConfig, provider: k8s.Provider, parent: pulumi.Resource
) -> k8s.core.v1.Namespace:
    return k8s.core.v1.Namespace(
        "namespace",
        metadata={"name": lab.namespace, "labels": labels(lab.namespace, "k8scifar", "namespace")},
        opts=pulumi.ResourceOptions(parent=parent, provider=provider),
    )
