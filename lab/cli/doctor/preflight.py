"""The checks `labctl doctor` runs on each node before a `pulumi up`, over one SSH round trip."""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass

from lab.bootstrap.inventory import NODE_STATE_DIR
from lab.cli.common.console import Finding, Level
from lab.cli.doctor.gpu_fit import gpu_problems
from lab.config import EPHEMERAL_PORTS, LabConfig, Node, cluster_ports
from lab.config.facts import (
    BUILD_PROFILE,
    MAX_COMPUTE_CAPABILITY,
    MIN_COMPUTE_CAPABILITY,
    MIN_DRIVER_MAJOR,
    USERNS_SYSCTL,
)
from lab.config.monitoring import host_ports
from lab.paths import ANSIBLE_DIR
from lab.remote.ssh import Remote, SshError
from trainer.inputs import is_digits

SUPPORTED_OS = {("ubuntu", "22.04"), ("ubuntu", "24.04"), ("debian", "12")}
MAX_CLOCK_SKEW_S = 1.0
# The script site.yml runs before it changes anything: it names each Kubernetes distribution or
# container runtime on the node and whether the lab installed it.
EXISTING_CLUSTER_SCRIPT = ANSIBLE_DIR / "roles" / "lab_state" / "files" / "existing_cluster.sh"
# The script the prereq role asks before it opens the lab's ports: ufw, firewalld, other or none.
ACTIVE_FIREWALL_SCRIPT = ANSIBLE_DIR / "roles" / "prereq" / "files" / "active_firewall.sh"

# Everything doctor needs from a node in one round trip, as key=value lines; the script is run
# with $trainer_uid set.
FACTS_SCRIPT = r"""
. /etc/os-release
echo "os_id=$ID"
echo "os_version=$VERSION_ID"
echo "os_name=$PRETTY_NAME"
if sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi
echo "ntp=$(timedatectl show -p NTPSynchronized --value 2>/dev/null || echo unknown)"
if systemd-detect-virt --container >/dev/null 2>&1; then echo container=yes; fi
if command -v nvidia-smi >/dev/null; then
  echo "gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
  query=driver_version,compute_cap
  echo "gpu_info=$(nvidia-smi --query-gpu=$query --format=csv,noheader 2>/dev/null | tr '\n' ';')"
else
  echo "gpus=none"
fi
echo "apparmor=$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null || echo absent)"
userns=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
echo "userns_restricted=$(cat $userns 2>/dev/null || echo absent)"
if command -v ss >/dev/null; then
  # As root where sudo allows: ss names the process of a socket only to its owner and to root.
  if sudo -n true 2>/dev/null; then ss="sudo -n ss"; else ss="ss"; fi
  $ss -Hltnp | sed 's/^/listen_tcp=/'
  $ss -Hlunp | sed 's/^/listen_udp=/'
else
  echo "ports=unknown"
fi
echo "machine_id=$(cat /etc/machine-id 2>/dev/null)"
echo "interfaces=$(ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
echo "uid_owner=$(getent passwd "$trainer_uid" | cut -d: -f1)"
echo "clock=$(date +%s.%N)"
"""


def needed_ports(cfg: LabConfig, node: Node) -> dict[tuple[int, str], str]:
    """(port, protocol) -> purpose, for the ports the lab will listen on at this node: the cluster's,
    the rendezvous on the host network, and the monitoring stack's (lab.config.monitoring)."""
    ports = cluster_ports(cfg, node)
    if cfg.trainer.host_network:
        ports[(cfg.trainer.port, "tcp")] = "DDP rendezvous (hostNetwork)"
    return ports | host_ports(cfg, node)


