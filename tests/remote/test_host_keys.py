"""Trust on SSH says what it is: a node whose host key changed since the lab pinned it is one line
saying so and how to check it (never "check authorized_keys", never ssh's rows of '@'), a strict
policy without a pinned key says that, and the state folder is absolute, so every ssh, labctl's
and Ansible's, pins and checks keys in the same file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.bootstrap.playbook_progress import SSH_FAILURE, Progress
from tests.support.labctl import assert_one_line_error, labctl, loopback_values, write_stack
from tests.support.sshd import SERVER, Sshd


def _stack(sshd: Sshd, tmp_path: Path, policy: str) -> Path:
    values = loopback_values(sshd, tmp_path / "export")
    values["ssh"]["hostKeyPolicy"] = policy
    stacks = tmp_path / "stacks"
    write_stack(stacks, "loop", values)
    return stacks


def _fingerprint(public_key: Path) -> str:
    done = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True, text=True, check=True)
    return done.stdout.split()[1]


def _other_key(tmp_path: Path) -> str:
    if not (tmp_path / "other.pub").exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
        )
    return " ".join((tmp_path / "other.pub").read_text().split()[:2])


def test_a_changed_host_key_is_one_line_saying_so(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("K8SCIFAR_STATE_DIR", str(state))
    stacks = _stack(sshd, tmp_path, "accept-new")
    # First contact pins the node's key in the stack's own known_hosts.
    first = labctl("status", "--stack", "loop", "--stacks-dir", stacks)
    assert "no cluster on node-a" in first.err, first.err
    known_hosts = state / "loop" / "known_hosts"
    found = subprocess.run(
        ["ssh-keygen", "-F", f"[{SERVER}]:{sshd.port}", "-f", str(known_hosts)],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0 and "ssh-ed25519" in found.stdout, known_hosts.read_text()
    # The machine now presents another key (reinstalled, or someone in between).
    known_hosts.write_text(f"[{SERVER}]:{sshd.port} {_other_key(tmp_path)}\n")
    result = labctl("status", "--stack", "loop", "--stacks-dir", stacks)
    assert_one_line_error(
        result,
        f"node-a (root@{SERVER}, port {sshd.port}): its SSH host key changed since the lab pinned it",
        f"({known_hosts}:1)",
        _fingerprint(sshd.key.parent / "host_key.pub"),
        "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub",
        f"ssh-keygen -f {known_hosts} -R '[{SERVER}]:{sshd.port}'",
    )
    assert "authorized_keys" not in result.err and "@@" not in result.err and "NASTY" not in result.err
    # Nothing was pinned over the old key.
    assert known_hosts.read_text() == f"[{SERVER}]:{sshd.port} {_other_key(tmp_path)}\n"


def test_a_strict_policy_without_a_pinned_key_says_so(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8SCIFAR_STATE_DIR", str(tmp_path / "state"))
    stacks = _stack(sshd, tmp_path, "strict")
    result = labctl("status", "--stack", "loop", "--stacks-dir", stacks)
    assert_one_line_error(
        result, "no SSH host key is pinned for it in", "hostKeyPolicy is strict", "accept-new"
    )
    assert "authorized_keys" not in result.err and "@@" not in result.err


def test_ansibles_unreachable_host_with_a_changed_key_is_the_same_line(sshd: Sshd, tmp_path: Path) -> None:
    """Ansible hands ssh's whole output over after "Failed to connect to the host via ssh: ", whose
    first line is a row of '@'."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{SERVER}]:{sshd.port} {_other_key(tmp_path)}\n")
    ssh = ["ssh", "-i", str(sshd.key), "-p", str(sshd.port), "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
    ssh += ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={known_hosts}"]
    done = subprocess.run([*ssh, f"root@{SERVER}", "true"], capture_output=True, text=True, check=False)
    assert done.returncode == 255 and "@@@" in done.stderr
    host = {"ansible_host": SERVER, "ansible_user": "root", "ansible_port": sshd.port}
    inventory = {"all": {"vars": {"ansible_ssh_private_key_file": str(sshd.key)}, "hosts": {"node-a": host}}}
    progress = Progress(None, open(os.devnull, "w"), False, inventory)  # noqa: SIM115
    line = progress.login_problem("node-a", SSH_FAILURE + done.stderr)
    assert line.startswith(f"node-a (root@{SERVER}, port {sshd.port}): its SSH host key changed"), line
    assert _fingerprint(sshd.key.parent / "host_key.pub") in line and "@@" not in line
    assert "authorized_keys" not in line and "\n" not in line


def test_a_relative_state_folder_is_made_absolute_once(tmp_path: Path) -> None:
    """ssh reads a relative UserKnownHostsFile from its own working folder, and Ansible's ssh runs
    in ansible-runner's: the lab hands every ssh, and every process it starts, the absolute one."""
    (tmp_path / "cwd").mkdir()
    probe = (
        "import os; from lab.bootstrap.inventory import known_hosts_file, ssh_common_args;"
        "from lab.config import HostKeyPolicy;"
        "print(ssh_common_args(HostKeyPolicy.ACCEPT_NEW, known_hosts_file('loop')));"
        "print(os.environ['K8SCIFAR_STATE_DIR'])"
    )
    root = Path(__file__).resolve().parents[2]
    for given in ("state", "./state/../state", "~/k8scifar-state-test"):
        env = {**os.environ, "K8SCIFAR_STATE_DIR": given, "PYTHONPATH": str(root), "HOME": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=tmp_path / "cwd", env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        args, handed_on = done.stdout.splitlines()
        expected = tmp_path / "k8scifar-state-test" if given.startswith("~") else tmp_path / "cwd" / "state"
        assert f'UserKnownHostsFile="{expected}/loop/known_hosts"' in args, args
        assert handed_on == str(expected)
        assert (expected / "loop" / "known_hosts").is_file()
