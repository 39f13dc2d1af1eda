"""The host bootstrap as a Pulumi resource: Ansible turns the machines into a cluster and back.

`HostBootstrap` is a dynamic resource (pure Python, no plugin). Its provider runs
ansible/playbooks/site.yml on create and update, and reset.yml on delete. An update that drops
nodes first runs remove_nodes.yml on those nodes alone (drained and taken out of the cluster from
the server, then reset), so the machines that stay are not touched by a reset. `diff` compares a
content hash of the playbooks, roles, generated inventory and variables, so a `pulumi up` with
nothing changed runs no Ansible at all. The engine hands `delete` the stored outputs, not the
inputs, so everything reset needs is kept in the outputs, and nothing there names a place in
this checkout: the Ansible tree, the runner's work directory and the stack's known_hosts file are
found where the running code lives, so `pulumi destroy` works from a moved or re-cloned checkout.
The playbooks themselves run in a fresh process (lab.bootstrap.playbook), never in the provider host.

The join tokens (lab.bootstrap.tokens) are generated once, on create, and kept (secret) in the outputs;
the kubeconfig comes back from the server through `set_stats`, rewritten to the server's reachable address.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

from lab.bootstrap import kubeconfig
from lab.bootstrap.inventory import build_inventory, known_hosts_file, stack_state_dir, with_known_hosts
from lab.bootstrap.playbook import PlaybookResult, run_playbook
from lab.bootstrap.tokens import kept_tokens, new_tokens, playbook_secrets
from lab.config import ConfigError, LabConfig
from lab.paths import ANSIBLE_DIR

if TYPE_CHECKING:
    import pulumi_kubernetes as k8s

SECRET_OUTPUTS = ["token", "kubeconfig"]
# Set to a new value (e.g. `K8SCIFAR_RERUN_HOSTS=$(date +%s) pulumi up`) to re-run site.yml
# although nothing changed; leaving it out later changes nothing.
RERUN_VARIABLE = "K8SCIFAR_RERUN_HOSTS"
# Run on the nodes an update drops, before site.yml runs on those that stay.
REMOVE_PLAYBOOK = "remove_nodes.yml"
# The inventory groups whose node cannot change while the lab stands: the cluster's control plane
# and the export every node mounts live there (a new server is a new cluster).
FIXED_GROUPS = ("server", "nfs_server")


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
    lab: LabConfig, stack: str, *, inventory: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The resource's inputs for `lab`: inventory, variables and their hash, with no local path.

    The inventory names the host-key policy; the ssh options that check keys against the stack's
    known_hosts file are added when a playbook runs. `inventory` replaces the generated one
    (tests point it at a local connection).
    """
    if inventory is None:
        inventory = build_inventory(lab, None)
    extravars = {"lab_stack": stack}
    return {
        "stack": stack,
        "server_address": lab.server.address,
        "inventory": inventory,
        "extravars": extravars,
        "content_hash": content_hash(ANSIBLE_DIR, inventory, extravars),
        "rerun": os.environ.get(RERUN_VARIABLE, ""),
    }


def _machines(inventory: dict[str, Any]) -> dict[str, str | None]:
    """Each node's name and the address of its machine (None for a local connection)."""
    return {name: host.get("ansible_host") for name, host in inventory["all"]["hosts"].items()}


def _group(inventory: dict[str, Any], group: str) -> dict[str, str | None]:
    machines = _machines(inventory)
    members = inventory["all"].get("children", {}).get(group, {}).get("hosts", {})
    return {name: machines[name] for name in members}


