"""The `app.kubernetes.io/*` labels every lab object carries, and the stable subset selectors use."""

from __future__ import annotations

from collections.abc import Mapping

from lab.config import PROJECT

MANAGED_BY = "pulumi"


def selector_labels(namespace: str, name: str, component: str) -> dict[str, str]:
    """Labels that pick one workload's pods; they never change over the workload's life."""
    return {
        "app.kubernetes.io/name": name,
        # One lab per namespace: the namespace names the instance.
        "app.kubernetes.io/instance": namespace,
        "app.kubernetes.io/component": component,
    }


def label_selector(pairs: Mapping[str, str]) -> str:
    """`pairs` as a label selector (`k=v,k=v`), as `kubectl -l` and the API's labelSelector take it."""
    return ",".join(f"{k}={v}" for k, v in pairs.items())


def pod_selector(namespace: str, name: str, component: str) -> str:
    """The label selector of one workload's pods (selector_labels)."""
    return label_selector(selector_labels(namespace, name, component))


def labels(namespace: str, name: str, component: str) -> dict[str, str]:
    """The full recommended label set of one object."""
    return {
        **selector_labels(namespace, name, component),
        "app.kubernetes.io/part-of": PROJECT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }
