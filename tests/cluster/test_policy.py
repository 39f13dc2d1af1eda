"""Security policy over every stack's declared objects: Pod Security levels, the `restricted` profile,
resources, network policies in both directions, no writable NodePort, images by digest, no stray API token.

The `restricted` rules are the Pod Security Standards' (kubernetes.io/docs/concepts/security/
pod-security-standards/, "Baseline" and "Restricted" tables), restated as checks over the pod
specs the program declares. Each check passes on every stack and is shown failing on a
deliberately weakened copy of a real run. What the admission controller and the CNI then do on a
real cluster is theirs: these checks say the objects ask for nothing the levels forbid.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from lab.cluster.namespace import build_namespace, gpu_namespace
from lab.cluster.pods import GPU_TOLERATION
from lab.cluster.security import PRIVILEGED, PSA_LABEL, RESTRICTED
from lab.config import LabConfig, load_stack
from tests.support.program import (
    WORKLOAD_KINDS,
    ProgramRun,
    Registered,
    broken,
    cluster_stacks,
    containers,
    env_of,
    labels_of,
    name_of,
    pod_labels,
    pod_spec,
    recorded,
)

Check = Callable[[ProgramRun, LabConfig], list[str]]

# Restricted, "Volume Types": the only volume sources a restricted pod may use.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
    "secret",
}  # fmt: skip
# Baseline, "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
# Baseline, "SELinux": the types a pod may set.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# The node label a pod is pinned by (kubernetes.io/docs/reference/labels-annotations-taints/).
HOSTNAME = "kubernetes.io/hostname"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The registry's read-only maintenance mode (lab/cluster/registry.py).
READ_ONLY_VARIABLE = "REGISTRY_STORAGE_MAINTENANCE_READONLY"


def workloads(run: ProgramRun) -> list[Registered]:
    return [r for r in run.kubernetes_objects() if r.kind in WORKLOAD_KINDS]


def namespace_of(resource: Registered) -> str:
    return resource.inputs.get("metadata", {}).get("namespace", "")


def enforced(run: ProgramRun) -> dict[str, str]:
    """Namespace name to the Pod Security level it enforces ('' when it has no label)."""
    return {name_of(ns): labels_of(ns).get(f"{PSA_LABEL}/enforce", "") for ns in run.of_kind("Namespace")}


def _security(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext", {})


def restricted_problems(resource: Registered, allowed: frozenset[str] = frozenset()) -> list[str]:
    """What in `resource`'s pods the restricted profile forbids; `allowed` names controls waived."""
    spec, who = pod_spec(resource), f"{resource.kind} {name_of(resource)}"
    pod = spec.get("securityContext", {})
    every = [*containers(resource), *spec.get("ephemeralContainers", [])]
    problems = []
    if "host namespaces" not in allowed:
        problems += [f"{who} sets {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"{who} mounts a {sorted(kinds)} volume {volume['name']!r}")
    if any(s.get("name") not in SAFE_SYSCTLS for s in pod.get("sysctls", [])):
        problems.append(f"{who} sets an unsafe sysctl")
    annotations = resource.inputs["spec"]["template"].get("metadata", {}).get("annotations", {})
    if any(k.startswith("container.apparmor") and v == "unconfined" for k, v in annotations.items()):
        problems.append(f"{who} runs a container AppArmor-unconfined")
    for c in every:
        ctx, where = _security(c), f"{who}/{c['name']}"
        if ctx.get("privileged") or ctx.get("windowsOptions", {}).get("hostProcess"):
            problems.append(f"{where} is privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where} does not set allowPrivilegeEscalation: false")
        caps = ctx.get("capabilities", {})
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where} must drop ALL capabilities and add none but NET_BIND_SERVICE")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{where} uses a hostPort")
        if ctx.get("procMount", "Default") != "Default":
            problems.append(f"{where} unmasks /proc")
        for level in (pod, ctx):
            se = level.get("seLinuxOptions", {})
            if se.get("type", "") not in SELINUX_TYPES or "user" in se or "role" in se:
                problems.append(f"{where} sets SELinux options the profile forbids")
            if level.get("appArmorProfile", {}).get("type") == "Unconfined":
                problems.append(f"{where} runs AppArmor-unconfined")
        if ctx.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            problems.append(f"{where} may run as root (runAsNonRoot)")
        if ctx.get("runAsUser", pod.get("runAsUser")) == 0:
            problems.append(f"{where} runs as uid 0")
        seccomp = ctx.get("seccompProfile", pod.get("seccompProfile", {})).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{where} has seccomp profile {seccomp}, not RuntimeDefault or Localhost")
    return problems


# The checks.


