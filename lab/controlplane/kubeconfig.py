"""The admin kubeconfig of a control plane, self-contained: certificates inline, no paths."""

from __future__ import annotations

import base64

import yaml

from lab.controlplane.layout import Layout
from lab.controlplane.pki import ADMIN_USER, Pki


def _inline(path_bytes: bytes) -> str:
    return base64.b64encode(path_bytes).decode()


def _config(layout: Layout, ca: bytes, user: str, credentials: dict[str, str]) -> str:
    cluster = f"k8scifar-{layout.name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": layout.server,
                    "certificate-authority-data": _inline(ca),
                },
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    return yaml.safe_dump(config, sort_keys=False)


def write(layout: Layout, pki: Pki) -> None:
    credentials = {
        "client-certificate-data": _inline(pki.cert("admin").read_bytes()),
        "client-key-data": _inline(pki.key("admin").read_bytes()),
    }
    layout.kubeconfig.write_text(_config(layout, pki.cert("ca").read_bytes(), ADMIN_USER, credentials))
    layout.kubeconfig.chmod(0o600)


def for_token(layout: Layout, user: str, token: str) -> str:
    """A kubeconfig that authenticates with `token` alone (a ServiceAccount's), no client certificate."""
    return _config(layout, Pki(layout.pki).cert("ca").read_bytes(), user, {"token": token})
