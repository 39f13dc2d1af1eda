"""Turns the kubeconfig read on the server into one the operator's machine can use.

k3s and kubeadm write a kubeconfig that points at 127.0.0.1 (k3s) or an internal name and calls
everything `default` or `kubernetes`; the lab's copy points at the server's reachable address and
names cluster, user and context after the stack, so several labs can sit in one ~/.kube/config.

The copy is rebuilt from the server's credentials alone: a kubeconfig is read on the operator's
machine, where a user entry's `exec` or `auth-provider` makes kubectl and the Kubernetes provider
run a command or plugin, and a file path (`client-key`, `tokenFile`, a cluster's
`certificate-authority`) reads the operator's files (client-go tools/clientcmd/api/v1 AuthInfo and
Cluster). Whoever is root on the server could plant any of them; k3s and kubeadm write none.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml

from lab.config.facts import API_PORT

# What the lab's copy keeps: the credentials and CA data k3s and kubeadm write, or a bearer token.
USER_KEYS = frozenset({"client-certificate-data", "client-key-data", "token"})
CLUSTER_KEYS = frozenset({"certificate-authority-data", "server", "tls-server-name"})
# User entries that run code on the operator's machine (client-go tools/clientcmd/api/v1 AuthInfo),
# named as such in the refusal; lab.kubeapi runs them only where the operator allows it.
RUNS_CODE = ("exec", "auth-provider")


def fault_at(err: yaml.YAMLError) -> str:
    """Where in a kubeconfig's text `err` lies, as " (line L, column C)" or "": never PyYAML's
    message, which quotes the text around the fault, and that may be a key."""
    mark = getattr(err, "problem_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


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
    """`kubeconfig`'s credentials in a kubeconfig of their own, pointing at
    https://server_address:6443 with cluster/user/context named `name`.

    An empty kubeconfig (Kubernetes install skipped) stays empty.
    """
    if not kubeconfig.strip():
        return ""
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as err:
        raise KubeconfigError(f"the server's kubeconfig is not YAML{fault_at(err)}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise KubeconfigError("the server's kubeconfig is not a `kind: Config` document")
    cluster = _entry(_only(doc, "clusters"), "cluster", CLUSTER_KEYS)
    user = _entry(_only(doc, "users"), "user", USER_KEYS)
    _only(doc, "contexts")  # one, as k3s and kubeadm write; the lab's copy names its own
    if "server" not in cluster:
        raise KubeconfigError("the server's kubeconfig names no API server address")
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {**cluster, "server": api_url(server_address)}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        },
        sort_keys=False,
    )


def _entry(named: dict[str, Any], key: str, allowed: frozenset[str]) -> dict[str, Any]:
    """The `key` mapping of a named entry, refused when it holds more than the lab takes."""
    entry = named.get(key)
    if not isinstance(entry, dict):
        raise KubeconfigError(f"the server's kubeconfig has a {key} entry that is not a mapping")
    extra = sorted(str(k) for k in entry if k not in allowed)
    if extra:
        runs = [k for k in extra if k in RUNS_CODE]
        why = f"{', '.join(runs)} would run a command on this machine" if runs else "the lab takes none"
        raise KubeconfigError(
            f"the server's kubeconfig {key} holds {', '.join(extra)} ({why}); the lab takes only"
            f" {', '.join(sorted(allowed))}, all k3s and kubeadm write: look at who changed it on the server"
        )
    return entry


__all__ = ["API_PORT", "KubeconfigError", "api_url", "rewrite"]
