"""What a test machine needs so that a kubelet and containerd run pods inside it.

Each entry was found by running a kubelet in a machine and removing it alone to see the failure
(docs/kubelets.md, "What it needed"). They are settings of the test machines only; a user's node
runs on its own kernel, where none applies.
"""

from __future__ import annotations

from pathlib import Path

# systemd-nspawn options:
# - /dev/kmsg: the kubelet's OOM watcher opens it (`open /dev/kmsg: no such file or directory`);
#   reading it needs CAP_SYSLOG where the host sets kernel.dmesg_restrict=1.
# - @keyring: runc joins a session keyring for every container (`unable to join session
#   keyring: ... operation not permitted` under nspawn's default seccomp filter).
NSPAWN_OPTIONS = ["--bind-ro=/dev/kmsg", "--capability=CAP_SYSLOG", "--system-call-filter=@keyring"]

# The six kernel settings the kubelet checks with protectKernelDefaults (kubelet's
# pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables; values from pkg/util/sysctl) as it
# must read them. /proc/sys is read-only in the machine, so each entry is covered with a read-only
# file holding the value; the host keeps its own. The last three are the kernel's defaults, masked
# all the same so a host tuned otherwise cannot stop the kubelet.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "vm/panic_on_oom": "0",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

UNIT_NAME = "testbed-kubelet-host.service"
SCRIPT = "/usr/local/sbin/testbed-kubelet-host"
MASKS = "/run/testbed-kernel-defaults"


def _script() -> str:
    masks = "".join(
        f"printf '%s\\n' {value} > {MASKS}/{key.replace('/', '.')}\n"
        f"mount --bind -o ro {MASKS}/{key.replace('/', '.')} /proc/sys/{key}\n"
        for key, value in KERNEL_DEFAULTS.items()
    )
    # nspawn mounts the cgroup controllers read-only; the kubelet makes /kubepods in each.
    return (
        "#!/bin/sh\nset -eu\n"
        'for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c"; done\n'
        f"mkdir -p {MASKS}\n{masks}"
    )


def _unit() -> str:
    return (
        "[Unit]\n"
        "Description=What a kubelet needs in this test machine (docs/kubelets.md)\n"
        "DefaultDependencies=no\n"
        "After=local-fs.target\n"
        "Before=containerd.service kubelet.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        f"ExecStart={SCRIPT}\n\n"
        "[Install]\nWantedBy=sysinit.target\n"
    )


def prepare(root: Path) -> None:
    """Write and enable the unit that readies the machine at every boot, before containerd."""
    script = root / SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_script())
    script.chmod(0o755)
    (root / "etc/systemd/system" / UNIT_NAME).write_text(_unit())
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / UNIT_NAME).symlink_to(f"/etc/systemd/system/{UNIT_NAME}")
