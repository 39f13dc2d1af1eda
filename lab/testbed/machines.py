"""Booting and stopping the machines: systemd-nspawn in the machine's network namespace.

The host has no systemd to register machines with, so nspawn runs with `--register=no
--keep-unit` as a plain child in its own session; the session id lets `down` stop it and
anything it left behind.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

from lab.testbed import cgroups, kubelet_host
from lab.testbed.commands import TestbedError, run
from lab.testbed.layout import NSPAWN_RUNTIME, USER, Layout, Machine

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3"]


def host_key_options(layout: Layout) -> list[str]:
    """Check the machine's host key against the testbed's own file, which holds it from the start."""
    return ["-o", f"UserKnownHostsFile={layout.known_hosts}", "-o", "StrictHostKeyChecking=yes"]


def prepare_runtime_dir(layout: Layout) -> None:
    """nspawn keeps per-machine state under /run/systemd/nspawn, which only systemd creates."""
    if NSPAWN_RUNTIME.is_dir():
        return
    NSPAWN_RUNTIME.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_RUNTIME)])
    (layout.state / "mounted-nspawn-runtime").write_text(f"{NSPAWN_RUNTIME}\n")


def release_runtime_dir(layout: Layout) -> None:
    """Unmount the runtime directory if this testbed mounted it and no other machine still uses it."""
    marker = layout.state / "mounted-nspawn-runtime"
    if not marker.exists():
        return
    # nspawn leaves its empty bookkeeping directories; any other entry belongs to a running machine.
    if all(p.is_dir() for p in NSPAWN_RUNTIME.rglob("*")):
        run(["umount", str(NSPAWN_RUNTIME)], check=False)
        NSPAWN_RUNTIME.rmdir()
    marker.unlink()


def boot(machine: Machine, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        "systemd-nspawn",
        f"--directory={machine.root}",
        f"--machine={machine.name}",
        f"--network-namespace-path={machine.netns_path}",
        "--register=no",
        "--keep-unit",
        "--resolv-conf=off",
        "--console=read-only",
        # Within the machine's own network namespace: links and firewall rules, as a node's CNI
        # and kube-proxy make them, can be made, listed and removed there.
        "--capability=CAP_NET_ADMIN",
        *kubelet_host.NSPAWN_OPTIONS,
        "--boot",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            cgroups.joined(cgroups.create(machine), cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def ssh_command(layout: Layout, machine: Machine, *command: str) -> list[str]:
    """The ssh command line that runs `command` on `machine` as the testbed user."""
    login = ["-i", str(layout.key), *host_key_options(layout), f"{USER}@{machine.address}"]
    return ["ssh", *SSH_OPTIONS, *login, *command]


def login_command(layout: Layout, machine: Machine) -> str:
    """The command a person types to log in to `machine`: the testbed's key and known_hosts, so a
    later testbed's new host keys never clash with a user's own known_hosts."""
    sudo = ["sudo"] if os.environ.get("SUDO_UID") else []  # the key is root's (the state is 0700)
    login = ["ssh", "-i", str(layout.key), *host_key_options(layout), f"{USER}@{machine.address}"]
    return shlex.join([*sudo, *login])


def wait_for_ssh(layout: Layout, machine: Machine, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TestbedError(f"{machine.name}: systemd-nspawn exited ({proc.returncode}) while booting")
        if run(ssh_command(layout, machine, "true"), check=False, timeout=10).returncode == 0:
            return
        time.sleep(0.5)
    raise TestbedError(f"{machine.name}: no SSH on {machine.address} within {timeout:.0f} s")
