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

Every value reaches the provider through the engine, numbers as doubles: each entry point takes
its values back through lab.bootstrap.engine_values first.

A failed run is undone where no record would reach it. The Python dynamic provider host answers
a `create` that raises with an error and no state (pulumi/dynamic/__main__.py, `Create` under
`_abort_with_traceback`), so the engine records nothing and `pulumi destroy` could not reset what
site.yml changed: create runs reset.yml before it reports the failure, on the nodes the run was
the first to change (site.yml reports those that held no record of the lab when it began; a node
already in a lab, made by `labctl hosts up` or another stack, is left as it is). A failed
`update` leaves the stored outputs as they were, and `destroy` resets the nodes they name (each
node's own record says what the lab changed there, the failed run's changes included); only the
nodes the update was adding are not named there, so remove_nodes.yml takes those out again.
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
from lab.bootstrap.engine_values import engine_safe, from_engine
from lab.bootstrap.inventory import (
    NFS_SERVER_GROUP,
    SERVER_GROUP,
    build_inventory,
    known_hosts_file,
    stack_state_dir,
    with_known_hosts,
)
from lab.bootstrap.playbook import Failure, PlaybookError, PlaybookResult, run_playbook
from lab.bootstrap.tokens import kept_tokens, new_tokens, playbook_secrets
from lab.config import ConfigError, LabConfig
from lab.paths import ANSIBLE_DIR, STATE_DIR

if TYPE_CHECKING:
    import pulumi_kubernetes as k8s

SECRET_OUTPUTS = ["token", "kubeconfig"]
# Set to a new value (e.g. `K8SCIFAR_RERUN_HOSTS=$(date +%s) pulumi up`) to re-run site.yml
# although nothing changed; leaving it out later changes nothing.
RERUN_VARIABLE = "K8SCIFAR_RERUN_HOSTS"
# Run on the nodes an update drops, before site.yml runs on those that stay.
REMOVE_PLAYBOOK = "remove_nodes.yml"
# site.yml's set_stats key naming the nodes that held no record of the lab when the run began
# (the lab_state role's guard): a failed run is undone on those alone.
FRESH_NODES_STAT = "lab_fresh_nodes"
# The inventory groups whose node cannot change while the lab stands: the cluster's control plane
# and the export every node mounts live there (a new server is a new cluster).
FIXED_GROUPS = (SERVER_GROUP, NFS_SERVER_GROUP)


def content_hash(ansible_dir: Path, inventory: dict[str, Any], extravars: dict[str, Any]) -> str:
    """sha256 over every file of the Ansible tree, the inventory and the variables."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(ansible_dir).rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(ansible_dir)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    # As the program made them, whether the engine has carried them (numbers as doubles) or not.
    digest.update(json.dumps(from_engine([inventory, extravars]), sort_keys=True).encode())
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
    return engine_safe(
        {
            "stack": stack,
            "server_address": lab.server.address,
            "inventory": inventory,
            "extravars": extravars,
            "content_hash": content_hash(ANSIBLE_DIR, inventory, extravars),
            "rerun": os.environ.get(RERUN_VARIABLE, ""),
        }
    )


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


def runner_dir(stack: str, base: Path = STATE_DIR) -> Path:
    """ansible-runner's work directory for the stack's playbooks (their logs are kept there), in
    the lab's state folder `base`."""
    return stack_state_dir(stack, base) / "ansible-runner"


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


def _outputs(props: dict[str, Any], token: dict[str, str], result: PlaybookResult) -> dict[str, Any]:
    """What the resource keeps of a site.yml run with `props`."""
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
        props = from_engine(props)
        token = new_tokens()
        stats: dict[str, Any] | None = None
        try:
            result = _run(props, "site.yml", secret_vars=playbook_secrets(token), verbose=self.verbose)
            stats = result.stats
            return CreateResult(f"hosts-{props['stack']}", _outputs(props, token, result))
        except PlaybookError as failed:
            raise failed.followed_by(self._undo(props, "reset.yml", failed.stats, failed.failures)) from None
        except Exception as err:
            # Raised after the playbook ran (a kubeconfig it returned that cannot be used): the
            # engine records nothing of this either.
            err.add_note(self._undo(props, "reset.yml", stats, []))
            raise

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        olds, news = from_engine(olds), from_engine(news)
        leaving_nodes(olds, news)  # a server or NFS server change is refused in the preview
        asked = bool(news.get("rerun")) and news.get("rerun") != olds.get("rerun")
        return DiffResult(changes=asked or olds.get("content_hash") != news.get("content_hash"))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        olds, news = from_engine(olds), from_engine(news)
        leaving = leaving_nodes(olds, news)
        if leaving:
            _run(olds, REMOVE_PLAYBOOK, verbose=self.verbose, limit=leaving)
        token = kept_tokens(olds["token"])
        try:
            result = _run(news, "site.yml", secret_vars=playbook_secrets(token), verbose=self.verbose)
        except PlaybookError as failed:
            # As in leaving_nodes: a name kept on another address is another machine.
            stored = _machines(olds["inventory"])
            joining = [n for n, at in _machines(news["inventory"]).items() if stored.get(n, "") != at]
            if not joining:
                raise
            # Joined agents are Nodes of the cluster already: drained and deleted, then reset.
            undone = self._undo(news, REMOVE_PLAYBOOK, failed.stats, failed.failures, among=joining)
            raise failed.followed_by(undone) from None
        return UpdateResult(_outputs(news, token, result))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        _run(from_engine(props), "reset.yml", verbose=self.verbose)

    def _undo(
        self,
        props: dict[str, Any],
        playbook: str,
        stats: dict[str, Any] | None,
        failures: list[Failure],
        among: list[str] | None = None,
    ) -> str:
        """Run `playbook` on the nodes a failed run was the first to change (of `among`) that still
        answer; what was undone and what the operator does next, or "" when there was nothing."""
        stack = props["stack"]
        if stats is None:
            return (
                "the run ended before it said which nodes it changed, so nothing was undone:"
                f" `labctl hosts down --stack {stack}` resets what it changed"
            )
        fresh = set(stats.get(FRESH_NODES_STAT) or {})
        if among is not None:
            fresh &= set(among)
        lost = {f.host for f in failures if f.unreachable}
        # A Struct keeps no order: name the nodes the same way each time.
        reached, unreached = sorted(fresh - lost), sorted(fresh & lost)
        later = (
            f"{', '.join(unreached)} could not be reached: once it answers, `labctl hosts down --stack"
            f" {stack}` resets what the run may have changed there"
            if unreached
            else ""
        )
        if not reached:
            return later
        try:
            _run(props, playbook, verbose=self.verbose, limit=reached)
        except PlaybookError as undo_failed:
            why = "; ".join(map(str, undo_failed.failures)) or undo_failed.status
            return (
                f"{playbook}, run to undo it on {', '.join(reached)}, failed too ({why}): once the nodes"
                f" answer, `labctl hosts down --stack {stack}` runs it again"
            )
        return (
            f"{playbook} then undid what the run had changed on {', '.join(reached)}"
            + (f"; {later}" if later else "")
            + "; fix the cause and run `pulumi up` again"
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
