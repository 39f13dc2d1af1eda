#!/usr/bin/python3
"""Unmounts what a Kubernetes node mounted below the cluster's directories, deepest first.

The list comes from /proc/self/mounts, read at the moment of unmounting, as k3s's own
k3s-killall.sh reads it (k3s-io/k3s install.sh, create_killall: do_unmount_and_remove). Ansible's
mount facts cannot serve: ansible-core's get_mount_facts (module_utils/facts/hardware/linux.py)
drops every entry whose source neither starts with `/` nor holds `:/`, which is every tmpfs
(service-account tokens, `shm`), overlay (container root filesystems) and nsfs (pod network
namespaces) a node has; and facts gathered before `kubeadm reset` name mounts it has since
unmounted.

- directories: a mount point at one of them or below it is the cluster's (`/var/lib/kubelet`
  covers `/var/lib/kubelet/pods/...`, not `/var/lib/kubelet-old`).
- namespaces: a path prefix of network namespace files (`/run/netns/cni-`, the name containerd's
  CRI gives a pod's namespace). A namespace file no process is in is a dead pod's: unmounted and
  its file removed. One a live process is in belongs to something still running (podman 3 names
  its namespaces the same way) and is left alone.

A mount that is busy is detached (MNT_DETACH); an NFS mount is forced first (MNT_FORCE), so an
unreachable server cannot hang the reset. Mount points stacked on one path are unmounted one
after the other.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re

from ansible.module_utils.basic import AnsibleModule

MNT_FORCE = 1
MNT_DETACH = 2
# More rounds than any stack of mounts a node holds: each round unmounts the top of every point.
ROUNDS = 20


def _unescape(field: str) -> str:
    """A /proc/self/mounts field with the kernel's octal escapes (space, tab, newline, \\) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(table: str = "/proc/self/mounts") -> list[tuple[str, str, str]]:
    """(source, mount point, filesystem type) of each mount, in the order the kernel lists them."""
    with open(table, encoding="utf-8", errors="surrogateescape") as found:
        rows = [line.split() for line in found]
    return [(_unescape(r[0]), _unescape(r[1]), r[2]) for r in rows if len(r) >= 3]


def _below(path: str, directories: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)


def _namespaces_in_use() -> set[tuple[int, int]]:
    """(device, inode) of every network namespace a live process is in."""
    found = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                ns = os.stat(f"/proc/{pid}/ns/net")
            except OSError:  # gone meanwhile, or a kernel thread
                continue
            found.add((ns.st_dev, ns.st_ino))
    return found


def _in_use(path: str, used: set[tuple[int, int]]) -> bool:
    try:
        ns = os.stat(path)
    except OSError:
        return False
    return (ns.st_dev, ns.st_ino) in used


def _umount(libc: ctypes.CDLL, path: str, fstype: str) -> str:
    """Unmount the top mount at `path`; how it went: unmounted, detached or gone."""
    target = os.fsencode(path)
    if fstype.startswith("nfs") and libc.umount2(target, MNT_FORCE) == 0:
        return "unmounted"
    if libc.umount2(target, 0) == 0:
        return "unmounted"
    failure = ctypes.get_errno()
    if failure in (errno.EINVAL, errno.ENOENT):  # no longer a mount point (a parent was detached)
        return "gone"
    if libc.umount2(target, MNT_DETACH) == 0:
        return "detached"
    raise OSError(ctypes.get_errno(), f"cannot unmount {path}: {os.strerror(ctypes.get_errno())}")


def unmount(directories: list[str], namespaces: str) -> tuple[list[str], list[str], list[str]]:
    """Unmount the cluster's mounts; (unmounted, detached, namespaces left in use)."""
    libc = ctypes.CDLL(None, use_errno=True)
    unmounted: list[str] = []
    detached: list[str] = []
    kept: set[str] = set()
    for _ in range(ROUNDS):
        used = _namespaces_in_use() if namespaces else set()
        chosen = []
        for _source, point, fstype in mounts():
            if _below(point, directories):
                chosen.append((point, fstype))
            elif namespaces and point.startswith(namespaces):
                if _in_use(point, used):
                    kept.add(point)
                else:
                    chosen.append((point, fstype))
        if not chosen:
            break
        # Reverse order of the paths puts a mount before every mount above it (a/b/c before a/b).
        for point, fstype in sorted(set(chosen), reverse=True):
            outcome = _umount(libc, point, fstype)
            if outcome == "unmounted":
                unmounted.append(point)
            elif outcome == "detached":
                detached.append(point)
    else:
        raise OSError(errno.EBUSY, f"mounts still there after {ROUNDS} rounds: {sorted(set(chosen))}")
    for point in unmounted + detached:
        # A namespace file is an empty file on /run once nothing is mounted on it.
        pinned = namespaces and point.startswith(namespaces)
        if pinned and os.path.isfile(point) and not os.path.ismount(point):
            os.unlink(point)
    return unmounted, detached, sorted(kept)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "path", "required": True},
            "namespaces": {"type": "str", "default": ""},
        },
        supports_check_mode=False,
    )
    try:
        unmounted, detached, kept = unmount(module.params["directories"], module.params["namespaces"])
    except OSError as err:
        module.fail_json(msg=str(err))
    module.exit_json(
        changed=bool(unmounted or detached), unmounted=unmounted, detached=detached, namespaces_in_use=kept
    )


if __name__ == "__main__":
    main()
