"""What ssh says when it cannot log in to a node, as the one line the operator reads: a host key
that changed, or that a strict policy has not pinned, is named as what it is, with how to check
it; anything else is ssh's own last word with what to check for a login.

ssh's words are OpenSSH's (openssh-portable sshconnect.c, check_host_key): the "WARNING: REMOTE
HOST IDENTIFICATION HAS CHANGED!" banner in rows of '@', "The fingerprint for the ED25519 key sent
by the remote host is SHA256:...", "Offending ED25519 key in FILE:LINE", "Host key for HOST has
changed and you have requested strict checking." and "No ED25519 host key is known for HOST and
you have requested strict checking.", each followed by "Host key verification failed.".
"""

from __future__ import annotations

import re
import shlex

CHANGED_MARKS = (
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "has changed and you have requested strict checking",
    "POSSIBLE DNS SPOOFING DETECTED",
)
UNKNOWN = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict checking")
FINGERPRINT = re.compile(
    r"The fingerprint for the (\S+) key sent by the remote host is\s+(\S+?)\.?\s*$", re.M
)
OFFENDING = re.compile(r"Offending \S+ key in (.+):([0-9]+)\s*$", re.M)
# The host key files a Debian or Ubuntu machine keeps, by the key type ssh names.
HOST_KEY_FILES = {
    "ED25519": "ssh_host_ed25519_key.pub",
    "ECDSA": "ssh_host_ecdsa_key.pub",
    "RSA": "ssh_host_rsa_key.pub",
}


def known_hosts_name(address: str, port: int | str) -> str:
    """How known_hosts names a host: its address, or `[address]:port` off port 22."""
    return address if str(port) == "22" else f"[{address}]:{port}"


def last_words(output: str) -> str:
    """ssh's last line that says something: never a row of '@' or a blank."""
    lines = [line.strip() for line in output.splitlines()]
    said = [line for line in lines if line and line.strip("@ ")]
    return " ".join(said[-1].split()) if said else "no reason given"


def login_problem(
    name: str,
    user: str,
    address: str,
    port: int | str,
    key_path: str,
    output: str,
    known_hosts: str | None = None,
) -> str:
    """The one line for a node that could not be logged in to, from ssh's output: doctor's, every
    labctl command's and the bootstrap's for a node Ansible could not reach."""
    who = f"{name} ({user}@{address}, port {port})"
    host = known_hosts_name(address, port)
    if any(mark in output for mark in CHANGED_MARKS):
        return _changed(who, host, output, known_hosts)
    unknown = UNKNOWN.search(output)
    if unknown:
        where = known_hosts or "the stack's known_hosts"
        key_file = HOST_KEY_FILES.get(unknown.group(1), "ssh_host_ed25519_key.pub")
        return (
            f"{who}: no SSH host key is pinned for it in {where} and k8scifar:ssh.hostKeyPolicy is"
            f" strict; check the key with `ssh-keygen -lf /etc/ssh/{key_file}` on the machine itself"
            f" and add it (`ssh-keyscan -p {port} {address} >> {where}` prints what to compare), or set"
            " hostKeyPolicy: accept-new to pin it on first contact"
        )
    return (
        f"{who}: cannot log in over SSH ({last_words(output)});"
        f" check the address, that the machine is up, and that {key_path}.pub is in"
        f" ~{user}/.ssh/authorized_keys there"
    )


def _changed(who: str, host: str, output: str, known_hosts: str | None) -> str:
    offending = OFFENDING.search(output)
    where = offending.group(1) if offending else known_hosts or "the stack's known_hosts"
    pinned = f"{where}:{offending.group(2)}" if offending else where
    found = FINGERPRINT.search(output)
    key_type, fingerprint = (found.group(1), found.group(2)) if found else ("ED25519", "")
    sent = f" it now sends {key_type} {fingerprint};" if fingerprint else ""
    key_file = HOST_KEY_FILES.get(key_type, "ssh_host_ed25519_key.pub")
    remove = shlex.join(["ssh-keygen", "-f", where, "-R", host])
    return (
        f"{who}: its SSH host key changed since the lab pinned it ({pinned}), so nothing was sent"
        f" to it:{sent} compare with `ssh-keygen -lf /etc/ssh/{key_file}` run on the machine itself"
        f" (its console); if they match (it was reinstalled), forget the old key with `{remove}` and"
        " run the command again, otherwise something is answering in its place"
    )
