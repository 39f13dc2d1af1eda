"""The host bootstrap as a Pulumi resource: Ansible turns the machines into a cluster and back.

`HostBootstrap` is a dynamic resource (pure Python, no plugin). Its provider runs
ansible/playbooks/site.yml on create and update, and reset.yml on delete. `diff` compares a
content hash of the playbooks, roles, generated inventory and variables, so a `pulumi up` with
nothing changed runs no Ansible at all. The engine hands `delete` the stored outputs, not the
inputs, so everything reset needs is kept in the outputs.

The join tokens (lab.tokens) are generated once, on create, and kept (secret) in the outputs; the kubeconfig
comes back from the server through `set_stats`, rewritten to the server's reachable address.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

from lab import kubeconfig
from lab.config import LabConfig
from lab.inventory import STATE_DIR, build_inventory, known_hosts_file, stack_state_dir
from lab.playbook import ANSIBLE_DIR, run_playbook
from lab.tokens import kept_tokens, new_tokens, playbook_secrets

SECRET_OUTPUTS = ["token", "kubeconfig"]
# Set to a new value (e.g. `K8SCIFAR_RERUN_HOSTS=$(date +%s) pulumi up`) to re-run site.yml
# although nothing changed; leaving it out later changes nothing.
RERUN_VARIABLE = "K8SCIFAR_RERUN_HOSTS"


def content_hash(ansible_dir: Path, inventory: dict[str, Any], extravars: dict[str, Any]) -> str:
    """sha256 over every file of the Ansible tree, the inventory and the variables."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(ansible_dir).rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(ansible_dir)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(json.dumps([inventory, extravars], sort_keys=True).encode())
    return digest.hexdigest()


def bootstrap_inputs(
    lab: LabConfig,
    stack: str,
    *,
    ansible_dir: Path = ANSIBLE_DIR,
    state_dir: Path = STATE_DIR,
    inventory: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The resource's inputs for `lab`: inventory, variables, where Ansible runs, and their hash.

    `inventory` replaces the generated one (tests point it at a local connection).
    """
    if inventory is None:
        inventory = build_inventory(lab, known_hosts_file(stack, state_dir))
    extravars = {"lab_stack": stack}
    return {
        "stack": stack,
        "server_address": lab.server.address,
        "ansible_dir": str(ansible_dir),
        "workdir": str(stack_state_dir(stack, state_dir) / "ansible-runner"),
        "inventory": inventory,
        "extravars": extravars,
        "content_hash": content_hash(ansible_dir, inventory, extravars),
        "rerun": os.environ.get(RERUN_VARIABLE, ""),
    }


def _site(props: dict[str, Any], token: dict[str, str]) -> dict[str, Any]:
    """Run site.yml with `props`; the outputs the resource keeps."""
    result = run_playbook(
        Path(props["workdir"]),
        "site.yml",
        props["inventory"],
        props["extravars"],
        secret_vars=playbook_secrets(token),
        ansible_dir=Path(props["ansible_dir"]),
    )
    raw = result.stats.get("lab_kubeconfig", "")
    return {
        **props,
        "token": token,
        "kubeconfig": kubeconfig.rewrite(raw, props["server_address"], props["stack"]),
        "nodes": result.stats.get("lab_nodes", {}),
        "changed": result.changed,
    }


class HostBootstrapProvider(ResourceProvider):
    """create/update: site.yml; delete: reset.yml; diff: content hash (or an explicit re-run)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"hosts-{props['stack']}", _site(props, new_tokens()))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        asked = bool(news.get("rerun")) and news.get("rerun") != olds.get("rerun")
        return DiffResult(changes=asked or olds.get("content_hash") != news.get("content_hash"))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(_site(news, kept_tokens(olds["token"])))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        run_playbook(
            Path(props["workdir"]),
            "reset.yml",
            props["inventory"],
            props["extravars"],
            ansible_dir=Path(props["ansible_dir"]),
        )


class HostBootstrap(Resource, module="k8scifar", name="HostBootstrap"):
    """The machines of one stack, bootstrapped into a cluster by Ansible.

    Its type is pulumi-python:dynamic/k8scifar:HostBootstrap.
    """

    kubeconfig: pulumi.Output[str]
    token: pulumi.Output[dict]
    nodes: pulumi.Output[dict]

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        outputs = {"kubeconfig": None, "token": None, "nodes": None, "changed": None}
        secret = pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS)
        super().__init__(
            HostBootstrapProvider(),
            name,
            {**inputs, **outputs},
            pulumi.ResourceOptions.merge(secret, opts),
        )


def kubernetes_provider(bootstrap: HostBootstrap) -> k8s.Provider:
    """The Kubernetes provider of the lab, built from the bootstrap's kubeconfig.

    Every Kubernetes object declared through it depends on the bootstrap, so destroy removes
    them before reset.yml runs.
    """
    return k8s.Provider("lab", kubeconfig=pulumi.Output.secret(bootstrap.kubeconfig))


__all__ = [
    "HostBootstrap",
    "HostBootstrapProvider",
    "bootstrap_inputs",
    "content_hash",
    "kubernetes_provider",
]
