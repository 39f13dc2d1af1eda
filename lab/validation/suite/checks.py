"""What each validation check looks for, as pure functions over what the hosts report.

The test modules fetch text or JSON from the hosts and ask these functions what is wrong; each
returns a list of problems (empty when the check holds), so a failure says exactly what is off
and the logic can be shown failing on broken input without a lab.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from lab.cluster.labels import label_selector
from lab.config.facts import DNS_POD_LABELS, SYSTEM_NAMESPACE
from lab.config.world import World
from lab.paths import ANSIBLE_DIR

# The nfs_server role's mark of an export the lab made, and the lab's folders in it.
_NFS_DEFAULTS = yaml.safe_load((ANSIBLE_DIR / "roles" / "nfs_server" / "defaults" / "main.yml").read_text())
EXPORT_MARK: str = _NFS_DEFAULTS["nfs_server_mark"]
EXPORT_FOLDERS: list[str] = _NFS_DEFAULTS["nfs_server_subdirs"]


# Why the GPU checks do not apply: said alike by the suite and through a cluster's API.
NO_GPUS = "no node of this lab has a GPU configured"
PROVIDED_DEVICE_PLUGIN = "the cluster provides the device plugin (provides.devicePlugin)"
DEVICE_PLUGIN = "NVIDIA device plugin"


def require(problems: list[str]) -> None:
    """Fail the calling check with every problem spelled out (pytest would shorten a list)."""
    if problems:
        raise AssertionError("; ".join(problems))


# Kernel settings Kubernetes networking needs on every node, and the value each must have.
SYSCTLS = {"net.ipv4.ip_forward": "1"}
BRIDGE_SYSCTLS = {"net.bridge.bridge-nf-call-iptables": "1", "net.bridge.bridge-nf-call-ip6tables": "1"}


def export_clients(exports: str, path: str) -> list[tuple[str, str]] | None:
    """(client, options) pairs of `path` in exports(5) text; None when the path is not exported."""
    text = exports.replace("\\\n", " ")
    found = None
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        first, *clients = shlex.split(line)
        if first.rstrip("/") != path.rstrip("/"):
            continue
        found = found or []
        for client in clients:
            host, _, options = client.partition("(")
            found.append((host, options.rstrip(")")))
    return found


def export_problems(exports: str, path: str, allowed: Iterable[str]) -> list[str]:
    """Problems with the export of `path`: missing, or open to anything outside `allowed` CIDRs."""
    clients = export_clients(exports, path)
    if clients is None:
        return [f"{path} is not exported"]
    if not clients:
        return [f"{path} is exported to every host; it must name the lab's networks"]
    networks = [ipaddress.ip_network(n) for n in allowed]
    problems = []
    for client, _ in clients:
        try:
            net = ipaddress.ip_network(client or "*", strict=False)
        except ValueError:
            problems.append(f"{path} is exported to {client or '*'!r}, not an address or CIDR of the lab")
            continue
        if not any(net.version == n.version and net.subnet_of(n) for n in networks):  # type: ignore[arg-type]
            problems.append(f"{path} is exported to {client}, outside {', '.join(map(str, networks))}")
    return problems


def k3s_mirror_problems(registries_yaml: str, endpoint: str) -> list[str]:
    """Problems with k3s's registries.yaml: `endpoint` must be mirrored to itself over plain HTTP."""
    try:
        doc = yaml.safe_load(registries_yaml) or {}
    except yaml.YAMLError as err:
        return [f"registries.yaml is not valid YAML: {err}"]
    mirror = (doc.get("mirrors") or {}).get(endpoint) if isinstance(doc, dict) else None
    if not isinstance(mirror, dict):
        return [f"registries.yaml has no mirror for {endpoint}"]
    if f"http://{endpoint}" not in (mirror.get("endpoint") or []):
        return [f"the mirror for {endpoint} does not list http://{endpoint} as an endpoint"]
    return []


def containerd_hosts_problems(hosts_toml: str, endpoint: str) -> list[str]:
    """Problems with containerd's certs.d/<endpoint>/hosts.toml (kubeadm nodes)."""
    if f'[host."http://{endpoint}"]' not in hosts_toml:
        return [f'hosts.toml has no [host."http://{endpoint}"] section']
    return []


def dev_char_problems(devices: str, links: str) -> list[str]:
    """The NVIDIA device nodes without their /dev/char/MAJOR:MINOR link, which runc needs to keep a
    container's GPUs across `systemctl daemon-reload` (the nvidia role makes them).

    `devices`: `stat -c '%n %t %T'` of the nodes (name, major and minor in hex); `links`: the names
    in /dev/char, one a line."""
    present = set(links.split())
    problems = []
    for line in devices.splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue
        name, major, minor = fields
        link = f"{int(major, 16)}:{int(minor, 16)}"
        if link not in present:
            problems.append(f"{name} has no /dev/char/{link} link")
    return problems


