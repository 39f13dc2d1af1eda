"""`labctl validate` before the suite: nodes that cannot be reached or logged in to, and a lab with no
cluster yet, are one line each and exit 2 at once, against a real sshd and a real dead address."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lab.config import load_stack
from lab.validation.runner import write_inventory
from tests.support.labctl import Result, labctl, loopback_values, node, write_stack
from tests.support.sshd import AGENT, NOWHERE, SERVER, Sshd

# The stack's nodes have no Kubernetes: without this skip validate reports "no cluster yet".
NO_KUBERNETES = {"kubernetesInstall": "the test sshd's nodes are this machine, which runs no cluster"}
# A namespace of the tests' own where an address exists on a link that nothing answers on.
DEAD_NETNS = "k8c-validate"
DEAD_ADDRESS = "10.78.0.99"


def _problem_lines(result: Result) -> list[str]:
    return [line for line in result.out.splitlines() if line.strip()]


def _assert_suite_never_ran(result: Result) -> None:
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.out + result.err
    assert "CommandResult" not in result.out
    assert not any(line.startswith(("PASS", "FAIL", "SKIP", "ERROR")) for line in result.out.splitlines())


def test_an_unreachable_node_is_one_line_and_the_suite_does_not_start(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"][1] = node("node-b", NOWHERE, "agent")
    write_stack(tmp_path, "half", values | {"skip": NO_KUBERNETES})
    result = labctl("validate", "--stack", "half", "--stacks-dir", tmp_path)
    _assert_suite_never_ran(result)
    lines = _problem_lines(result)
    assert len(lines) == 1, result.out
    assert lines[0].startswith(f"node-b (root@{NOWHERE}") and "cannot log in over SSH" in lines[0]


def test_a_wrong_key_is_one_line_per_node(sshd: Sshd, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    values = loopback_values(sshd, tmp_path / "export")
    values["ssh"]["keyPath"] = str(wrong)
    write_stack(tmp_path, "wrongkey", values | {"skip": NO_KUBERNETES})
    result = labctl("validate", "--stack", "wrongkey", "--stacks-dir", tmp_path)
    _assert_suite_never_ran(result)
    lines = _problem_lines(result)
    assert [line.split(" ", 1)[0] for line in lines] == ["node-a", "node-b"], result.out
    assert all("Permission denied" in line and "authorized_keys" in line for line in lines)


@pytest.fixture
def dead_address() -> Iterator[list[str]]:
    """A network namespace whose only route leads to a veth whose far end has no address, and a
    fixed neighbour entry for the dead address: a SYN there is sent and never answered, as with a
    machine that is switched off. Yields the `ip netns exec` prefix."""
    subprocess.run(["ip", "netns", "add", DEAD_NETNS], check=True)
    try:
        inside = ["ip", "-n", DEAD_NETNS]
        subprocess.run([*inside, "link", "set", "lo", "up"], check=True)
        subprocess.run([*inside, "link", "add", "dead0", "type", "veth", "peer", "name", "dead1"], check=True)
        subprocess.run([*inside, "addr", "add", "10.78.0.1/24", "dev", "dead0"], check=True)
        for link in ("dead0", "dead1"):
            subprocess.run([*inside, "link", "set", link, "up"], check=True)
        neighbour = [DEAD_ADDRESS, "lladdr", "02:00:00:00:00:99", "dev", "dead0", "nud", "permanent"]
        subprocess.run([*inside, "neigh", "add", *neighbour], check=True)
        yield ["ip", "netns", "exec", DEAD_NETNS]
    finally:
        subprocess.run(["ip", "netns", "delete", DEAD_NETNS], check=True)


def test_a_node_that_never_answers_stops_validate_within_the_connect_timeout(
    sshd: Sshd, tmp_path: Path, dead_address: list[str]
) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    values["nodes"] = [node("gone", DEAD_ADDRESS, "server")]
    write_stack(tmp_path, "dead", values | {"skip": NO_KUBERNETES})
    done = subprocess.run(
        [
            *dead_address,
            sys.executable,
            "-m",
            "lab.cli",
            "validate",
            "--stack",
            "dead",
            "--stacks-dir",
            tmp_path,
        ],
        capture_output=True,
        text=True,
        timeout=60,  # the old suite spent minutes on each check before giving up
        check=False,
    )
    result = Result(done.returncode, done.stdout, done.stderr)
    _assert_suite_never_ran(result)
    lines = _problem_lines(result)
    assert len(lines) == 1 and lines[0].startswith(f"gone (root@{DEAD_ADDRESS}"), result.out
    assert "timed out" in lines[0], lines[0]


def test_a_lab_with_no_cluster_yet_says_so(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "fresh", loopback_values(sshd, tmp_path / "export"))
    result = labctl("validate", "--stack", "fresh", "--stacks-dir", tmp_path)
    _assert_suite_never_ran(result)
    lines = _problem_lines(result)
    assert len(lines) == 1 and f"no cluster on node-a ({SERVER}) yet" in lines[0], result.out
    assert "labctl hosts up --stack fresh" in lines[0] or "pulumi up --stack fresh" in lines[0]


def test_the_suite_never_asks_for_a_password(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "batch", loopback_values(sshd, tmp_path / "export"))
    inventory = yaml.safe_load(write_inventory(load_stack("batch", tmp_path), "batch").read_text())
    # testinfra's ansible backend hands these to ssh: a prompt there would stop a terminal run.
    assert "-o BatchMode=yes" in inventory["all"]["vars"]["ansible_ssh_extra_args"]


def test_a_reachable_lab_without_kubernetes_runs_the_suite(sshd: Sshd, tmp_path: Path) -> None:
    values = loopback_values(sshd, tmp_path / "export")
    write_stack(tmp_path, "hostsonly", values | {"skip": NO_KUBERNETES})
    result = labctl("validate", "--stack", "hostsonly", "--stacks-dir", tmp_path)
    assert result.code == 1, result.out + result.err
    lines = result.out.splitlines()
    assert any(line.startswith("PASS") and "node-a, node-b" in line for line in lines), result.out
    assert "kubernetesInstall is skipped in this stack" in result.out
    assert AGENT not in result.err