def check_namespace_levels(run: ProgramRun, lab: LabConfig) -> list[str]:
    levels = enforced(run)
    wanted = {lab.namespace: PRIVILEGED if lab.trainer.host_network else RESTRICTED}
    wanted[build_namespace(lab)] = PRIVILEGED
    if lab.has_gpus:
        wanted[gpu_namespace(lab)] = PRIVILEGED
    problems = [
        f"namespace {ns} enforces {levels.get(ns)!r}, not {level!r}"
        for ns, level in wanted.items()
        if levels.get(ns) != level
    ]
    for workload in workloads(run):
        if namespace_of(workload) not in wanted:
            problems.append(f"{workload.kind} {name_of(workload)} runs in {namespace_of(workload)!r}")
    # A privileged namespace holds only the one component that needs it.
    for ns, level in levels.items():
        components = {labels_of(w)[COMPONENT_LABEL] for w in workloads(run) if namespace_of(w) == ns}
        if level == PRIVILEGED and ns != lab.namespace and len(components) > 1:
            problems.append(f"privileged namespace {ns} holds {sorted(components)}")
    return problems


def check_restricted_pods(run: ProgramRun, lab: LabConfig) -> list[str]:
    levels = enforced(run)
    problems = []
    for workload in workloads(run):
        namespace = namespace_of(workload)
        if levels.get(namespace) == RESTRICTED:
            problems += restricted_problems(workload)
        elif namespace == lab.namespace:
            # Ranks on the host network make the lab's namespace privileged for that alone.
            problems += restricted_problems(workload, frozenset({"host namespaces"}))
    return problems


