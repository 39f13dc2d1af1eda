"""Run commands on the lab's nodes with the system `ssh`, the stack's key and its host-key policy
(the same options and known_hosts file as Ansible).

BatchMode is always on: a node that would ask for a password or a host-key confirmation fails at
once with a message naming the node, instead of hanging a command that a person is waiting on.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.bootstrap.inventory import known_hosts_file, login_problem, ssh_common_args
from lab.config import Node, Ssh

# ssh exits with 255 when it could not connect or authenticate; any other code is the command's.
SSH_FAILED = 255
# Never ask: no password, passphrase or host-key question (a terminal run would stop at it).
NEVER_PROMPT = "-o BatchMode=yes"
CONNECT_TIMEOUT_S = 10


def sudo_fix(user: str) -> str:
    """How to give `user` the passwordless sudo the lab needs."""
    return f"add '{user} ALL=(ALL) NOPASSWD: ALL' to /etc/sudoers.d/{user}"


class SshError(RuntimeError):
    """A node that cannot be reached or logged in to; the message says which and what to check."""


@dataclass(frozen=True)
class Remote:
    """One node as the operator's machine reaches it."""

    node: Node
    ssh: Ssh
    known_hosts: Path  # the stack's own file, the one Ansible pins host keys in
    connect_timeout: int = CONNECT_TIMEOUT_S

    @classmethod
    def of(cls, stack: str, ssh: Ssh, node: Node) -> Remote:
        return cls(node, ssh, known_hosts_file(stack))

    @property
    def target(self) -> str:
        return f"{self.node.user}@{self.node.address}"

    def options(self) -> list[str]:
        """The ssh options every connection to this node uses."""
        key = Path(self.ssh.key_path).expanduser()
        opts = [
            "-i",
            str(key),
            "-p",
            str(self.ssh.port),
            *NEVER_PROMPT.split(),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            "LogLevel=ERROR",
        ]
        opts += shlex.split(ssh_common_args(self.ssh.host_key_policy, self.known_hosts))
        return opts

    def argv(self, command: str) -> list[str]:
        return ["ssh", *self.options(), self.target, command]

    def run(
        self, command: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` in the node's login shell; SshError when the node cannot be reached."""
        return self._run(command, stdin, timeout, text=True)

    def run_bytes(
        self, command: str, stdin: bytes | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[bytes]:
        """`run` for commands whose output is binary, such as a tar stream."""
        return self._run(command, stdin, timeout, text=False)

    def _run(
        self, command: str, stdin: str | bytes | None, timeout: float, text: bool
    ) -> subprocess.CompletedProcess[Any]:
        self._check_key()
        try:
            done = subprocess.run(
                self.argv(command), input=stdin, capture_output=True, text=text, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SshError(
                f"{self.node.name} ({self.target}): no answer within {timeout:.0f} s over SSH;"
                " check that the machine is up and the address is right"
            ) from None
        if done.returncode == SSH_FAILED:
            stderr = done.stderr if text else done.stderr.decode(errors="replace")
            raise SshError(self.unreachable(stderr))
        return done

    def popen(self, command: str) -> subprocess.Popen[str]:
        """Start `command` on the node and return at once; the caller writes its stdin, reads its output."""
        self._check_key()
        return subprocess.Popen(
            self.argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _check_key(self) -> None:
        key = Path(self.ssh.key_path).expanduser()
        if not key.is_file():
            raise SshError(
                f"SSH key {key} does not exist; create one with `ssh-keygen -t ed25519 -f {key}` and copy it"
                " to the nodes with ssh-copy-id, or point k8scifar:ssh.keyPath (labctl init --key) at yours"
            )

    def unreachable(self, stderr: str) -> str:
        """The one-line message for a failed connection, from what ssh said about it."""
        return login_problem(
            self.node.name,
            self.node.user,
            self.node.address,
            self.ssh.port,
            self.ssh.key_path,
            stderr,
            str(self.known_hosts),
        )