def leaving_nodes(olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
    """The nodes of the stored inventory that the new one drops, in the stored order.

    A node kept under its name on another address is another machine: the old one leaves. The
    server and the NFS server cannot leave while the lab stands; raises ConfigError, before
    anything runs, when the new inventory would change either.
    """
    old, new = olds["inventory"], news["inventory"]
    problems = [
        f"the {group.replace('_', ' ')} was {_describe(_group(old, group))} and would be"
        f" {_describe(_group(new, group))}: it cannot change while the lab stands; keep it, or"
        " `pulumi destroy` the lab and bring it up anew"
        for group in FIXED_GROUPS
        if _group(old, group) != _group(new, group)
    ]
    if problems:
        raise ConfigError("k8scifar:nodes", problems)
    kept = _machines(new)
    return [name for name, address in _machines(old).items() if kept.get(name) != address]


def _describe(nodes: dict[str, str | None]) -> str:
    return ", ".join(f"{name} ({address})" for name, address in nodes.items()) or "no node"


def runner_dir(stack: str) -> Path:
    """ansible-runner's work directory for the stack's playbooks (their logs are kept there)."""
    return stack_state_dir(stack) / "ansible-runner"


def _run(
    props: dict[str, Any],
    playbook: str,
    secret_vars: dict[str, Any] | None = None,
    verbose: bool = False,
    limit: list[str] | None = None,
) -> PlaybookResult:
    """Run `playbook` for the stored `props` with this checkout's Ansible tree and state."""
    stack = props["stack"]
    return run_playbook(
        runner_dir(stack),
        playbook,
        with_known_hosts(props["inventory"], known_hosts_file(stack)),
        props["extravars"],
        secret_vars=secret_vars,
        verbose=verbose,
        limit=limit,
    )


def _site(props: dict[str, Any], token: dict[str, str], verbose: bool) -> dict[str, Any]:
    """Run site.yml with `props`; the outputs the resource keeps."""
    result = _run(props, "site.yml", secret_vars=playbook_secrets(token), verbose=verbose)
    raw = result.stats.get("lab_kubeconfig", "")
    return {
        **props,
        "token": token,
        "kubeconfig": kubeconfig.rewrite(raw, props["server_address"], props["stack"]),
        "nodes": result.stats.get("lab_nodes", {}),
        "changed": result.changed,
    }


class HostBootstrapProvider(ResourceProvider):
    """create/update: site.yml; delete: reset.yml; diff: content hash (or an explicit re-run).

    An update that drops nodes resets those first, from the stored inventory, which still has them.

    `verbose`: every task's line on stderr, not only a line per play and host.
    """

    def __init__(self, verbose: bool = False) -> None:
        super().__init__()
        self.verbose = verbose

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"hosts-{props['stack']}", _site(props, new_tokens(), self.verbose))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        leaving_nodes(olds, news)  # a server or NFS server change is refused in the preview
        asked = bool(news.get("rerun")) and news.get("rerun") != olds.get("rerun")
        return DiffResult(changes=asked or olds.get("content_hash") != news.get("content_hash"))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        leaving = leaving_nodes(olds, news)
        if leaving:
            _run(olds, REMOVE_PLAYBOOK, verbose=self.verbose, limit=leaving)
        return UpdateResult(_site(news, kept_tokens(olds["token"]), self.verbose))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        _run(props, "reset.yml", verbose=self.verbose)


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


def cluster_identifier(stack: str) -> str:
    """The Kubernetes provider's identity: one per stack, whatever its kubeconfig says."""
    return f"k8scifar-{stack}"


def kubernetes_provider(kubeconfig: pulumi.Output[str], stack: str) -> k8s.Provider:
    """The Kubernetes provider of the lab, built from the cluster's kubeconfig (lab.access).

    Built from the bootstrap's kubeconfig, every Kubernetes object declared through it depends on
    the bootstrap, so destroy removes them before reset.yml runs. With a bootstrap update pending,
    the kubeconfig is unknown in the preview (dynamic resources do not preview), and
    pulumi-kubernetes then plans to replace the provider, and with it every object under it,
    volumes and training included (pulumi/pulumi#4326; pulumi-kubernetes#577 replaces on a
    computed kubeconfig, #2745 added the way out): a stable `cluster_identifier` makes the provider
    replaced only when that identifier changes.
    """
    # Imported here: the provider host and `labctl hosts` load this module for the bootstrap
    # alone, and pulumi_kubernetes is a heavy import they never use.
    import pulumi_kubernetes as k8s

    secret: pulumi.Output[str] = pulumi.Output.secret(kubeconfig)
    return k8s.Provider(
        "lab",
        kubeconfig=secret,
        cluster_identifier=cluster_identifier(stack),
    )


__all__ = [
    "HostBootstrap",
    "HostBootstrapProvider",
    "bootstrap_inputs",
    "cluster_identifier",
    "content_hash",
    "kubernetes_provider",
    "leaving_nodes",
]
