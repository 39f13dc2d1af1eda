"""The host bootstrap inside Pulumi's real dynamic provider host, driven over gRPC like the engine.

The host runs from a checkout made for the test (the lab package and a throw-away Ansible tree
whose playbooks use a local connection), in a working directory that is not that checkout, with
the operator's credentials in its environment. Forking from this process while its gRPC threads
run killed ansible-playbook before it started in 12 of 42 runs before the playbooks moved to a
fresh process; every run must now succeed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path

import grpc
import pytest
import yaml
from pulumi.runtime.proto import provider_pb2

from lab.bootstrap.resource import HostBootstrapProvider
from tests.support.pretend_bootstrap import RESET, SITE, local_inventory, make_ansible_dir
from tests.support.provider_host import PROVIDER_BEFORE_THE_MOVE, PROVIDER_KEY, ProviderHost, provider_host

REPO = Path(__file__).resolve().parents[2]
UPDATES = 12
LAB = {
    "nodes": [
        {"name": "node-a", "address": "10.9.0.1", "user": "lab", "role": "server"},
        {"name": "node-b", "address": "10.9.0.2", "user": "lab", "role": "agent"},
    ]
}
PASSPHRASE = "Passphrase-SECRET-MARKER"
# A site.yml that reports the nodes it is the first to change (as the lab_state role's guard
# does, by their record: here the marker), changes every node (the marker holds a number the
# program made, as the engine hands it on), then fails on node-c: a first `up`, or an update
# adding node-c, stopped half-way.
FAILING_ON_C = """\
- name: Change every node, then fail on node-c
  hosts: all
  gather_facts: false
  tasks:
    - name: Look for the node's record from an earlier run
      ansible.builtin.stat:
        path: "{{ target }}/{{ inventory_hostname }}"
      register: record
    - name: Report the node as one this run is the first to change
      ansible.builtin.set_stats:
        data:
          lab_fresh_nodes: "{{ {inventory_hostname: true} }}"
        per_host: false
      when: not record.stat.exists
    - name: Write the node's marker, owned by the trainer's uid
      ansible.builtin.copy:
        content: "{{ lab_trainer_uid }}"
        dest: "{{ target }}/{{ inventory_hostname }}"
        mode: "0644"
    - name: Fail on node-c
      ansible.builtin.fail:
        msg: "node-c cannot take the lab"
      when: inventory_hostname == "node-c"
    - name: Return the kubeconfig
      ansible.builtin.set_stats:
        data:
          lab_kubeconfig: ""
"""
# The state in the checkout's own .lab/, as on an operator's machine (the suite otherwise keeps it
# in a temporary folder): where it lives after a move is what these tests are about.
CHECKOUT_STATE = {"K8SCIFAR_STATE_DIR": ""}
# A fake ssh that records how Ansible called it and fails like an unreachable host.
FAKE_SSH = '#!/bin/sh\necho "$@" >> "$(dirname "$0")/ssh-calls"\nexit 255\n'


def _checkout(root: Path, site: str = SITE) -> Path:
    """A checkout of the lab at `root`: its Python packages (lab imports the trainer's rules), and
    the throw-away Ansible tree."""
    for package in ("lab", "trainer"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    # Taking a node out of the pretend cluster is resetting it.
    make_ansible_dir(root / "ansible", site=site, reset=RESET, remove_nodes=RESET)
    return root


def _inputs(checkout: Path, inventory: dict | None) -> dict:
    """The bootstrap's inputs as the program in `checkout` makes them (`pulumi up` runs it there)."""
    script = (
        "import json, sys\n"
        "from lab.config import parse_config\n"
        "from lab.bootstrap.resource import bootstrap_inputs\n"
        "lab, inventory = json.load(sys.stdin)\n"
        "print(json.dumps(bootstrap_inputs(parse_config(lab), 'demo', inventory=inventory)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([LAB, inventory]),
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout), **CHECKOUT_STATE},
    )
    return json.loads(done.stdout)


