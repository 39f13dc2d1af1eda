"""The HostBootstrap dynamic provider's diff, and the content hash it compares.

Create, update and delete run playbooks: they are tested inside Pulumi's real provider host
(test_provider_host.py). The diff runs no Ansible, so it is checked here in this process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.bootstrap import resource
from lab.bootstrap.playbook import Failure, PlaybookError, PlaybookResult
from lab.bootstrap.resource import (
    FRESH_NODES_STAT,
    HostBootstrapProvider,
    bootstrap_inputs,
    content_hash,
    leaving_nodes,
)
from lab.config import ConfigError, parse_config
from tests.support.pretend_bootstrap import RESET, SITE, local_inventory, make_ansible_dir

LAB = {
    "nodes": [
        {"name": "node-a", "address": "10.9.0.1", "user": "lab", "role": "server"},
        {"name": "node-b", "address": "10.9.0.2", "user": "lab", "role": "agent"},
    ]
}


def _inputs(target: Path, **group_vars: str) -> dict:
    inventory = local_inventory(target, ["node-a", "node-b"], **group_vars)
    return bootstrap_inputs(parse_config(LAB), "demo", inventory=inventory)


def test_diff_asks_for_a_run_only_when_something_changed(target: Path) -> None:
    provider = HostBootstrapProvider()
    outs = {**_inputs(target), "token": "t", "kubeconfig": "", "nodes": {}, "changed": {}}

    # Nothing changed: no difference.
    assert provider.diff("hosts-demo", outs, _inputs(target)).changes is False

    # A re-run asked for by the operator is a difference; the same request again is not.
    asked = {**_inputs(target), "rerun": "1700000000"}
    assert provider.diff("hosts-demo", outs, asked).changes is True
    assert provider.diff("hosts-demo", {**outs, "rerun": "1700000000"}, asked).changes is False

    # A changed variable is a difference.
    assert provider.diff("hosts-demo", outs, _inputs(target, extra="1")).changes is True


def test_the_content_hash_follows_every_file_of_the_tree(tmp_path: Path) -> None:
    ansible_dir = make_ansible_dir(tmp_path / "ansible", site=SITE, reset=RESET)
    before = content_hash(ansible_dir, {}, {})
    site = ansible_dir / "playbooks" / "site.yml"
    site.write_text(site.read_text() + "# a new comment changes the content hash\n")
    assert content_hash(ansible_dir, {}, {}) != before


THREE = {
    "nodes": [
        *LAB["nodes"],
        {"name": "node-c", "address": "10.9.0.3", "user": "lab", "role": "agent"},
    ]
}


def _lab(nodes: list[dict]) -> dict:
    return bootstrap_inputs(parse_config({"nodes": nodes}), "demo")


def test_an_update_resets_exactly_the_agents_the_stack_dropped() -> None:
    three = _lab(THREE["nodes"])
    assert leaving_nodes(three, _lab(LAB["nodes"])) == ["node-c"]
    assert leaving_nodes(three, three) == []
    assert leaving_nodes(_lab(LAB["nodes"]), three) == []  # a node added joins, nobody leaves
    # A node kept under its name on another machine: the old machine leaves (and is reset).
    moved = [*LAB["nodes"], {**THREE["nodes"][2], "address": "10.9.0.9"}]
    assert leaving_nodes(three, _lab(moved)) == ["node-c"]


def test_the_server_or_the_nfs_server_cannot_leave_a_standing_lab() -> None:
    three = {**_lab(THREE["nodes"]), "token": "t", "kubeconfig": "", "nodes": {}, "changed": {}}
    server, agent, other = THREE["nodes"]
    promoted = [{**agent, "role": "server"}, {**server, "role": "agent"}, other]
    server_moves = r"the server was node-a \(10\.9\.0\.1\) and would be node-b"
    with pytest.raises(ConfigError, match=server_moves) as err:
        HostBootstrapProvider().diff("hosts-demo", three, _lab(promoted))
    assert "`pulumi destroy`" in str(err.value)
    with pytest.raises(ConfigError, match=r"the nfs server was node-a \(10\.9\.0\.1\) and would be node-c"):
        leaving_nodes(three, _nfs_on(THREE, "node-c"))


def _nfs_on(lab: dict, node: str) -> dict:
    return bootstrap_inputs(parse_config({**lab, "nfs": {"server": node}}), "demo")


class _Runs:
    """Stands in for the playbook runner: site.yml fails as `failure` says; records the rest."""

    def __init__(self, failure: PlaybookError, undo_fails: bool = False) -> None:
        self.failure = failure
        self.undo_fails = undo_fails
        self.calls: list[tuple[str, list[str] | None]] = []

    def __call__(self, props: dict, playbook: str, **kwargs: object) -> PlaybookResult:
        limit = kwargs.get("limit")
        self.calls.append((playbook, limit if isinstance(limit, list) else None))
        if playbook == "site.yml":
            raise self.failure
        if self.undo_fails:
            raise PlaybookError(playbook, [Failure("node-b", "Remove", "disk is read-only")], "failed")
        return PlaybookResult(playbook)


def _failed(stats: dict | None, *failures: Failure) -> PlaybookError:
    return PlaybookError("site.yml", list(failures), "failed", stats=stats)


@pytest.mark.parametrize(
    ("failure", "undo_fails", "undone_on", "said"),
    [
        # Only the nodes the run was the first to change: node-c was in a lab already.
        (
            _failed({FRESH_NODES_STAT: {"node-b": True, "node-a": True}}, Failure("node-b", "t", "broke")),
            False,
            ["node-a", "node-b"],
            "reset.yml then undid what the run had changed on node-a, node-b; fix the cause",
        ),
        # A node that dropped is left to `labctl hosts down`, named; the others are undone.
        (
            _failed(
                {FRESH_NODES_STAT: {"node-a": True, "node-b": True}}, Failure("node-b", "t", "gone", True)
            ),
            False,
            ["node-a"],
            "on node-a; node-b could not be reached: once it answers, `labctl hosts down --stack demo`",
        ),
        # The run said nothing of what it changed: nothing is undone, and the way out is said.
        (_failed(None), False, None, "nothing was undone: `labctl hosts down --stack demo` resets"),
        # Nothing was anyone's first change (a guard refused): the failure stands alone.
        (_failed({}, Failure("node-a", "Refuse", "k3s is there")), False, None, "k3s is there"),
        # The undo failing too is said, with the way out.
        (
            _failed({FRESH_NODES_STAT: {"node-a": True}}, Failure("node-b", "t", "broke")),
            True,
            ["node-a"],
            "reset.yml, run to undo it on node-a, failed too (host node-b, task 'Remove': disk is read-only)",
        ),
    ],
)
def test_a_failed_create_is_undone_on_the_nodes_it_was_first_to_change(
    target: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: PlaybookError,
    undo_fails: bool,
    undone_on: list[str] | None,
    said: str,
) -> None:
    runs = _Runs(failure, undo_fails)
    monkeypatch.setattr(resource, "_run", runs)
    inputs = bootstrap_inputs(
        parse_config(THREE), "demo", inventory=local_inventory(target, ["node-a", "node-b", "node-c"])
    )
    with pytest.raises(PlaybookError) as caught:
        HostBootstrapProvider().create(inputs)
    assert said in str(caught.value)
    undo = [call for call in runs.calls if call[0] != "site.yml"]
    assert undo == ([("reset.yml", undone_on)] if undone_on else [])
    if undone_on is None and failure.stats == {}:
        assert str(caught.value) == str(failure), "nothing was undone, so nothing more is said"
