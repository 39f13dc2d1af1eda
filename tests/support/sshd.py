"""A throw-away sshd that plays two nodes, for tests that log in as labctl and Ansible do.

The two "nodes" are two addresses of a private network namespace, where the sshd listens and where
each test that uses it runs (with every process it starts): two loopback addresses would be one
machine to the loader, which refuses them, and these addresses are nobody's on the host. Both are
still this one machine, as `labctl doctor` finds. tests/conftest.py registers this module as a
plugin, so the fixtures are declared once: the namespace is named after this process (each
parallel worker has its own) and made once per session. The tests that log in still take turns
across workers (xdist group `sshd`, tests/support/tiers.py): what they run as root over those
logins acts on this machine's own files and processes, which no network namespace keeps apart.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.tiers import costly

# TEST-NET-1 (RFC 5737): documentation addresses, on the namespace's loopback device only.
SERVER, AGENT = "192.0.2.1", "192.0.2.2"
# A third node's address, for labs of more than two nodes.
THIRD = "192.0.2.4"
# An address of no machine: the namespace has no route there, so a connection fails at once.
NOWHERE = "192.0.2.3"
NETNS = f"k8scifar-cli-{os.getpid()}"
NETNS_PREFIX = "k8scifar-cli-"
CLONE_NEWNET = 0x40000000  # <linux/sched.h>


@dataclass(frozen=True)
class Sshd:
    port: int
    key: Path


def _setns(path: str) -> None:
    """Move this thread, and so every process it starts, into the network namespace at `path`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def _remove_stale_namespaces() -> None:
    """Namespaces of test runs that were killed before their clean-up (their pid is gone)."""
    for path in Path("/run/netns").glob(f"{NETNS_PREFIX}*"):
        pid = path.name.removeprefix(NETNS_PREFIX)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["ip", "netns", "delete", path.name], check=False)


@contextmanager
def _nodes_network() -> Iterator[None]:
    """The namespace with SERVER, AGENT and THIRD on its loopback device, removed afterwards."""
    _remove_stale_namespaces()
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        inside = ["ip", "-n", NETNS]
        subprocess.run([*inside, "link", "set", "lo", "up"], check=True)
        for address in (SERVER, AGENT, THIRD):
            subprocess.run([*inside, "addr", "add", f"{address}/32", "dev", "lo"], check=True)
        yield
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="session")
def _sshd_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on SERVER, AGENT and THIRD in the nodes' namespace, with its own host key, letting in root
    with a fresh key."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and logging in as the nodes' sudo user need root (CI runs as root)")
    with ExitStack() as stack:
        stack.enter_context(_nodes_network())
        yield stack.enter_context(_sshd(tmp_path_factory.mktemp("sshd")))


@pytest.fixture
@costly("logins over real SSH to the test sshd", shares="sshd")
def sshd(_sshd_daemon: Sshd) -> Iterator[Sshd]:
    """The test sshd; the test runs in the nodes' namespace, and so does every process it starts."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        _setns(f"/run/netns/{NETNS}")
        yield _sshd_daemon
    finally:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(home, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the host's network")
        os.close(home)


@contextmanager
def _sshd(home: Path) -> Iterator[Sshd]:
    exe = shutil.which("sshd") or "/usr/sbin/sshd"
    _keygen(home / "host_key")
    _keygen(home / "client_key")
    shutil.copy(home / "client_key.pub", home / "authorized_keys")
    port = 2222  # the namespace's own ports are all free
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress {SERVER}\nListenAddress {AGENT}\nListenAddress {THIRD}\n"
        f"HostKey {home / 'host_key'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        "UsePAM no\nStrictModes no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    daemon = subprocess.Popen(
        ["ip", "netns", "exec", NETNS, exe, "-D", "-e", "-f", str(home / "sshd_config")],
        stderr=subprocess.PIPE,
    )
    probe = f"import socket; socket.create_connection(({AGENT!r}, {port}), timeout=1).close()"
    deadline = time.monotonic() + 10
    while subprocess.run(
        ["ip", "netns", "exec", NETNS, sys.executable, "-c", probe], capture_output=True
    ).returncode:
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            raise RuntimeError(f"sshd did not start: {daemon.communicate()[1].decode()}")
        time.sleep(0.1)
    try:
        yield Sshd(port, home / "client_key")
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
