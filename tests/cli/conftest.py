"""Fixtures for the CLI tests: a throw-away sshd that plays two nodes, stack files that point at
it, and `labctl` run as the operator runs it.

The two "nodes" are two addresses of a private network namespace, where the sshd listens and where
each test that uses it runs (with every process it starts): two loopback addresses would be one
machine to the loader, which refuses them, and these addresses are nobody's on the host. Both are
still this one machine, as `labctl doctor` finds.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

# TEST-NET-1 (RFC 5737): documentation addresses, on the namespace's loopback device only.
SERVER, AGENT = "192.0.2.1", "192.0.2.2"
# An address of no machine: the namespace has no route there, so a connection fails at once.
NOWHERE = "192.0.2.3"
NETNS = f"k8scifar-cli-{os.getpid()}"
NETNS_PREFIX = "k8scifar-cli-"
CLONE_NEWNET = 0x40000000  # <linux/sched.h>


@dataclass(frozen=True)
class Sshd:
    port: int
    key: Path


def free_port() -> int:
    """A port free on this network namespace's loopback (the nodes' namespace inside a test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """The namespace with SERVER and AGENT on its loopback device, removed afterwards."""
    _remove_stale_namespaces()
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        inside = ["ip", "-n", NETNS]
        subprocess.run([*inside, "link", "set", "lo", "up"], check=True)
        for address in (SERVER, AGENT):
            subprocess.run([*inside, "addr", "add", f"{address}/32", "dev", "lo"], check=True)
        yield
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="session")
def _sshd_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on SERVER and AGENT in the nodes' namespace, with its own host key, letting in root
    with a fresh key."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and logging in as the nodes' sudo user need root (CI runs as root)")
    with ExitStack() as stack:
        stack.enter_context(_nodes_network())
        yield stack.enter_context(_sshd(tmp_path_factory.mktemp("sshd")))


@pytest.fixture
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
        f"Port {port}\nListenAddress {SERVER}\nListenAddress {AGENT}\nHostKey {home / 'host_key'}\n"
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


def node(name: str, address: str, role: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "user": "root", "role": role, **extra}


def write_stack(stacks: Path, name: str, values: dict[str, Any]) -> Path:
    stacks.mkdir(parents=True, exist_ok=True)
    path = stacks / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {f"k8scifar:{k}": v for k, v in values.items()}}))
    return path


def loopback_values(sshd: Sshd, export: Path, **trainer: Any) -> dict[str, Any]:
    """A two-node stack whose nodes are the test sshd's two addresses."""
    return {
        "nodes": [node("node-a", SERVER, "server"), node("node-b", AGENT, "agent")],
        "ssh": {"keyPath": str(sshd.key), "port": sshd.port, "hostKeyPolicy": "off"},
        "nfs": {"exportPath": str(export)},
        "trainer": {"port": free_port(), **trainer},
    }


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def labctl(*args: str | Path, stdin: str = "") -> Result:
    """`labctl ARGS` in a fresh process, as the operator types it; output wide enough to read whole."""
    env = os.environ | {"COLUMNS": "250", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """Exit code 2, one line on stderr naming the problem, and no traceback."""
    assert result.code == 2, (result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labctl: "), result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _trainer(*args: str | Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainer", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# A narrow network on one thread: a run of a few epochs takes seconds on two cores.
TINY = ("--width", "8", "--batch-size", "128", "--tta", "0", "--threads", "1")


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder written by the real trainer: one run and a two-set learning-rate sweep.

    Synthetic CIFAR-format data and a narrow network keep it to seconds on two cores.
    """
    base = tmp_path_factory.mktemp("trainer")
    data, runs = base / "data", base / "runs"
    _trainer("data", "synthetic", "--dir", data, "--train", "512", "--test", "256")
    _trainer("train", "--data", data, "--runs", runs, "--run-name", "single", "--epochs", "2", *TINY)
    (base / "space.json").write_text('{"strategy": "grid", "parameters": {"lr": [0.02, 1.5]}}')
    _trainer("sweep", "generate", "--space", base / "space.json", "--out", base / "sweep.json")
    for index in ("0", "1"):
        sweep = ("--run-name", "lrsweep", "--sweep", base / "sweep.json", "--index", index)
        _trainer("train", "--data", data, "--runs", runs, *sweep, "--epochs", "2", *TINY)
    _trainer("sweep", "report", "--dir", runs / "lrsweep", "--plot", runs / "lrsweep" / "sweep.png")
    return runs
