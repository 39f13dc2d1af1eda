"""What the API server and the scheduler do to a pod, restated from kubernetes/kubernetes.

- Defaulting: on a pod with `hostNetwork: true`, every container and init container port that has
  no hostPort gets hostPort = containerPort (pkg/apis/core/v1/defaults.go, `SetDefaults_Pod` calls
  `defaultHostNetworkPorts`). The StatefulSet and Job controllers create Pods, so every rank's pod
  carries the defaulted ports whatever its template says.
- Scheduling, NodePorts filter: a pod fits a node only if none of its (hostIP, protocol,
  hostPort) triples, hostPort > 0, conflicts with one already used there; an empty hostIP is
  0.0.0.0 and an empty protocol TCP, and 0.0.0.0 conflicts with every address
  (pkg/scheduler/framework/plugins/nodeports/node_ports.go `fitsPorts`;
  pkg/scheduler/framework/types.go `HostPortInfo.CheckConflict`).
- Scheduling, TaintToleration filter: a pod fits a node only if it tolerates each of the node's
  NoSchedule and NoExecute taints; a toleration matches a taint when its effect is empty or equal,
  its key is empty or equal, and its operator is Exists, or Equal (or empty) with an equal value
  (k8s.io/api core/v1 toleration.go `ToleratesTaint`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

ANY_ADDRESS = "0.0.0.0"


def admitted_pod(template_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec the API server stores for a pod made from `template_spec` (host ports defaulted)."""
    spec = copy.deepcopy(dict(template_spec))
    if spec.get("hostNetwork"):
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            for port in container.get("ports", []):
                if not port.get("hostPort"):
                    port["hostPort"] = port["containerPort"]
    return spec


def host_ports(spec: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """The (hostIP, protocol, hostPort) triples the NodePorts filter counts for a pod (containers only)."""
    return [
        (p.get("hostIP") or ANY_ADDRESS, p.get("protocol") or "TCP", int(p["hostPort"]))
        for c in spec.get("containers", [])
        for p in c.get("ports", [])
        if p.get("hostPort", 0) > 0
    ]


def port_conflicts(used: Iterable[tuple[str, str, int]], wanted: Iterable[tuple[str, str, int]]) -> list[str]:
    """The wanted ports a node that already uses `used` refuses."""
    taken = list(used)
    conflicts = []
    for ip, protocol, port in wanted:
        clash = any((protocol, port) == (p, n) and (ANY_ADDRESS in (ip, i) or ip == i) for i, p, n in taken)
        if clash:
            conflicts.append(f"{protocol}/{port} on {ip}")
    return conflicts


def tolerates(tolerations: Iterable[Mapping[str, str]], taint: Mapping[str, str]) -> bool:
    """Whether any of `tolerations` tolerates `taint` ({key, value, effect})."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and t.get("value", "") == taint.get("value", "")):
            return True
    return False
