"""`labctl init` over real SSH: it checks the machines, detects what it can and writes a stack file
that the lab's own loader accepts; bad input stops it before anything is written."""

from __future__ import annotations

import socket
from pathlib import Path

from lab.config import load_stack
from tests.support.labctl import Labctl, assert_one_line_error, labctl
from tests.support.sshd import AGENT, SERVER, Sshd


def _ssh_flags(sshd: Sshd) -> list[str]:
    return ["--key", str(sshd.key), "--ssh-port", str(sshd.port), "--host-key-policy", "off"]


def test_init_from_flags_writes_a_loadable_stack(sshd: Sshd, tmp_path: Path) -> None:
    result = labctl(
        "init", "--stack", "mine", "--stacks-dir", tmp_path,
        "--server", f"alpha=root@{SERVER}", "--agent", f"beta=root@{AGENT}", *_ssh_flags(sshd),
    )  # fmt: skip
    assert result.code == 0, result.err
    cfg = load_stack("mine", tmp_path)
    assert [(n.name, n.address, n.role.value) for n in cfg.nodes] == [
        ("alpha", SERVER, "server"),
        ("beta", AGENT, "agent"),
    ]
    # Loopback reaches loopback over `lo`; this machine has no NVIDIA GPU.
    assert [n.interface for n in cfg.nodes] == ["lo", "lo"]
    assert cfg.total_gpus == 0 and cfg.ssh.port == sshd.port
    text = (tmp_path / "Pulumi.mine.yaml").read_text()
    assert "# Written by `labctl init`" in text and "# SSH user with passwordless sudo." in text
    assert "labctl doctor --stack mine" in result.out


def test_init_names_a_node_after_its_hostname(sshd: Sshd, tmp_path: Path) -> None:
    result = labctl(
        "init", "--stack", "one", "--stacks-dir", tmp_path, "--server", f"root@{SERVER}", *_ssh_flags(sshd)
    )
    assert result.code == 0, result.err
    hostname = socket.gethostname().split(".")[0].lower()
    assert load_stack("one", tmp_path).server.name == hostname


def test_init_asks_when_no_machines_are_given(sshd: Sshd, tmp_path: Path) -> None:
    answers = f"root\n{SERVER}\n{AGENT}\n\n"
    result = labctl("init", "--stack", "asked", "--stacks-dir", tmp_path, *_ssh_flags(sshd), stdin=answers)
    # Both loopback "machines" share this host's name, as machines cloned from one image do.
    assert_one_line_error(result, f"the machines at {SERVER}, {AGENT} are all called", "--server gpu-a=")
    assert not (tmp_path / "Pulumi.asked.yaml").exists()
    named = f"root\nleft={SERVER}\nright={AGENT}\n\n"
    result = labctl("init", "--stack", "asked", "--stacks-dir", tmp_path, *_ssh_flags(sshd), stdin=named)
    assert result.code == 0, result.err
    nodes = load_stack("asked", tmp_path).nodes
    assert [(n.name, n.address, n.role.value) for n in nodes] == [
        ("left", SERVER, "server"),
        ("right", AGENT, "agent"),
    ]


def test_init_without_answers_says_how_to_give_them(tmp_path: Path, labctl_in_process: Labctl) -> None:
    result = labctl_in_process("init", "--stack", "x", "--stacks-dir", tmp_path, stdin="")
    assert_one_line_error(result, "--server")


def test_init_refuses_to_overwrite_without_force(sshd: Sshd, tmp_path: Path) -> None:
    existing = tmp_path / "Pulumi.kept.yaml"
    existing.write_text("config: {}\n")
    args = [
        "init",
        "--stack",
        "kept",
        "--stacks-dir",
        tmp_path,
        "--server",
        f"a=root@{SERVER}",
        *_ssh_flags(sshd),
    ]
    assert_one_line_error(labctl(*args), "already exists", "--force")
    assert existing.read_text() == "config: {}\n"
    assert labctl(*args, "--force").code == 0
    assert load_stack("kept", tmp_path).server.name == "a"


def test_init_rejects_a_bad_address_before_connecting(tmp_path: Path, labctl_in_process: Labctl) -> None:
    result = labctl_in_process(
        "init", "--stack", "bad", "--stacks-dir", tmp_path, "--server", "root@192.168.1.300"
    )
    assert_one_line_error(result, "k8scifar:nodes[0].address", "not an IP address")
    result = labctl_in_process("init", "--stack", "bad", "--stacks-dir", tmp_path, "--server", "no-at-sign")
    assert_one_line_error(result, "[NAME=]USER@ADDRESS")
    assert list(tmp_path.iterdir()) == []


def test_init_needs_an_existing_key(tmp_path: Path, labctl_in_process: Labctl) -> None:
    missing = tmp_path / "no_key"
    result = labctl_in_process(
        "init", "--stack", "k", "--stacks-dir", tmp_path, "--server", f"a=root@{SERVER}", "--key", missing
    )
    assert_one_line_error(result, f"SSH key {missing} does not exist", "ssh-keygen")
    assert not (tmp_path / "Pulumi.k.yaml").exists()


def test_init_names_an_unreachable_machine(sshd: Sshd, tmp_path: Path) -> None:
    # Nothing listens on 127.0.0.3 at the test sshd's port.
    result = labctl(
        "init", "--stack", "gone", "--stacks-dir", tmp_path, "--server", "c=root@127.0.0.3", *_ssh_flags(sshd)
    )
    assert_one_line_error(result, "c (root@127.0.0.3", "cannot log in over SSH", "authorized_keys")
    assert list(tmp_path.iterdir()) == []
