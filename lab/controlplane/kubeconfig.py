"""The admin kubeconfig of a control plane, self-contained: certificates inline, no paths."""

from __future__ import annotations

import base64

import yaml

from lab.controlplane.layout import Layout
from lab.controlplane.pki import ADMIN_USER, Pki


def _inline(path_bytes: bytes) -> str:
    return base64.b64encode(path_bytes).decode()


def write(layout: Layout, pki: Pki) -> None:
    cluster = f"k8scifar-{layout.name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": layout.server,
                    "certificate-authority-data": _inline(pki.cert("ca").read_bytes()),
                },
            }
        ],
        "users": [
            {
                "name": ADMIN_USER,
                "user": {
                    "client-certificate-data": _inline(pki.cert("admin").read_bytes()),
                    "client-key-data": _inline(pki.key("admin").read_bytes()),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": ADMIN_USER}}],
        "current-context": cluster,
    }
    layout.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
    layout.kubeconfig.chmod(0o600)
