"""The kubeconfig read on the server, rewritten for the operator's machine."""

from __future__ import annotations

import pytest
import yaml

from lab.kubeconfig import KubeconfigError, rewrite
from tests.hosts.conftest import KUBECONFIG

KUBEADM = """\
apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority-data: Q0E=, server: 'https://gpu-a:6443'}
  name: kubernetes
contexts:
- context: {cluster: kubernetes, user: kubernetes-admin}
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
users:
- name: kubernetes-admin
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
"""


@pytest.mark.parametrize("source", [KUBECONFIG, KUBEADM], ids=["k3s", "kubeadm"])
def test_points_at_the_server_and_is_named_after_the_stack(source: str) -> None:
    doc = yaml.safe_load(rewrite(source, "192.168.50.11", "lab"))
    original = yaml.safe_load(source)
    assert doc["clusters"][0]["cluster"]["server"] == "https://192.168.50.11:6443"
    assert doc["clusters"][0]["name"] == doc["users"][0]["name"] == doc["contexts"][0]["name"] == "lab"
    assert doc["contexts"][0]["context"] == {"cluster": "lab", "user": "lab"}
    assert doc["current-context"] == "lab"
    # Credentials pass through untouched.
    assert doc["users"][0]["user"] == original["users"][0]["user"]
    assert (
        doc["clusters"][0]["cluster"]["certificate-authority-data"]
        == (original["clusters"][0]["cluster"]["certificate-authority-data"])
    )


def test_ipv6_server_address_is_bracketed() -> None:
    doc = yaml.safe_load(rewrite(KUBECONFIG, "fd00::11", "lab"))
    assert doc["clusters"][0]["cluster"]["server"] == "https://[fd00::11]:6443"


def test_skipped_kubernetes_gives_an_empty_kubeconfig() -> None:
    assert rewrite("", "10.0.0.1", "lab") == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\n", "not a `kind: Config`"),
        ("kind: Config\nclusters: []\nusers: []\ncontexts: []\n", "has 0 clusters"),
        (": : :", "not YAML"),
        (KUBECONFIG.replace("server: https://127.0.0.1:6443", "insecure: true"), "no API server"),
    ],
)
def test_a_broken_kubeconfig_is_named(text: str, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message):
        rewrite(text, "10.0.0.1", "lab")
