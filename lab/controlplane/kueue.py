"""Kueue beside the control plane, as a process: its CRDs from the tools, its configuration from
the code that writes the lab's own install (lab.cluster.gang.manager_config), its webhooks
registered by URL on the namespace's loopback with the control plane's CA.

Out of a cluster Kueue has no Service for the API server to call, and no internal certificate
management (that injects a CA into Service-based webhooks): both are replaced here. The webhook
entries restate kueue v0.17.0 `config/components/webhook/manifests.yaml` for the integrations the
lab enables and Kueue's own objects, with the namespace selectors of its kustomization
(`config/components/webhook/kustomization.yaml`: pods and StatefulSets of kube-system and
kueue-system are left alone).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from lab.cluster.gang import KUEUE_NAMESPACE, manager_config
from lab.config import LabConfig
from lab.config.facts import SYSTEM_NAMESPACE
from lab.controlplane import components, pki
from lab.controlplane.client import kubectl
from lab.controlplane.layout import HOST, Layout

WEBHOOK_PORT = 9443
HEALTH_PORT = 8081
METRICS_PORT = 8443
# Where Kueue reads its metrics certificate when its own certificate management is off; fixed in
# kueue v0.17.0 cmd/kueue/main.go, so Kueue runs in a mount namespace of its own with a private
# /etc that holds only this.
METRICS_CERTS = "/etc/kueue/metrics/certs"
SKIPPED_NAMESPACES = [SYSTEM_NAMESPACE, KUEUE_NAMESPACE]

# (name, path, API group, version, resource, operations, skips kube-system and kueue-system)
MUTATING = [
    ("mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", ["CREATE"], True),
    (
        "mstatefulset.kb.io",
        "/mutate-apps-v1-statefulset",
        "apps",
        "v1",
        "statefulsets",
        ["CREATE", "UPDATE"],
        True,
    ),
    ("mjob.kb.io", "/mutate-batch-v1-job", "batch", "v1", "jobs", ["CREATE"], False),
    (
        "mclusterqueue.kb.io",
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        ["CREATE"],
        False,
    ),
    (
        "mresourceflavor.kb.io",
        "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        ["CREATE"],
        False,
    ),
    (
        "mworkload.kb.io",
        "/mutate-kueue-x-k8s-io-v1beta2-workload",
        "kueue.x-k8s.io",
        "v1beta2",
        "workloads",
        ["CREATE"],
        False,
    ),
]
VALIDATING = [
    ("vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", ["CREATE", "UPDATE"], True),
    (
        "vstatefulset.kb.io",
        "/validate-apps-v1-statefulset",
        "apps",
        "v1",
        "statefulsets",
        ["CREATE", "UPDATE"],
        True,
    ),
    ("vjob.kb.io", "/validate-batch-v1-job", "batch", "v1", "jobs", ["CREATE", "UPDATE"], False),
    (
        "vclusterqueue.kb.io",
        "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        ["CREATE", "UPDATE"],
        False,
    ),
    (
        "vresourceflavor.kb.io",
        "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        ["CREATE", "UPDATE"],
        False,
    ),
    (
        "vworkload.kb.io",
        "/validate-kueue-x-k8s-io-v1beta2-workload",
        "kueue.x-k8s.io",
        "v1beta2",
        "workloads",
        ["CREATE", "UPDATE"],
        False,
    ),
]


def folder(layout: Layout) -> Path:
    return layout.state / "kueue"


def configuration(lab: LabConfig, layout: Layout) -> dict[str, Any]:
    """The lab's own Kueue configuration, served on loopback with the control plane's certificate."""
    config = manager_config(lab)
    config["leaderElection"] = {"leaderElect": False}
    config["internalCertManagement"] = {"enable": False}
    config["webhook"] = {"port": WEBHOOK_PORT, "host": HOST, "certDir": str(folder(layout) / "certs")}
    config["health"] = {"healthProbeBindAddress": f"{HOST}:{HEALTH_PORT}"}
    config["metrics"] = {"bindAddress": f"{HOST}:{METRICS_PORT}"}
    config["namespace"] = KUEUE_NAMESPACE
    return config


def _webhooks(entries: list[Any], ca: str) -> list[dict[str, Any]]:
    hooks = []
    for name, path, group, version, resource, operations, skips in entries:
        hook: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://{HOST}:{WEBHOOK_PORT}{path}", "caBundle": ca},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "operations": operations,
                    "resources": [resource],
                }
            ],
        }
        if skips:
            hook["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": SKIPPED_NAMESPACES}
                ]
            }
        hooks.append(hook)
    return hooks


def webhook_configurations(certs: pki.Pki) -> list[dict[str, Any]]:
    ca = base64.b64encode(certs.cert("ca").read_bytes()).decode()
    meta = {"name": "kueue-webhooks"}
    admission = "admissionregistration.k8s.io/v1"
    return [
        {
            "apiVersion": admission,
            "kind": "MutatingWebhookConfiguration",
            "metadata": meta,
            "webhooks": _webhooks(MUTATING, ca),
        },
        {
            "apiVersion": admission,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": meta,
            "webhooks": _webhooks(VALIDATING, ca),
        },
    ]


def prepare(bin_dir: Path, layout: Layout, certs: pki.Pki, lab: LabConfig) -> components.Component:
    """Kueue's CRDs, namespace, certificates and configuration; the command that starts it."""
    crds = bin_dir.parent / "share" / "kueue" / "crd"
    # `create`: the workloads CRD is too big for a client-side apply's annotation.
    kubectl(layout, "create", "-f", str(crds))
    kubectl(layout, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds), timeout=90)
    kubectl(layout, "create", "namespace", KUEUE_NAMESPACE)
    cert_dir = folder(layout) / "certs"
    cert_dir.mkdir(parents=True)
    pki.serving_cert(certs, "kueue", [HOST], ["localhost"])
    for suffix, source in (("crt", certs.cert("kueue")), ("key", certs.key("kueue"))):
        (cert_dir / f"tls.{suffix}").write_bytes(source.read_bytes())
    config = folder(layout) / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(lab, layout)))
    script = (
        f"mount -t tmpfs tmpfs /etc && mkdir -p {METRICS_CERTS}"
        f" && cp {cert_dir}/tls.crt {cert_dir}/tls.key {METRICS_CERTS}/"
        f' && exec "$0" "$@"'
    )
    argv = [
        "unshare",
        "--mount",
        "--propagation=private",
        "sh",
        "-c",
        script,
        str(bin_dir / "kueue"),
        # Its on-demand visibility API reads its certificate from a fixed /visibility (kueue
        # v0.17.0 pkg/visibility/server.go); nothing here queries it.
        "--feature-gates=VisibilityOnDemand=false",
        f"--config={config}",
        f"--kubeconfig={layout.kubeconfig}",
    ]
    return components.Component("kueue", argv)


def register_webhooks(layout: Layout, certs: pki.Pki) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": webhook_configurations(certs)}
    kubectl(layout, "create", "-f", "-", stdin=json.dumps(items))


# A server-side dry run of a flavor passes once Kueue's webhooks answer.
PROBE = json.dumps(
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "kueue-probe"}}
)