def check_resources(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    for workload in workloads(run):
        for c in containers(workload):
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(resources.get(kind, {}))
                if missing:
                    problems.append(f"{name_of(workload)}/{c['name']} has no {kind} for {sorted(missing)}")
    return problems


def _selects(policy: Registered, workload: Registered) -> bool:
    if namespace_of(policy) != namespace_of(workload):
        return False
    wanted = policy.inputs["spec"]["podSelector"].get("matchLabels", {})
    return all(pod_labels(workload).get(k) == v for k, v in wanted.items())


def check_network_policies_cover_every_pod(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    policies = run.of_kind("NetworkPolicy")
    for workload in workloads(run):
        for direction in ("Ingress", "Egress"):
            if not any(
                _selects(p, workload) and direction in p.inputs["spec"].get("policyTypes", [])
                for p in policies
            ):
                problems.append(f"no NetworkPolicy limits {direction.lower()} of {name_of(workload)}'s pods")
    return problems


def check_no_nodeport_to_a_writable_service(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    for service in run.of_kind("Service"):
        spec = service.inputs["spec"]
        if spec.get("type") not in {"NodePort", "LoadBalancer"}:
            continue
        selector = spec.get("selector", {})
        backends = [
            w
            for w in workloads(run)
            if namespace_of(w) == namespace_of(service)
            and selector
            and all(pod_labels(w).get(k) == v for k, v in selector.items())
        ]
        for port in spec.get("ports", []):
            target = port.get("targetPort")
            for workload in backends:
                for c in containers(workload):
                    names = {p.get("name") for p in c.get("ports", [])} | {
                        p.get("containerPort") for p in c.get("ports", [])
                    }
                    if target in names and '"enabled": true' not in str(env_of(c).get(READ_ONLY_VARIABLE)):
                        where = f"{name_of(workload)}/{c['name']}"
                        problems.append(
                            f"Service {name_of(service)} puts {where} on a node port, not read-only"
                        )
    return problems


def check_images_by_digest(run: ProgramRun, lab: LabConfig) -> list[str]:
    # Every container, the build's too: the registry speaks plain HTTP, so a tag is whatever the
    # path to it answers, and the build's recording container holds an API token.
    return [
        f"{name_of(w)}/{c['name']} runs {c['image']}, not an image by digest"
        for w in workloads(run)
        for c in containers(w)
        if not DIGEST.search(c["image"])
    ]


def check_builds_beside_the_registry(run: ProgramRun, lab: LabConfig) -> list[str]:
    """The build pod is pinned to the node the registry runs on, so its push never crosses the
    network: both name one node by its hostname label, the only node-level rule either sets."""
    registry = _named(run, "Deployment", "registry")
    where = pod_spec(registry).get("nodeSelector")
    problems = [] if where and set(where) == {HOSTNAME} else ["the registry is not pinned to one node"]
    builds = [w for w in workloads(run) if labels_of(w).get(COMPONENT_LABEL) == "build"]
    for build in builds:
        spec = pod_spec(build)
        if spec.get("nodeSelector") != where or "affinity" in spec:
            problems.append(f"{name_of(build)} may run on another node than the registry ({where})")
    # The stack names that node: a GPU node's taint (on many clusters) must not keep them off it.
    for pinned in [registry, *builds]:
        if GPU_TOLERATION not in pod_spec(pinned).get("tolerations", []):
            problems.append(f"{name_of(pinned)} cannot run on its node when it carries the GPU taint")
    return problems


def check_no_stray_api_token(run: ProgramRun, lab: LabConfig) -> list[str]:
    """A pod mounts a token only for a ServiceAccount that a RoleBinding gives a use (the ranks'
    scale-down); every other pod has automountServiceAccountToken: false."""
    bound = {
        subject["name"]
        for binding in run.of_kind("RoleBinding")
        for subject in binding.inputs.get("subjects", [])
        if subject.get("kind") == "ServiceAccount"
    }
    return [
        f"{name_of(w)} mounts a service-account token it does not use"
        for w in workloads(run)
        if pod_spec(w).get("automountServiceAccountToken") is not False
        and pod_spec(w).get("serviceAccountName") not in bound
    ]


CHECKS: list[Check] = [
    check_namespace_levels,
    check_restricted_pods,
    check_resources,
    check_network_policies_cover_every_pod,
    check_no_nodeport_to_a_writable_service,
    check_images_by_digest,
    check_builds_beside_the_registry,
    check_no_stray_api_token,
]


@pytest.mark.parametrize("stack", cluster_stacks())
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_policy_holds_on_every_stack(check: Check, stack: str) -> None:
    assert check(recorded(stack), load_stack(stack)) == []


# Each check catches a deliberately weakened object.


def _named(run: ProgramRun, kind: str, name: str) -> Registered:
    return next(r for r in run.of_kind(kind) if name_of(r) == name)


def _lab_namespace_privileged(run: ProgramRun) -> None:
    _named(run, "Namespace", "k8scifar").inputs["metadata"]["labels"][f"{PSA_LABEL}/enforce"] = PRIVILEGED


def _rank_mounts_the_host(run: ProgramRun) -> None:
    spec = pod_spec(_named(run, "StatefulSet", "trainer"))
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})


def _registry_without_limits(run: ProgramRun) -> None:
    del pod_spec(_named(run, "Deployment", "registry"))["containers"][0]["resources"]["limits"]


def _no_default_deny(run: ProgramRun) -> None:
    run.resources.remove(_named(run, "NetworkPolicy", "deny-all"))


def _nodeport_to_the_push_side(run: ProgramRun) -> None:
    _named(run, "Service", "registry-pull").inputs["spec"]["ports"][0]["targetPort"] = "push"


def _device_plugin_by_tag(run: ProgramRun) -> None:
    container = pod_spec(_named(run, "DaemonSet", "nvidia-device-plugin"))["containers"][0]
    container["image"] = container["image"].split("@")[0]


def _record_by_tag(run: ProgramRun) -> None:
    build = next(w for w in workloads(run) if labels_of(w).get(COMPONENT_LABEL) == "build")
    record = next(c for c in containers(build) if c["name"] == "record-digest")
    record["image"] = "10.0.0.1:30500/k8scifar/trainer:0123456789ab"


def _build_anywhere(run: ProgramRun) -> None:
    build = next(w for w in workloads(run) if labels_of(w).get(COMPONENT_LABEL) == "build")
    del pod_spec(build)["nodeSelector"]


def _dataset_with_a_token(run: ProgramRun) -> None:
    del pod_spec(_named(run, "Job", "dataset"))["automountServiceAccountToken"]


WEAKENED = [
    (check_namespace_levels, "example-cpu", _lab_namespace_privileged, "enforces 'privileged'"),
    (check_restricted_pods, "example-gpu", _rank_mounts_the_host, "['hostPath'] volume 'host'"),
    (check_resources, "example-cpu", _registry_without_limits, "no limits"),
    (check_network_policies_cover_every_pod, "example-sweep", _no_default_deny, "egress of sweep-"),
    (check_no_nodeport_to_a_writable_service, "example-cpu", _nodeport_to_the_push_side, "not read-only"),
    (check_images_by_digest, "example-gpu", _device_plugin_by_tag, "not an image by digest"),
    (check_images_by_digest, "example-cpu", _record_by_tag, "record-digest runs 10.0.0.1:30500"),
    (check_builds_beside_the_registry, "example-cpu", _build_anywhere, "may run on another node"),
    (check_no_stray_api_token, "example-cpu", _dataset_with_a_token, "dataset mounts"),
]


@pytest.mark.parametrize(
    ("check", "stack", "weaken", "message"), WEAKENED, ids=lambda v: getattr(v, "__name__", None)
)
def test_policy_catches_a_weakened_object(
    check: Check, stack: str, weaken: Callable[[ProgramRun], None], message: str
) -> None:
    run = broken(stack)
    weaken(run)
    problems = check(run, load_stack(stack))
    assert any(message in p for p in problems), problems


def test_every_policy_check_is_shown_failing() -> None:
    assert {w[0] for w in WEAKENED} == set(CHECKS)
