"""The kubeconfig read on the server, rewritten for the operator's machine."""

from __future__ import annotations

import pytest
import yaml

from lab.bootstrap.kubeconfig import KubeconfigError, rewrite
from tests.support.pretend_bootstrap import KUBECONFIG

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
        (KUBECONFIG.replace("    server: https://127.0.0.1:6443\n", ""), "no API server"),
    ],
)
def test_a_broken_kubeconfig_is_named(text: str, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message):
        rewrite(text, "10.0.0.1", "lab")


EXEC = """\
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: sh
      args: [-c, "id > /tmp/owned"]
"""


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (EXEC, "exec (exec would run a command on this machine)"),
        (
            "    auth-provider: {name: oidc, config: {cmd-path: /bin/sh}}\n",
            "auth-provider (auth-provider would",
        ),
        ("    tokenFile: /home/operator/.ssh/id_ed25519\n", "tokenFile (the lab takes none)"),
    ],
)
def test_a_user_entry_that_runs_or_reads_anything_on_this_machine_is_refused(extra: str, named: str) -> None:
    planted = KUBECONFIG + extra
    assert yaml.safe_load(planted)["users"][0]["user"]  # the entry is really there
    with pytest.raises(KubeconfigError) as refused:
        rewrite(planted, "10.0.0.1", "lab")
    assert f"user holds {named}" in str(refused.value) and "\n" not in str(refused.value)


def test_only_the_credentials_and_the_server_reach_the_operator() -> None:
    server = "    server: https://127.0.0.1:6443\n"
    planted = KUBECONFIG.replace(server, server + "    proxy-url: http://10.0.0.9:3128\n")
    with pytest.raises(KubeconfigError, match="cluster holds proxy-url"):
        rewrite(planted, "10.0.0.1", "lab")
    kept = yaml.safe_load(
        rewrite(
            KUBECONFIG.replace(
                "current-context: default", "current-context: default\npreferences: {colors: true}"
            ),
            "10.0.0.1",
            "lab",
        )
    )
    assert set(kept) == {"apiVersion", "kind", "clusters", "users", "contexts", "current-context"}


def test_a_kubeconfig_that_is_not_yaml_names_where_and_never_its_content() -> None:
    key = "S2V5LVNFQ1JFVC1NQVJLRVI="
    broken = KUBECONFIG.replace(f"client-key-data: {key}", f"client-key-data: {key}\n   : [{key}")
    with pytest.raises(KubeconfigError) as refused:
        rewrite(broken, "10.0.0.1", "lab")
    message = str(refused.value)
    assert message.startswith("the server's kubeconfig is not YAML (line ") and "column" in message
    assert not any(part in message for part in (key, key[:8], "client-key")), message
