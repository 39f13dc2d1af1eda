"""The HostBootstrap dynamic provider's create, diff, update and delete, run for real.

The provider is called the way the Pulumi engine calls it (inputs on create, stored outputs on
delete) with a throw-away Ansible tree on a local connection; ansible-runner really runs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lab.config import LabConfig, parse_config
from lab.hosts import HostBootstrapProvider, bootstrap_inputs
from lab.tokens import PLAYBOOK_VARIABLES
from tests.hosts.conftest import local_inventory

LAB = {
    "nodes": [
        {"name": "node-a", "address": "10.9.0.1", "user": "lab", "role": "server"},
        {"name": "node-b", "address": "10.9.0.2", "user": "lab", "role": "agent"},
    ]
}


def _lab() -> LabConfig:
    return parse_config(LAB)


def _inputs(ansible_dir: Path, target: Path, tmp_path: Path, **group_vars: str) -> dict:
    return bootstrap_inputs(
        _lab(),
        "demo",
        ansible_dir=ansible_dir,
        state_dir=tmp_path / "state",
        inventory=local_inventory(target, ["node-a", "node-b"], **group_vars),
    )


def _runs(tmp_path: Path) -> int:
    """How many playbook runs ansible-runner has recorded for the stack."""
    artifacts = tmp_path / "state" / "demo" / "ansible-runner" / "artifacts"
    return len(list(artifacts.iterdir())) if artifacts.exists() else 0


def test_create_diff_update_delete(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    provider = HostBootstrapProvider()
    inputs = _inputs(ansible_dir, target, tmp_path)

    created = provider.create(inputs)
    outs = created.outs
    assert set(outs["token"]) == set(PLAYBOOK_VARIABLES)
    assert (target / "node-b.token").read_text() == outs["token"]["k3s_agent_token"]
    kubeconfig = yaml.safe_load(outs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://10.9.0.1:6443"
    assert kubeconfig["current-context"] == "demo"
    assert outs["nodes"] == {"node-a": {"address": "10.9.0.1"}, "node-b": {"address": "10.9.0.2"}}
    assert outs["changed"] == {"node-a": 2, "node-b": 2}
    assert _runs(tmp_path) == 1

    # Nothing changed: no difference, and no Ansible run to find that out.
    assert provider.diff(created.id, outs, _inputs(ansible_dir, target, tmp_path)).changes is False
    assert _runs(tmp_path) == 1

    # A re-run asked for by the operator is a difference; the same request again is not.
    asked = {**_inputs(ansible_dir, target, tmp_path), "rerun": "1700000000"}
    assert provider.diff(created.id, outs, asked).changes is True
    assert provider.diff(created.id, {**outs, "rerun": "1700000000"}, asked).changes is False

    # A changed variable, or a changed playbook, is a difference.
    assert provider.diff(created.id, outs, _inputs(ansible_dir, target, tmp_path, extra="1")).changes
    site = ansible_dir / "playbooks" / "site.yml"
    site.write_text(site.read_text() + "# a new comment changes the content hash\n")
    news = _inputs(ansible_dir, target, tmp_path)
    assert provider.diff(created.id, outs, news).changes is True

    updated = provider.update(created.id, outs, news).outs
    assert updated["token"] == outs["token"], "the join token must survive an update"
    assert updated["content_hash"] == news["content_hash"]
    assert updated["changed"] == {"node-a": 0, "node-b": 0}
    assert _runs(tmp_path) == 2

    # The engine hands delete the stored outputs; the Ansible tree is found through them.
    provider.delete(created.id, updated)
    assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml"]
    assert _runs(tmp_path) == 3
