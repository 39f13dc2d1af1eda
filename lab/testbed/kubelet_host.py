"""What a test machine needs so that a kubelet and containerd run pods inside it.

Each entry was found by running a kubelet in a machine and removing it alone to see the failure
(docs/kubelets.md, "What it needed"). They are settings of the test machines only; a user's node
runs on its own kernel, where none applies.
"""

from __future__ import annotations

from pathlib import Path

from lab.machine_settings import (
    MACHINE_SETTINGS_FILE,
    ContainerdSettings,
    KubeletSettings,
    KubeProxySettings,
    MachineSettings,
    render,
)
from lab.testbed.images import names

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

# What a kubelet needs in one of these machines, each with the failure it removes in
# docs/kubelets.md: the machine's systemd manages only the name=systemd hierarchy (cgroupfs),
# the host's swap is shared, the host's root lacks CAP_SYS_RESOURCE (oomScoreAdj, maxOpenFiles at
# the host's hard limit, containerd's restrict_oom_score_adj), /proc/sys is read-only with the
# kubelet's values masked over it (protectKernelDefaults checks them; kube-proxy may not size the
# conntrack table), the host runs cgroup v1, the images are made here with a pause of the
# project's own (lab/testbed/images), and the pod network is the machines' (pod_network.py).
TESTBED_SETTINGS = MachineSettings(
    cgroup_driver="cgroupfs",
    shared_swap=True,
    own_pod_network=True,
    kubelet=KubeletSettings(
        oom_score_adj=0, max_open_files=20000, protect_kernel_defaults=True, fail_cgroup_v1=False
    ),
    containerd=ContainerdSettings(restrict_oom_score_adj=True, sandbox_image=names.PAUSE_IMAGE),
    kube_proxy=KubeProxySettings(conntrack_max_per_core=0),
)

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
    """Write and enable the unit that readies the machine at every boot, before containerd, and the
    machine's settings file."""
    script = root / SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_script())
    script.chmod(0o755)
    (root / "etc/systemd/system" / UNIT_NAME).write_text(_unit())
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / UNIT_NAME).symlink_to(f"/etc/systemd/system/{UNIT_NAME}")
    write_machine_settings(root)


def write_machine_settings(root: Path) -> Path:
    """The machine's settings file in its tree, root's and readable by all (lab/machine_settings.py)."""
    path = root / MACHINE_SETTINGS_FILE.lstrip("/")
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.write_text(render(TESTBED_SETTINGS))
    path.chmod(0o644)
    return path
