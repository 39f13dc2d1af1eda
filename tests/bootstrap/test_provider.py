"""The HostBootstrap dynamic provider's diff, and the content hash it compares.

Create, update and delete run playbooks: they are tested inside Pulumi's real provider host
(test_provider_host.py). The diff runs no Ansible, so it is checked here in this process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs, content_hash, leaving_nodes
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
