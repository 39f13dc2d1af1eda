"""The machines' Debian trees: one debootstrap'ed base kept in the cache, copied and personalised.

debootstrap takes about a minute, so the base tree is built once per package set and mirror and
copied for each machine; every machine then gets its own hostname, machine id, SSH host keys,
login user and apt proxy before it boots.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from lab.testbed import kubelet_host
from lab.testbed.commands import run
from lab.testbed.layout import USER, Layout, Machine
from lab.testbed.tree_cache import cached_tree

SUITE = "bookworm"
PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "sudo"]


def base_tree(mirror: str) -> Path:
    """The cached base tree for this mirror and package set, built now if missing."""

    def build(building: Path) -> None:
        include = f"--include={','.join(PACKAGES)}"
        run(["debootstrap", "--variant=minbase", include, SUITE, str(building), mirror], timeout=900)
        # Host keys are made per machine; a copied key would make every machine the same host.
        for key_file in (building / "etc/ssh").glob("ssh_host_*"):
            key_file.unlink()
        (building / "etc/machine-id").write_text("")
        run(["chroot", str(building), "useradd", "--create-home", "--shell", "/bin/bash", USER])

    return cached_tree(f"base-{SUITE}", f"{SUITE} {mirror} {' '.join(PACKAGES)}", build)


def install(layout: Layout, machine: Machine, base: Path, public_key: str) -> None:
    """Copy the base tree to the machine's root and make it that machine."""
    machine.root.parent.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", "--reflink=auto", str(base), str(machine.root)])
    root = machine.root
    (root / "etc/hostname").write_text(f"{machine.name}\n")
    (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    hosts = "".join(f"{m.address} {m.name}\n" for m in layout.machines)
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{hosts}")
    run(["ssh-keygen", "-A", "-f", str(root)])
    _pin_host_keys(layout, machine)
    proxy = f'Acquire::http::Proxy "{layout.apt_proxy}";\nAcquire::https::Proxy "false";\n'
    (root / "etc/apt/apt.conf.d/01proxy").write_text(proxy)
    sudoers = root / "etc/sudoers.d" / USER
    sudoers.write_text(f"{USER} ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    _authorize(root, public_key)
    kubelet_host.prepare(root)


def _pin_host_keys(layout: Layout, machine: Machine) -> None:
    """Add the machine's new host keys to the testbed's known_hosts (sshd's own public halves)."""
    keys = sorted((machine.root / "etc/ssh").glob("ssh_host_*_key.pub"))
    lines = "".join(f"{machine.address} {' '.join(k.read_text().split()[:2])}\n" for k in keys)
    with layout.known_hosts.open("a") as known:
        known.write(lines)


def _authorize(root: Path, public_key: str) -> None:
    home = root / "home" / USER
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(public_key)
    keys.chmod(0o600)
    owner = home.stat()
    for path in (ssh_dir, keys):
        shutil.chown(path, owner.st_uid, owner.st_gid)