def _host(checkout: Path, tmp_path: Path, **env: str) -> AbstractContextManager[ProviderHost]:
    """The provider host for `checkout`, with the operator's credentials (and `env`) around it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    credentials = {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_ACCESS_TOKEN": PASSPHRASE}
    environment = {**credentials, **CHECKOUT_STATE, **env}
    return provider_host(HostBootstrapProvider(), elsewhere, checkout, environment)


def _create(host: ProviderHost, inputs: dict) -> tuple[str, dict, dict]:
    host.configure()
    checked = host.check(inputs)
    id_, outs = host.create(checked)
    return id_, outs, checked


def _files_containing(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_every_playbook_run_succeeds_in_the_provider_host(target: Path, tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    inputs = _inputs(checkout, local_inventory(target, ["node-a", "node-b"]))
    failed: list[str] = []
    with _host(checkout, tmp_path) as host:
        id_, outs, checked = _create(host, inputs)
        token = outs["token"]
        assert (target / "node-b.token").read_text() == token["k3s_agent_token"]
        assert yaml.safe_load(outs["kubeconfig"])["current-context"] == "demo"
        assert host.diff(id_, outs, checked) == provider_pb2.DiffResponse.DIFF_NONE
        for run in range(UPDATES):
            news = host.check({**inputs, "rerun": f"update-{run}"})
            assert host.diff(id_, outs, news) == provider_pb2.DiffResponse.DIFF_SOME
            try:
                outs = host.update(id_, outs, news)
            except grpc.RpcError as err:
                failed.append(f"update {run}: {err.details().strip().splitlines()[-3:]}")
        assert outs["token"] == token, "the join token must survive every update"
        host.delete(id_, outs)
    assert not failed, f"{len(failed)} of {UPDATES} updates failed: {failed}"
    assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml"], "reset.yml did not run"
    # The operator's credentials never reach what the runs leave on disk.
    assert _files_containing(checkout / ".lab", PASSPHRASE) == []
    for secret in token.values():
        assert _files_containing(checkout / ".lab", secret) == [], "a join secret was left on disk"


def test_destroy_works_from_a_moved_checkout(target: Path, tmp_path: Path) -> None:
    first = _checkout(tmp_path / "first")
    inputs = _inputs(first, local_inventory(target, ["node-a", "node-b"]))
    with _host(first, tmp_path) as host:
        id_, outs, _ = _create(host, inputs)
    stored = json.dumps(outs)
    assert str(first) not in stored, "the stored outputs name the checkout they were made in"

    moved = first.rename(tmp_path / "moved")
    with _host(moved, tmp_path) as host:
        host.configure()
        host.delete(id_, outs)
    assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml"], "reset.yml did not run"
    assert list((moved / ".lab" / "demo" / "ansible-runner" / "artifacts").iterdir())

    # Over SSH, the stack's known_hosts file is the moved checkout's, and the key is found in the
    # home directory of whoever runs the destroy.
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text(FAKE_SSH)
    fake_ssh.chmod(0o755)
    inventory = _inputs(moved, None)["inventory"]
    inventory["all"]["vars"].update(ansible_ssh_executable=str(fake_ssh), target=str(target))
    home = tmp_path / "home"
    home.mkdir()
    with (
        _host(moved, tmp_path, HOME=str(home)) as host,
        pytest.raises(grpc.RpcError, match=r"reset\.yml failed"),
    ):
        host.configure()
        host.delete(id_, {**outs, "inventory": inventory})
    calls = (tmp_path / "ssh-calls").read_text()
    assert f'UserKnownHostsFile="{moved / ".lab" / "demo" / "known_hosts"}"' in calls
    assert f'IdentityFile="{home}/.ssh/id_ed25519"' in calls
    # The stack's host-key policy (accept-new by default) is the only one ssh is given.
    assert "StrictHostKeyChecking=accept-new" in calls and "StrictHostKeyChecking=no" not in calls


def test_destroy_works_for_a_state_written_before_the_bootstrap_moved(target: Path, tmp_path: Path) -> None:
    """The engine hands delete the stored outputs, `__provider` as it was pickled then."""
    checkout = _checkout(tmp_path / "checkout")
    inputs = _inputs(checkout, local_inventory(target, ["node-a", "node-b"]))
    with _host(checkout, tmp_path) as host:
        id_, outs, _ = _create(host, inputs)
        assert outs[PROVIDER_KEY] != PROVIDER_BEFORE_THE_MOVE
        host.configure()
        host.delete(id_, {**outs, PROVIDER_KEY: PROVIDER_BEFORE_THE_MOVE})
    assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml"], "reset.yml did not run"


def test_a_run_that_fails_half_way_leaves_no_change_the_state_cannot_reach(
    target: Path, tmp_path: Path
) -> None:
    """A failed create is not recorded, so it resets the nodes it was the first to change before
    reporting (node-b, already in a lab, is left be); a failed update keeps the stored outputs, so it
    takes out only the node it was adding. Numbers reach Ansible as the program made them, though
    the engine carries them as doubles."""
    checkout = _checkout(tmp_path / "checkout", site=FAILING_ON_C)
    two = _inputs(checkout, local_inventory(target, ["node-a", "node-b"], lab_trainer_uid=10001))
    three = _inputs(checkout, local_inventory(target, ["node-a", "node-b", "node-c"], lab_trainer_uid=10001))
    (target / "node-b").write_text("a lab made before\n")
    with _host(checkout, tmp_path) as host:
        host.configure()
        with pytest.raises(grpc.RpcError) as first_up:
            host.create(host.check(three))
        assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml", "node-b"], (
            "the failed create left changes"
        )
        told = first_up.value.details()
        assert "host node-c, task 'Fail on node-c': node-c cannot take the lab" in told
        assert "reset.yml then undid what the run had changed on node-a, node-c; fix the cause" in told

        id_, outs, _ = _create(host, two)
        assert (target / "node-a").read_text() == "10001", "a number reached Ansible as the engine carried it"
        with pytest.raises(grpc.RpcError) as adding:
            host.update(id_, outs, host.check(three))
        assert "remove_nodes.yml then undid what the run had changed on node-c;" in adding.value.details()
        assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml", "node-a", "node-b"]
        host.delete(id_, outs)
    assert sorted(p.name for p in target.iterdir()) == ["k3s.yaml"], "destroy did not reach the stored nodes"