def sysctl_config(text: str) -> dict[str, str]:
    """Settings from sysctl.conf(5) text in the order `sysctl --system` reads them (last wins)."""
    values = {}
    for line in text.splitlines():
        line = line.strip().lstrip("-")
        if line and not line.startswith(("#", ";")) and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip().replace("/", ".")] = value.strip()
    return values


def sysctl_problems(values: Mapping[str, str | None], expected: Mapping[str, str]) -> list[str]:
    """Settings whose value differs from `expected` (None: the kernel does not have the setting)."""
    problems = []
    for key, want in expected.items():
        have = values.get(key)
        if have != want:
            problems.append(f"{key} is {have if have is not None else 'absent'}, needs {want}")
    return problems


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return cond.get("status")
    return None


def node_problems(nodes: Mapping[str, Any], expected: Iterable[str]) -> list[str]:
    """Configured nodes that are missing from the cluster or not Ready (from `kubectl get nodes -o json`)."""
    ready = {n["metadata"]["name"]: _condition(n, "Ready") == "True" for n in nodes.get("items", [])}
    problems = []
    for name in expected:
        if name not in ready:
            problems.append(f"node {name} has not joined the cluster")
        elif not ready[name]:
            problems.append(f"node {name} is not Ready")
    return problems


def pod_problems(pods: Mapping[str, Any], expected: int, what: str) -> list[str]:
    """`what` needs `expected` Running and Ready pods (from `kubectl get pods -o json`)."""
    items = pods.get("items", [])
    running = [p["metadata"]["name"] for p in items if _serving(p)]
    if len(running) >= expected:
        return []
    others = [f"{p['metadata']['name']} ({_phase(p)})" for p in items if p["metadata"]["name"] not in running]
    detail = f"; not running: {', '.join(others)}" if others else ""
    return [f"{what}: {len(running)} of {expected} pods running and ready{detail}"]


# Phases a pod never leaves: a Job's finished pod, or an evicted one whose replacement is judged.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def system_pod_problems(pods: Mapping[str, Any]) -> list[str]:
    """The cluster's own pods (from `kubectl get pods -n kube-system -o json`): its DNS runs, and
    every pod that has neither ended nor is being deleted (a rollout's or a drain's old pod; its
    replacement is judged) is Running and Ready: kube-proxy, CoreDNS, the control plane's static
    pods, a CNI's."""
    live = [
        p
        for p in pods.get("items", [])
        if _phase(p) not in TERMINAL_PHASES and not p["metadata"].get("deletionTimestamp")
    ]
    problems = []
    serving = [p for p in live if _serving(p)]
    if not any(DNS_POD_LABELS.items() <= p["metadata"].get("labels", {}).items() for p in serving):
        problems.append(
            f"no cluster DNS: no pod labelled {label_selector(DNS_POD_LABELS)} runs ready in"
            f" {SYSTEM_NAMESPACE}, so no Service name resolves in a pod (the ranks find rank 0 by its name)"
        )
    stuck = [_pod_state(p) for p in live if p not in serving]
    if stuck:
        problems.append(f"{SYSTEM_NAMESPACE} pods not running and ready: {', '.join(stuck)}")
    return problems


def _phase(pod: Mapping[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", "?"))


def _serving(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) == "Running" and _condition(pod, "Ready") == "True"


def _pod_state(pod: Mapping[str, Any]) -> str:
    """`name (Pending)`, or `name (Running, not Ready)`."""
    phase = _phase(pod)
    return f"{pod['metadata']['name']} ({phase}{', not Ready' if phase == 'Running' else ''})"


def training_pod_problems(pods: Mapping[str, Any], world: World) -> list[str]:
    """The training run's pods: one per `world.ranks_per_pod` ranks, each holding that many GPUs."""
    return pod_problems(pods, world.pods, f"training ranks ({world.ranks} in {world.pods} pods)")


def claim_problems(claims: Mapping[str, Any]) -> list[str]:
    """Claims that are not Bound (from `kubectl get pvc -o json`)."""
    items = claims.get("items", [])
    if not items:
        return ["the lab's namespace has no PersistentVolumeClaims"]
    return [
        f"claim {c['metadata']['name']} is {c.get('status', {}).get('phase', 'unknown')}, not Bound"
        for c in items
        if c.get("status", {}).get("phase") != "Bound"
    ]


# Lines the trainer's rank 0 prints only after a collective step of the whole group succeeded.
GROUP_EVIDENCE = re.compile(r"^(epoch +[0-9]+/[0-9]+ |resumed from |done: |run \S+ is complete )", re.M)


def group_problems(logs: str) -> list[str]:
    """Whether the ranks' logs show a step the whole group took together."""
    if GROUP_EVIDENCE.search(logs):
        return []
    return ["no rank has reported a completed epoch: the group has not formed or the first epoch is running"]
