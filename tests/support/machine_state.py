"""What a test machine holds that the lab may touch, as a before/after inventory, and the state its
owner had there before the lab came, planted by the tests.

The machines hold CAP_NET_ADMIN in their own network namespace (lab/testbed/machines.py), so
links and firewall rules are real and listed; /proc/sys is read-only there, so the running
kernel's settings never change (the files in /etc/sysctl.d are compared instead). Processes are
listed with their cgroup, leaving out the SSH session that lists them and systemd's on-demand
D-Bus services (timedated, hostnamed, localed: "activated on request and terminate when idle",
systemd-timedated.service(8)), which a `timedatectl` of the validation suite starts and which
exit 30 s later whatever the lab does. A firewall table with no
rule, no chain of its own and the kernel's accept policies is listed as nothing: iptables-nft
creates a table on first use and cannot delete one, and such a table filters nothing.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from lab import testbed
from lab.bootstrap.inventory import NODE_STATE_DIR

# The test machines' stack file (stacks/Pulumi.testbed.yaml), which the integration tier runs.
STACK = "testbed"
# The stand-in k3s and kubeadm installed on the machines (a script: its docstring says what it does).
STANDIN = Path(__file__).with_name("standin_cluster.py")

# Sections of the inventory: /etc (each file's sha256, links with their targets, directories with
# mode and owner), the CNI directories the cluster shares with other tools, the package
# selections, the packages apt counts as installed on purpose, the kernel settings files and the
# lab's own record.
INVENTORY = (
    r"""
echo '## etc'
find /etc -xdev -type f -exec sha256sum {} + | awk '{print $2, $1}'
find /etc -xdev -type l -printf '%p -> %l\n'
find /etc -xdev -type d -printf '%p/ %m %u\n'
echo '## cni'
find /etc/cni /var/lib/cni /opt/cni -printf '%p\n' 2>/dev/null
echo '## packages'
dpkg --get-selections
echo '## manual'
apt-mark showmanual
echo '## sysctl files'
grep -rH . /etc/sysctl.conf /etc/sysctl.d 2>/dev/null
echo '## mounts'
awk '{print $1, $2, $3}' /proc/self/mounts
echo '## processes'
for p in /proc/[0-9]*; do
  args=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) && [ -n "$args" ] || continue
  group=$(grep -m1 '^0::' "$p/cgroup" 2>/dev/null | cut -d: -f3)
  case "$group" in
    /system.slice/ssh.service | /system.slice/systemd-timedated.service) continue ;;
    /system.slice/systemd-hostnamed.service | /system.slice/systemd-localed.service) continue ;;
  esac
  echo "$group $args"
done
echo '## links'
ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1
echo '## firewall'
for tool in iptables ip6tables; do
  command -v $tool-save >/dev/null || continue
  $tool-save | grep -v '^#' | sed -E 's/ \[[0-9]+:[0-9]+\]$//' | awk -v tool=$tool '
    BEGIN { builtin = "^:(INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING)$" }
    /^\*/ { table = $0; n = 0; used = 0; next }
    /^COMMIT/ { if (used) { print tool, table; for (i = 1; i <= n; i++) print tool, line[i] }; next }
    { line[++n] = $0 }
    /^-A/ || (/^:/ && ($2 != "ACCEPT" || $1 !~ builtin)) { used = 1 }'
done
echo '## cluster paths'
find /var/lib/rancher /var/lib/kubelet /var/lib/containerd /var/log/pods /var/log/containers /run/k3s \
  /run/flannel /run/netns /run/containerd /usr/local/bin /etc/nvidia-container-runtime -xdev 2>/dev/null
find /sys/fs/cgroup -maxdepth 2 -name 'kubepods*' 2>/dev/null
echo '## lab state'
"""
    + f"find {NODE_STATE_DIR} 2>/dev/null\nexit 0\n"
)

# The owner's state: a podman network in the CNI directories and a kernel setting of their own.
OWNER_CNI_CONFIG = "/etc/cni/net.d/87-podman.conflist"
OWNER_CNI_LEASE = "/var/lib/cni/networks/podman/last_reserved_ip.0"
OWNER_SYSCTL = "/etc/sysctl.d/60-owner.conf"
PLANT = f"""
set -e
install -d /etc/cni/net.d /var/lib/cni/networks/podman
echo '{{"cniVersion": "1.0.0", "name": "podman", "plugins": [{{"type": "bridge"}}]}}' > {OWNER_CNI_CONFIG}
echo 10.88.0.2 > {OWNER_CNI_LEASE}
printf 'vm.swappiness = 10\\nnet.ipv4.ip_forward = 0\\n' > {OWNER_SYSCTL}
"""

# An owner who runs podman's CNI networks, so has iptables and the CNI firewall plugin's chains
# before the lab comes (and so a way to list the machine's rules before and after).
OWNERS_RULES = """*filter
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
COMMIT
"""
OWNER_HAS_PODMAN = f"""
set -e
DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >/dev/null
iptables-restore --noflush <<'RULES'
{OWNERS_RULES}RULES
"""
OWNER_DROPS_PODMAN = "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q iptables >/dev/null"

# Files that change with what reset.yml does, with the reason: shadow-utils' backups of the previous
# version, rewritten by every user or group change (removing the users the lab's packages created).
REWRITTEN_BY_RESET = ("/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-")

# A package of the owner's that needs one the lab installed (nfs-common): installed while the lab
# runs, it must keep working after reset, and what it needs with it.
OWNER_PACKAGE = "owner-nfs-tools"
OWNER_PACKAGE_NEEDS = "nfs-common"
INSTALL_OWNER_PACKAGE = f"""
set -e
dir=$(mktemp -d)
mkdir "$dir/DEBIAN"
cat > "$dir/DEBIAN/control" <<CONTROL
Package: {OWNER_PACKAGE}
Version: 1.0
Architecture: all
Maintainer: owner <owner@localhost>
Depends: {OWNER_PACKAGE_NEEDS}
Description: a tool of the owner that mounts NFS
CONTROL
dpkg-deb --build "$dir/DEBIAN/.." "$dir/{OWNER_PACKAGE}.deb" >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$dir/{OWNER_PACKAGE}.deb" >/dev/null
rm -rf "$dir"
"""


@dataclass(frozen=True)
class Inventory:
    """One machine's inventory: section name to its lines."""

    sections: dict[str, frozenset[str]]

    def changes(self, later: Inventory, ignore: tuple[str, ...] = ()) -> list[str]:
        """`-` line gone, `+` line new, per section, for lines not starting with an ignored path."""
        found = []
        for name, lines in self.sections.items():
            after = later.sections.get(name, frozenset())
            found += [f"{name}: - {line}" for line in sorted(lines - after) if not line.startswith(ignore)]
            found += [f"{name}: + {line}" for line in sorted(after - lines) if not line.startswith(ignore)]
        return found


def root_shell(machines: testbed.Testbed, machine: testbed.Machine, script: str) -> str:
    return testbed.ssh(machines, machine, "sudo", "-n", "sh", "-c", shlex.quote(script))


def inventory(machines: testbed.Testbed, machine: testbed.Machine) -> Inventory:
    sections: dict[str, set[str]] = {}
    current = ""
    for line in root_shell(machines, machine, INVENTORY).splitlines():
        if line.startswith("## "):
            current = line[3:]
            sections[current] = set()
        elif line.strip():
            sections[current].add(" ".join(line.split()))
    return Inventory({name: frozenset(lines) for name, lines in sections.items()})