def _facts(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass(frozen=True)
class Listening:
    """A listening socket of a node, as `ss -Hl{t,u}np` prints it."""

    port: int
    protocol: str
    process: str  # "name (pid N)", or "" where ss did not say (another user's, without sudo)


# ss's process column: users:(("name",pid=N,fd=M),...); a name is the process's comm, which its
# owner chooses: only printable characters of it are shown, at most 15 (the kernel's TASK_COMM_LEN).
_SS_PROCESS = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=([0-9]+)')


def listening_sockets(text: str) -> list[Listening]:
    """Every `listen_tcp=`/`listen_udp=` line of the facts script's output."""
    found = []
    for line in text.splitlines():
        key, _, row = line.partition("=")
        if key not in {"listen_tcp", "listen_udp"}:
            continue
        fields = row.split(None, 5)
        if len(fields) < 4:
            continue
        port = fields[3].rpartition(":")[2]
        if not is_digits(port):
            continue
        owner = _SS_PROCESS.search(fields[5]) if len(fields) > 5 else None
        process = ""
        if owner:
            name = "".join(c for c in owner.group(1) if c.isprintable() and c.isascii())[:15]
            process = f"{name} (pid {owner.group(2)})"
        found.append(Listening(int(port), key.removeprefix("listen_"), process))
    return found


def node_findings(cfg: LabConfig, stack: str, node: Node, machines: dict[str, str]) -> list[Finding]:
    """SSH, sudo, OS, GPU driver, time sync, free ports, interface and trainer uid on one node,
    and whether it is a machine already checked: `machines` maps the machine ids of the nodes
    checked so far to their names, and gets this node's."""
    remote = Remote.of(stack, cfg.ssh, node)
    try:
        done = remote.run(f"trainer_uid={cfg.trainer.uid}\n{FACTS_SCRIPT}", timeout=60)
    except SshError as err:
        return [
            Finding(node.name, "SSH", Level.ERROR, str(err), "fix SSH access first; the other checks need it")
        ]
    facts = _facts(done.stdout)
    # The node reads its clock last, milliseconds before its answer arrives; the SSH handshake,
    # which takes far longer, is over by then.
    clock_offset = float(facts.get("clock", "nan")) - time.time()
    return [
        Finding(node.name, "SSH", Level.OK, f"logged in as {remote.target}"),
        _sudo(node, facts),
        _os(node, facts),
        *gpu_findings(node, facts),
        userns_finding(node, facts),
        _time_sync(node, facts, clock_offset),
        ports_finding(node, facts, listening_sockets(done.stdout), needed_ports(cfg, node)),
        *interface_findings(node, facts),
        uid_finding(node, facts, cfg.trainer.uid),
        *same_machine_findings(node, facts, machines),
        existing_cluster_finding(node, *_existing_cluster(remote, cfg)),
        *([firewall_finding(cfg, node, *_active_firewall(remote))] if cfg.trainer.host_network else []),
    ]


def interface_findings(node: Node, facts: dict[str, str]) -> list[Finding]:
    """The node's configured interface exists there (flannel and NCCL would otherwise fail late)."""
    if node.interface is None:
        return []
    present = facts.get("interfaces", "").split()
    if node.interface in present:
        return [Finding(node.name, "interface", Level.OK, f"{node.interface} exists")]
    return [
        Finding(
            node.name,
            "interface",
            Level.ERROR,
            f"{node.interface} does not exist here (it has {', '.join(present) or 'none'})",
            f"set interface for {node.name} to one of those, or leave it out to use the route's",
        )
    ]


def uid_finding(node: Node, facts: dict[str, str], uid: int) -> Finding:
    """trainer.uid names no account of the node: the export's files would be that account's."""
    owner = facts.get("uid_owner", "")
    if not owner:
        return Finding(node.name, "trainer uid", Level.OK, f"{uid} is no account here")
    return Finding(
        node.name,
        "trainer uid",
        Level.ERROR,
        f"trainer.uid {uid} is the account {owner!r} here: the export and its files would be {owner}'s",
        "set trainer.uid to a uid no account of the nodes has (the default 10001 usually is)",
    )


def same_machine_findings(node: Node, facts: dict[str, str], machines: dict[str, str]) -> list[Finding]:
    """An error when this node is a machine already checked under another node's address."""
    machine = facts.get("machine_id", "")
    if not machine:
        return []
    other = machines.setdefault(machine, node.name)
    if other == node.name:
        return []
    return [
        Finding(
            node.name,
            "machine",
            Level.ERROR,
            f"the same machine as {other} (/etc/machine-id {machine}): two nodes on one machine are one node",
            f"give {node.name} the address of another machine, or remove it from the stack",
        )
    ]


def _existing_cluster(remote: Remote, cfg: LabConfig) -> tuple[int, str]:
    """The existing-cluster script's exit code and output on the node, run as root (the lab's
    marks are readable by root only)."""
    args = shlex.join([NODE_STATE_DIR, cfg.distribution.value])
    done = remote.run(f"sudo -n sh -s -- {args}", stdin=EXISTING_CLUSTER_SCRIPT.read_text(), timeout=60)
    return done.returncode, done.stdout


def _active_firewall(remote: Remote) -> tuple[int, str]:
    """The prereq role's firewall probe on the node, run as root (ufw and nft answer root only)."""
    done = remote.run("sudo -n sh -s", stdin=ACTIVE_FIREWALL_SCRIPT.read_text(), timeout=60)
    return done.returncode, done.stdout.strip()


def firewall_finding(cfg: LabConfig, node: Node, returncode: int, active: str) -> Finding:
    """With ranks on the host network, whether a firewall stands between the LAN and their ports.

    There the rendezvous port and the collectives' ports listen on the node's own address; the
    NetworkPolicies that guard them on the pod network do not apply. torchrun's c10d rendezvous
    keeps its state in that store as a pickle and every agent unpickles it
    (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, `_BackendRendezvousStateHolder.sync`),
    so whoever can write to the store runs code in every rank's pod.
    """
    check = "firewall"
    low, high = EPHEMERAL_PORTS
    ports = f"{cfg.trainer.port}/tcp and {low}-{high}/tcp"
    peers = ", ".join(n.address for n in cfg.nodes if n.name != node.name) or "the other nodes"
    if returncode != 0:
        return Finding(
            node.name,
            check,
            Level.WARNING,
            "cannot read the firewall without sudo",
            "fix sudo (see above), then run doctor again",
        )
    if active in {"ufw", "firewalld"}:
        detail = f"{active} active: `pulumi up` opens the ranks' ports ({ports}) to {peers} only"
        return Finding(node.name, check, Level.OK, detail)
    if active == "other":
        return Finding(
            node.name,
            check,
            Level.WARNING,
            f"input is filtered by nftables or iptables rules that are neither ufw nor firewalld;"
            f" `pulumi up` opens nothing there, and the ranks need {ports}",
            f"admit {ports} from {peers} only, or use ufw, which `pulumi up` opens for them",
        )
    return Finding(
        node.name,
        check,
        Level.ERROR,
        f"no host firewall: trainer.hostNetwork opens {ports} on {node.address} to every host that"
        " reaches it (torchrun unpickles what its rendezvous store holds)",
        f"`sudo ufw allow OpenSSH && sudo ufw enable` (`pulumi up` then admits {peers} only),"
        " or trainer.hostNetwork: false",
    )


def existing_cluster_finding(node: Node, returncode: int, output: str) -> Finding:
    """An error for each Kubernetes distribution or container runtime the lab would take over."""
    check = "existing cluster"
    if returncode != 0:
        return Finding(
            node.name,
            check,
            Level.WARNING,
            "cannot look for an existing cluster without sudo",
            "fix sudo (see above), then run doctor again",
        )
    lines = [line.split("|") for line in output.splitlines() if line.strip()]
    foreign = [fields for fields in lines if len(fields) == 4 and fields[1] == "foreign"]
    if foreign:
        return Finding(
            node.name,
            check,
            Level.ERROR,
            "; ".join(f"{name} not installed by this lab ({evidence})" for name, _, evidence, _ in foreign)
            + ": site.yml refuses to take it over",
            "; ".join(fix for *_, fix in foreign),
        )
    ours = [fields[0] for fields in lines if fields[1:] == ["ours"]]
    return Finding(
        node.name,
        check,
        Level.OK,
        f"{', '.join(ours)} installed by this lab" if ours else "no Kubernetes or containerd to take over",
    )


def _sudo(node: Node, facts: dict[str, str]) -> Finding:
    if facts.get("sudo") == "yes":
        return Finding(node.name, "sudo", Level.OK, "passwordless")
    return Finding(
        node.name,
        "sudo",
        Level.ERROR,
        f"{node.user} cannot sudo without a password",
        f"add '{node.user} ALL=(ALL) NOPASSWD: ALL' to /etc/sudoers.d/{node.user} on {node.address}",
    )


def _os(node: Node, facts: dict[str, str]) -> Finding:
    name = facts.get("os_name", "unknown")
    if (facts.get("os_id"), facts.get("os_version")) in SUPPORTED_OS:
        return Finding(node.name, "OS", Level.OK, name)
    return Finding(
        node.name,
        "OS",
        Level.ERROR,
        f"{name} is not supported",
        "use Ubuntu 22.04, Ubuntu 24.04 or Debian 12",
    )


def gpu_findings(node: Node, facts: dict[str, str]) -> list[Finding]:
    if node.gpus == 0:
        return []
    seen = facts.get("gpus", "none")
    if seen == "none":
        return [
            Finding(
                node.name,
                "GPU driver",
                Level.ERROR,
                f"the stack says {node.gpus} GPU(s) but nvidia-smi is missing",
                "install the NVIDIA driver (`sudo ubuntu-drivers install` on Ubuntu) and reboot",
            )
        ]
    if int(seen or 0) < node.gpus:
        return [
            Finding(
                node.name,
                "GPU driver",
                Level.ERROR,
                f"the stack says {node.gpus} GPU(s), nvidia-smi lists {seen}",
                f"set gpus: {seen} for {node.name} in the stack file, or fix the driver (`nvidia-smi`)",
            )
        ]
    gpus = [entry.split(",") for entry in facts.get("gpu_info", "").split(";") if entry.strip()]
    driver = gpus[0][0].strip() if gpus else "?"
    problems = gpu_problems(driver, [gpu[-1] for gpu in gpus])
    if problems:
        return [
            Finding(
                node.name,
                "GPU driver",
                Level.ERROR,
                "; ".join(problems),
                f"install an NVIDIA driver of the {MIN_DRIVER_MAJOR} series or newer and reboot"
                f" (Ubuntu: nvidia-driver-{MIN_DRIVER_MAJOR}-server); a GPU outside compute capability"
                f" {MIN_COMPUTE_CAPABILITY} to {MAX_COMPUTE_CAPABILITY} cannot run the image: set gpus: 0",
            )
        ]
    return [Finding(node.name, "GPU driver", Level.OK, f"{seen} GPU(s), driver {driver}")]


def userns_finding(node: Node, facts: dict[str, str]) -> Finding:
    """Whether the image build's rootless BuildKit can create user namespaces on this node."""
    restricted = facts.get("userns_restricted", "absent")
    if facts.get("apparmor") != "Y":
        return Finding(
            node.name,
            "user namespaces",
            Level.WARNING,
            f"AppArmor is off: kubelet refuses the image build pod here (it names profile {BUILD_PROFILE})",
            "enable AppArmor (on by default on Debian and Ubuntu)",
        )
    if restricted == "1":
        detail = (
            f"{USERNS_SYSCTL}=1 (Ubuntu 24.04): only profiles with `userns` may create them; the image build"
            f" runs under {BUILD_PROFILE}, which `pulumi up` loads"
        )
        return Finding(node.name, "user namespaces", Level.OK, detail)
    return Finding(node.name, "user namespaces", Level.OK, f"{USERNS_SYSCTL}: {restricted}, not restricted")


def _time_sync(node: Node, facts: dict[str, str], offset: float) -> Finding:
    skew = f"clock {offset:+.2f} s from the operator's"
    if abs(offset) > MAX_CLOCK_SKEW_S:
        return Finding(
            node.name,
            "time sync",
            Level.ERROR,
            skew,
            "enable NTP: `sudo timedatectl set-ntp true` (or chrony)",
        )
    if facts.get("container") == "yes":
        # As the validation suite's time check (lab/validation/suite/test_host.py): a container has no
        # clock of its own to synchronise.
        return Finding(node.name, "time sync", Level.OK, f"a container, on its host's clock; {skew}")
    if facts.get("ntp") != "yes":
        return Finding(
            node.name,
            "time sync",
            Level.WARNING,
            f"{skew}; NTP synchronisation {facts.get('ntp') or 'unknown'}",
            "enable NTP so certificates and logs agree: `sudo timedatectl set-ntp true` (or chrony)",
        )
    return Finding(node.name, "time sync", Level.OK, f"NTP synchronised, {skew}")


def ports_finding(
    node: Node, facts: dict[str, str], listening: list[Listening], needed: dict[tuple[int, str], str]
) -> Finding:
    """The ports the lab will take on the node that something already listens on, each with the
    process that holds it (named where ss could tell: run as root, or the node user's own)."""
    if facts.get("ports") == "unknown":
        return Finding(
            node.name,
            "ports",
            Level.WARNING,
            "cannot list listening ports: `ss` is missing",
            "install iproute2",
        )
    holders: dict[tuple[int, str], set[str]] = {}
    for socket in listening:
        holders.setdefault((socket.port, socket.protocol), set()).add(socket.process)
    busy = []
    for (port, proto), what in sorted(needed.items()):
        if (port, proto) not in holders:
            continue
        names = sorted(h for h in holders[(port, proto)] if h)
        held = f" held by {', '.join(names)}" if names else ""
        busy.append(f"{port}/{proto} ({what}){held}")
    if busy:
        return Finding(
            node.name,
            "ports",
            Level.WARNING,
            f"already in use: {'; '.join(busy)}",
            "stop what listens there (`sudo ss -ltnup`), or set the stack key named beside the port to a"
            " free one; unless it is this lab already running",
        )
    return Finding(node.name, "ports", Level.OK, f"{len(needed)} needed ports free")
