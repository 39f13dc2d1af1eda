"""What every cluster component needs: the lab, its namespace, and options that route through the provider."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.labels import labels, selector_labels
from lab.cluster.live_jobs import replace_if_failed
from lab.config import LabConfig


@dataclass(frozen=True)
class Scope:
    lab: LabConfig
    provider: k8s.Provider
    parent: pulumi.Resource
    namespace: pulumi.Input[str]
    # The provider's kubeconfig, to read the Jobs the cluster already holds (lab.cluster.live_jobs).
    kubeconfig: pulumi.Input[str] = ""
    # What every object declared through this scope waits for.
    waits_for: tuple[pulumi.Resource, ...] = ()

    def opts(self, *depends_on: pulumi.Resource, **options: Any) -> pulumi.ResourceOptions:
        """Options for a child object: through the lab's provider, after `depends_on`."""
        return pulumi.ResourceOptions(
            parent=self.parent, provider=self.provider, depends_on=[*self.waits_for, *depends_on], **options
        )

    def within(self, namespace: pulumi.Input[str]) -> Scope:
        """The same lab, declaring into another of its namespaces."""
        return replace(self, namespace=namespace)

    def after(self, *resources: pulumi.Resource) -> Scope:
        """The same lab and namespace, every object declared after `resources`."""
        return replace(self, waits_for=(*self.waits_for, *resources))

    def labels(self, app: str, component: str) -> dict[str, str]:
        return labels(self.lab.namespace, app, component)

    def selector(self, app: str, component: str) -> dict[str, str]:
        return selector_labels(self.lab.namespace, app, component)

    def metadata(self, name: str, app: str, component: str, **extra: Any) -> dict[str, Any]:
        """Metadata of a namespaced object with the lab's labels."""
        return {"name": name, "namespace": self.namespace, "labels": self.labels(app, component), **extra}

    def job_metadata(self, name: str, app: str, component: str) -> dict[str, Any]:
        """Metadata of a Job that `pulumi up` awaits: replaced on the next `up` once it has failed,
        awaited again while it runs (lab.cluster.live_jobs)."""
        live = pulumi.Output.all(self.kubeconfig, self.namespace).apply(
            lambda v: replace_if_failed(v[0], v[1], name, self.lab.allow_kubeconfig_commands)
        )
        # Derived from the secret kubeconfig, but it says only whether the Job failed.
        return self.metadata(name, app, component, annotations=pulumi.Output.unsecret(live))

    def cluster_metadata(self, name: str, app: str, component: str) -> dict[str, Any]:
        """Metadata of a cluster-scoped object (PersistentVolume, RuntimeClass)."""
        return {"name": name, "labels": self.labels(app, component)}
