#!/usr/bin/python3
"""Kills what is left of a node's pods once its Kubernetes service is stopped.

Two kinds of process outlive `systemctl stop k3s` (the unit has KillMode=process) or `kubeadm
reset` (which removes containers only through a CRI that still answers):

- containerd's shims for Kubernetes' containers, with every process below them, as k3s's own
  k3s-killall.sh does (k3s-io/k3s install.sh, create_killall: getshims, killtree). A shim is a
  process started from a `containerd-shim*` program for containerd's CRI namespace, `k8s.io`
  (containerd's CRI plugin keeps every Kubernetes container there; Docker's are in `moby`).
- whatever runs in the kubelet's pod cgroups: with the systemd cgroup driver (k3s picks it when
  systemd started it, pkg/agent/containerd/config_linux.go; kubeadm's default since 1.22) pods
  live in `kubepods.slice`, outside the service's own cgroup, so killing the service never reaches
  them; with the cgroupfs driver they live in `kubepods`.

Processes are killed with SIGKILL, as k3s-killall.sh does, until none is left (a dying process
may have forked). Then the cgroupfs driver's `kubepods` trees go, deepest first: the kubelet made
them itself and nothing removes them once it is stopped (kubeadm reset leaves them; the systemd
driver's `kubepods.slice` is systemd's, which stops it once empty).
"""

from __future__ import annotations

import errno
import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule

CGROUP_ROOT = "/sys/fs/cgroup"
# The top-level pod cgroups of the systemd and cgroupfs drivers, in any hierarchy.
POD_CGROUPS = ("kubepods.slice", "kubepods")
CGROUPFS_PODS = "kubepods"
CRI_NAMESPACE = "k8s.io"
SECONDS = 30


def _command_line(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as found:
            return [a.decode(errors="replace") for a in found.read().split(b"\0") if a]
    except OSError:
        return []


def _stat(pid: str) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, parent, ..."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as found:
            return found.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent(pid: str) -> str:
    fields = _stat(pid)
    return fields[1] if len(fields) > 1 else ""


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed process waiting for its parent to collect it)."""
    fields = _stat(str(pid))
    return bool(fields) and fields[0] != "Z"


def _is_shim(args: list[str]) -> bool:
    """A containerd shim serving the CRI namespace: its program (argv[0], or the script an
    interpreter runs) is a containerd-shim*, and it was started with `-namespace k8s.io`."""
    programs = [os.path.basename(a) for a in args[:2]]
    serves = any(args[i : i + 2] == ["-namespace", CRI_NAMESPACE] for i in range(len(args)))
    return serves and any(p.startswith("containerd-shim") for p in programs)


def _processes() -> list[str]:
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and pid != str(os.getpid())]


def shim_trees() -> set[str]:
    """Every shim of the CRI namespace and every process below it."""
    children: dict[str, list[str]] = {}
    found = []
    for pid in _processes():
        children.setdefault(_parent(pid), []).append(pid)
        if _is_shim(_command_line(pid)):
            found.append(pid)
    tree: set[str] = set()
    while found:
        pid = found.pop()
        if pid not in tree:
            tree.add(pid)
            found += children.get(pid, [])
    return tree


def pod_cgroups(root: str = CGROUP_ROOT) -> list[str]:
    """The pod cgroup directories of every hierarchy mounted under `root`."""
    tops = [root] + [os.path.join(root, d) for d in sorted(os.listdir(root))]
    found = [os.path.join(top, name) for top in tops for name in POD_CGROUPS]
    return [path for path in found if os.path.isdir(path)]


def in_pod_cgroups(root: str = CGROUP_ROOT) -> set[str]:
    """Every process in a pod cgroup or below it."""
    found: set[str] = set()
    for top in pod_cgroups(root):
        for directory, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(directory, "cgroup.procs"), encoding="utf-8") as procs:
                        found.update(line.strip() for line in procs if line.strip())
                except OSError:  # removed meanwhile
                    continue
    return found


def kill_pods(seconds: float = SECONDS) -> list[int]:
    """SIGKILL the shims' trees and the pods' processes until none is left; the ids killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + seconds
    while True:
        alive = {int(pid) for pid in shim_trees() | in_pod_cgroups()} - {os.getpid()}
        alive = {pid for pid in alive if _running(pid)}
        if not alive:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes of the pods still alive after {seconds:.0f} s: {sorted(alive)}")
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def remove_cgroupfs_pods(root: str = CGROUP_ROOT, seconds: float = SECONDS) -> list[str]:
    """Delete the cgroupfs driver's pod cgroups of every hierarchy, deepest first; those removed.
    A cgroup without processes or children is removed by rmdir, its control files with it; one
    whose last task is still exiting answers EBUSY for a moment, so each is tried until the
    deadline. Hierarchies mounted together (cpu,cpuacct behind two links) are one tree."""
    tops = {os.path.realpath(top): top for top in pod_cgroups(root) if os.path.basename(top) == CGROUPFS_PODS}
    deadline = time.monotonic() + seconds
    for real in tops:
        for directory, _dirs, _files in os.walk(real, topdown=False):
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    return sorted(tops.values())


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=False)
    try:
        killed = kill_pods()
        removed = remove_cgroupfs_pods()
    except TimeoutError as err:
        module.fail_json(msg=str(err))
    except OSError as err:
        module.fail_json(msg=f"a pod cgroup could not be removed: {err}")
    module.exit_json(changed=bool(killed or removed), killed=killed, removed=removed)


if __name__ == "__main__":
    main()
