"""Turns the kubeconfig read on the server into one the operator's machine can use.

k3s and kubeadm write a kubeconfig that points at 127.0.0.1 (k3s) or an internal name and calls
everything `default` or `kubernetes`; the lab's copy points at the server's reachable address and
names cluster, user and context after the stack, so several labs can sit in one ~/.kube/config.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml

API_PORT = 6443


class KubeconfigError(ValueError):
    """Text that is not a kubeconfig with exactly one cluster, user and context."""


def api_url(address: str, port: int = API_PORT) -> str:
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"https://{host}:{port}"


def _only(doc: dict[str, Any], key: str) -> dict[str, Any]:
    entries = doc.get(key)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        found = len(entries) if isinstance(entries, list) else "no"
        raise KubeconfigError(f"the server's kubeconfig has {found} {key}; expected exactly one")
    return entries[0]


def rewrite(kubeconfig: str, server_address: str, name: str) -> str:
    """`kubeconfig` pointing at https://server_address:6443 with cluster/user/context named `name`.

    An empty kubeconfig (Kubernetes install skipped) stays empty.
    """
    if not kubeconfig.strip():
        return ""
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as err:
        raise KubeconfigError(f"the server's kubeconfig is not YAML: {err}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise KubeconfigError("the server's kubeconfig is not a `kind: Config` document")
    cluster, user, context = _only(doc, "clusters"), _only(doc, "users"), _only(doc, "contexts")
    if not isinstance(cluster.get("cluster"), dict) or "server" not in cluster["cluster"]:
        raise KubeconfigError("the server's kubeconfig names no API server address")
    cluster["cluster"]["server"] = api_url(server_address)
    cluster["name"] = user["name"] = context["name"] = name
    context["context"] = {**context.get("context", {}), "cluster": name, "user": name}
    doc["current-context"] = name
    return yaml.safe_dump(doc, sort_keys=False)


__all__ = ["API_PORT", "KubeconfigError", "api_url", "rewrite"]
