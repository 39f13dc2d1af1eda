"""Rules the cluster's objects follow together and with the stack: each check is a function of a
recorded program run and the lab configuration that returns the problems it finds
(tests/cluster/test_cluster_consistency.py shows each passing on every stack and catching a
deliberately broken copy of a real run)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lab.cluster.build_context import build_context
from lab.cluster.namespace import build_namespace, gpu_namespace
from lab.config import LabConfig, Placement
from lab.config.monitoring import monitoring_namespace
from tests.support.program import (
    WORKLOAD_KINDS,
    ProgramRun,
    Registered,
    containers,
    env_of,
    fake_digest,
    labels_of,
    name_of,
    pod_labels,
    pod_spec,
)
from trainer.sweep import expand

GPU = "nvidia.com/gpu"
TRAINER_COMPONENTS = ("training", "sweep", "dataset")
GPU_COMPONENTS = ("training", "sweep")
LABEL_KEYS = {f"app.kubernetes.io/{k}" for k in ("name", "part-of", "component", "managed-by", "instance")}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "RuntimeClass"}
# Server-side-apply patches of objects the cluster owns (the GPU node label): neither in the
# lab's namespace nor carrying its labels.
PATCHES = {"NodePatch"}

Check = Callable[[ProgramRun, LabConfig], list[str]]


# Finding objects in a run.


def component(run: ProgramRun, name: str) -> list[Registered]:
    """Workloads whose labels name `name` as their component."""
    return [
        r
        for r in run.kubernetes_objects()
        if r.kind in WORKLOAD_KINDS and labels_of(r).get("app.kubernetes.io/component") == name
    ]


def one(run: ProgramRun, name: str) -> Registered | None:
    found = component(run, name)
    return found[0] if len(found) == 1 else None


def objects_named(run: ProgramRun, kind: str) -> dict[str, Registered]:
    return {name_of(r): r for r in run.of_kind(kind)}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def trainer_container(resource: Registered) -> dict[str, Any]:
    return pod_spec(resource)["containers"][0]


# The checks.


def check_headless_service(run: ProgramRun, lab: LabConfig) -> list[str]:
    sts = one(run, "training")
    if sts is None:
        return ["expected exactly one training StatefulSet"]
    spec = sts.inputs["spec"]
    service = objects_named(run, "Service").get(spec.get("serviceName", ""))
    if service is None:
        return [f"serviceName {spec.get('serviceName')!r} names no Service"]
    problems = []
    if service.inputs["spec"].get("clusterIP") != "None":
        problems.append(f"Service {name_of(service)} is not headless (clusterIP: None)")
    if not service.inputs["spec"].get("publishNotReadyAddresses"):
        problems.append(
            f"Service {name_of(service)} hides not-ready ranks from DNS (publishNotReadyAddresses)"
        )
    if not matches(service.inputs["spec"].get("selector", {}), pod_labels(sts)):
        problems.append(f"Service {name_of(service)}'s selector does not match the StatefulSet's pod labels")
    if not matches(spec["selector"]["matchLabels"], pod_labels(sts)):
        problems.append("the StatefulSet's selector does not match its own pod labels")
    return problems


def check_claims(run: ProgramRun, lab: LabConfig) -> list[str]:
    claims = objects_named(run, "PersistentVolumeClaim")
    volumes = objects_named(run, "PersistentVolume")
    problems = []
    for workload in run.kubernetes_objects():
        if workload.kind not in WORKLOAD_KINDS:
            continue
        for volume in pod_spec(workload).get("volumes", []):
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in claims:
                problems.append(
                    f"{workload.kind} {name_of(workload)} mounts claim {claim!r}, which does not exist"
                )
    for name, claim in claims.items():
        spec = claim.inputs["spec"]
        volume = volumes.get(spec.get("volumeName", ""))
        if volume is None or spec.get("storageClassName") != "":
            problems.append(
                f"claim {name} is not bound by volumeName to a static volume (storageClassName '')"
            )
            continue
        ref = volume.inputs["spec"].get("claimRef", {})
        if (ref.get("name"), ref.get("namespace")) != (name, lab.namespace):
            problems.append(
                f"volume {name_of(volume)} reserves {ref} instead of claim {lab.namespace}/{name}"
            )
        nfs = volume.inputs["spec"].get("nfs", {})
        if nfs.get("server") != lab.nfs_server.address or not nfs.get("path", "").startswith(
            lab.nfs.export_path + "/"
        ):
            problems.append(
                f"volume {name_of(volume)} is not on {lab.nfs_server.address}:{lab.nfs.export_path}"
            )
    return problems


def check_trainer_image(run: ProgramRun, lab: LabConfig) -> list[str]:
    tag = build_context().tag
    # By the digest the build recorded, pulled from where the nodes pull.
    digest = fake_digest(f"{build_namespace(lab)}/trainer-image-{tag}")
    expected = f"{lab.registry_endpoint}/k8scifar/trainer@{digest}"
    problems = []
    for name in TRAINER_COMPONENTS:
        for workload in component(run, name):
            image = trainer_container(workload)["image"]
            if image != expected:
                problems.append(f"{workload.kind} {name_of(workload)} runs {image}, not {expected}")
    build = one(run, "build")
    if build is None:
        return [*problems, "expected exactly one image build Job"]
    if tag not in name_of(build):
        problems.append(f"build Job {name_of(build)} does not carry the content tag {tag}")
    pushes = " ".join(a for c in containers(build) for a in c.get("args", []))
    if f"/k8scifar/trainer:{tag},push=true" not in pushes:
        problems.append(f"build Job does not push k8scifar/trainer:{tag}")
    registry = objects_named(run, "Service").get("registry-pull")
    ports = registry.inputs["spec"].get("ports", []) if registry else []
    if not any(p.get("nodePort") == lab.registry.port for p in ports):
        problems.append(f"no registry Service on NodePort {lab.registry.port}, where the nodes pull from")
    return problems


def check_gpu_only_on_gpu_labs(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    gpu_kinds = [r for r in run.kubernetes_objects() if r.kind == "RuntimeClass"] + component(run, "gpu")
    if lab.has_gpus and len(gpu_kinds) != 2:
        problems.append("a GPU lab needs the nvidia RuntimeClass and the device plugin DaemonSet")
    if not lab.has_gpus and gpu_kinds:
        problems.append(f"a CPU lab declares GPU objects: {[name_of(r) for r in gpu_kinds]}")
    for workload in run.kubernetes_objects():
        if workload.kind not in WORKLOAD_KINDS:
            continue
        component_name = labels_of(workload)["app.kubernetes.io/component"]
        wants_gpu = lab.has_gpus and component_name in GPU_COMPONENTS
        # A training pod holds a GPU per rank it runs; a sweep pod is one process on one GPU.
        gpus = lab.world.ranks_per_pod if component_name == "training" else 1
        runtime = pod_spec(workload).get("runtimeClassName")
        limits = [c.get("resources", {}).get("limits", {}).get(GPU) for c in containers(workload)]
        if wants_gpu and (runtime != "nvidia" or limits[-1] != gpus):
            problems.append(
                f"{workload.kind} {name_of(workload)} needs runtimeClassName nvidia and {gpus} GPUs"
            )
        if not wants_gpu and any(limits):
            problems.append(f"{workload.kind} {name_of(workload)} asks for a GPU it must not have")
        if not lab.has_gpus and runtime is not None:
            problems.append(f"{workload.kind} {name_of(workload)} names runtime {runtime} on a CPU lab")
    return problems


def check_placement(run: ProgramRun, lab: LabConfig) -> list[str]:
    sts = one(run, "training")
    if sts is None:
        return ["expected exactly one training StatefulSet"]
    affinity = pod_spec(sts).get("affinity", {})
    annotations = sts.inputs["spec"]["template"].get("metadata", {}).get("annotations", {})
    if lab.packs_by_topology:
        # Kueue packs the pods (topology-aware scheduling); an affinity would overrule it.
        topology = annotations.get("kueue.x-k8s.io/podset-preferred-topology")
        if affinity or topology != "kubernetes.io/hostname":
            return ["pack by topology needs Kueue's preferred hostname topology and no affinity"]
        return []
    wanted, unwanted = "podAntiAffinity", "podAffinity"
    if lab.trainer.placement is Placement.PACK:
        wanted, unwanted = unwanted, wanted
    nodes = len(lab.gpu_nodes) if lab.has_gpus else len(lab.nodes)
    # More pods than nodes (unequal GPU counts) can only be spread as far as the GPUs allow.
    strength = "preferred" if sts.inputs["spec"]["replicas"] > nodes else "required"
    terms = affinity.get(wanted, {}).get(f"{strength}DuringSchedulingIgnoredDuringExecution", [])
    terms = [t.get("podAffinityTerm", t) for t in terms]
    problems = []
    if unwanted in affinity:
        problems.append(f"placement {lab.trainer.placement.value} must not set {unwanted}")
    if not any(
        t.get("topologyKey") == "kubernetes.io/hostname"
        and matches(t.get("labelSelector", {}).get("matchLabels", {}), pod_labels(sts))
        for t in terms
    ):
        problems.append(
            f"placement {lab.trainer.placement.value} needs a {strength} {wanted} term on"
            " kubernetes.io/hostname that selects the ranks"
        )
    return problems


def check_sweep(run: ProgramRun, lab: LabConfig) -> list[str]:
    indexed = [r for r in run.of_kind("Job") if r.inputs["spec"].get("completionMode") == "Indexed"]
    if lab.sweep is None:
        return [f"no sweep is configured but Job {name_of(r)} is Indexed" for r in indexed]
    if len(indexed) != 1:
        return [f"a sweep needs one Indexed Job, found {len(indexed)}"]
    job = indexed[0].inputs["spec"]
    sets = len(expand(lab.sweep.space()))
    problems = []
    if job.get("completions") != sets:
        problems.append(f"the sweep has {sets} sets but the Job {job.get('completions')} completions")
    if job.get("parallelism") != lab.sweep_parallelism:
        problems.append(
            f"sweep parallelism {job.get('parallelism')} is not the lab's {lab.sweep_parallelism}"
        )
    maps = objects_named(run, "ConfigMap")
    for volume in job["template"]["spec"]["volumes"]:
        sweep_map = maps.get(volume.get("configMap", {}).get("name", ""))
        if sweep_map is not None and "sweep.json" in sweep_map.inputs.get("data", {}):
            shipped = len(json.loads(sweep_map.inputs["data"]["sweep.json"])["sets"])
            if shipped != job.get("completions"):
                problems.append(f"the sweep file holds {shipped} sets, the Job runs {job.get('completions')}")
            return problems
    return [*problems, "the sweep Job mounts no sweep file"]


def check_start_order(run: ProgramRun, lab: LabConfig) -> list[str]:
    sts, build, dataset = one(run, "training"), one(run, "build"), one(run, "dataset")
    if sts is None or build is None or dataset is None:
        return ["expected one training StatefulSet, one build Job and one dataset Job"]
    problems = []
    for before, after in ((build, sts), (dataset, sts), (build, dataset)):
        if before.urn not in after.dependencies:
            problems.append(
                f"{after.kind} {name_of(after)} does not wait for {before.kind} {name_of(before)}"
            )
    registry = one(run, "registry")
    if registry is None or registry.urn not in build.dependencies:
        problems.append("the image build does not wait for the registry")
    return problems


def check_rendezvous(run: ProgramRun, lab: LabConfig) -> list[str]:
    sts = one(run, "training")
    if sts is None:
        return ["expected exactly one training StatefulSet"]
    spec = sts.inputs["spec"]
    env = env_of(trainer_container(sts))
    master = f"{name_of(sts)}-0.{spec['serviceName']}.{lab.namespace}.svc.cluster.local"
    per_pod = lab.world.ranks_per_pod
    expected = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(lab.trainer.port),
        "WORLD_SIZE": str(lab.replicas),
        "PET_NPROC_PER_NODE": str(per_pod),
    }
    problems = [f"{k} is {env.get(k)!r}, expected {v!r}" for k, v in expected.items() if env.get(k) != v]
    if spec.get("replicas", 0) * per_pod != lab.replicas:
        problems.append(f"{spec.get('replicas')} pods of {per_pod} ranks for a world of {lab.replicas}")
    if env.get("POD_NAME") != {"fieldRef": {"fieldPath": "metadata.name"}}:
        problems.append("POD_NAME must come from metadata.name")
    if spec.get("podManagementPolicy") != "Parallel":
        problems.append("ranks must start together (podManagementPolicy: Parallel)")
    service = objects_named(run, "Service").get(spec["serviceName"])
    ports = [p.get("port") for p in service.inputs["spec"].get("ports", [])] if service else []
    if lab.trainer.port not in ports:
        problems.append(f"the headless Service does not expose the rendezvous port {lab.trainer.port}")
    return problems


def check_namespace_and_labels(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    providers = {r.provider for r in run.kubernetes_objects()}
    if len(providers) != 1 or not next(iter(providers)).startswith("urn:"):
        problems.append(f"objects must all go through the lab's provider, found {providers}")
    namespaces = {lab.namespace, build_namespace(lab), *([gpu_namespace(lab)] if lab.has_gpus else [])}
    if lab.observability.enabled:
        namespaces.add(monitoring_namespace(lab))  # Grafana's admin Secret
    for r in run.kubernetes_objects():
        if r.kind in PATCHES:
            continue
        namespace = r.inputs.get("metadata", {}).get("namespace")
        if r.kind not in CLUSTER_SCOPED and namespace not in namespaces:
            problems.append(
                f"{r.kind} {name_of(r)} is in namespace {namespace!r}, not one of {sorted(namespaces)}"
            )
        missing = LABEL_KEYS - set(labels_of(r))
        if missing:
            problems.append(f"{r.kind} {name_of(r)} lacks labels {sorted(missing)}")
    return problems


def check_pod_security(run: ProgramRun, lab: LabConfig) -> list[str]:
    problems = []
    for name in (*TRAINER_COMPONENTS, "registry"):
        for workload in component(run, name):
            pod = pod_spec(workload).get("securityContext", {})
            if pod.get("runAsUser") != lab.trainer.uid or not pod.get("runAsNonRoot"):
                problems.append(f"{name_of(workload)} must run as uid {lab.trainer.uid}, never root")
            if pod.get("seccompProfile") != {"type": "RuntimeDefault"}:
                problems.append(f"{name_of(workload)} must use the RuntimeDefault seccomp profile")
            for container in containers(workload):
                ctx = container.get("securityContext", {})
                if ctx.get("allowPrivilegeEscalation") is not False or ctx.get("capabilities") != {
                    "drop": ["ALL"]
                }:
                    problems.append(f"{name_of(workload)}/{container['name']} must drop all privileges")
    for name in GPU_COMPONENTS:
        for workload in component(run, name):
            if pod_spec(workload).get("terminationGracePeriodSeconds", 30) < 30:
                problems.append(
                    f"{name_of(workload)}'s grace period cuts the 30 s emergency checkpoint short"
                )
            data = [v for v in pod_spec(workload)["volumes"] if v.get("name") == "data"]
            if not data or not data[0]["persistentVolumeClaim"].get("readOnly"):
                problems.append(f"{name_of(workload)} must mount the dataset read-only")
    return problems


def check_release_rights(run: ProgramRun, lab: LabConfig) -> list[str]:
    """The ranks may patch their own StatefulSet's scale subresource and nothing else.

    RBAC names a subresource `<resource>/<subresource>` and narrows a rule to objects by
    `resourceNames` (https://kubernetes.io/docs/reference/access-authn-authz/rbac/); the scale
    subresource of apps/v1 StatefulSets is what `trainer/pod/handoff.py` patches.
    """
    sts = one(run, "training")
    if sts is None:
        return ["expected exactly one training StatefulSet"]
    account = pod_spec(sts).get("serviceAccountName")
    subject = {"kind": "ServiceAccount", "name": account, "namespace": lab.namespace}
    bindings = [b for b in run.of_kind("RoleBinding") if subject in b.inputs.get("subjects", [])]
    if account not in objects_named(run, "ServiceAccount") or len(bindings) != 1:
        return [f"the ranks' service account {account!r} must exist and be bound by exactly one RoleBinding"]
    role = objects_named(run, "Role").get(bindings[0].inputs["roleRef"].get("name"))
    if role is None or bindings[0].inputs["roleRef"].get("kind") != "Role":
        return [f"RoleBinding {name_of(bindings[0])} must bind a Role of the namespace"]
    wanted = [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],
            "resourceNames": [name_of(sts)],
            "verbs": ["patch"],
        }
    ]
    if role.inputs.get("rules") != wanted:
        return [f"Role {name_of(role)} must allow exactly {wanted}, not {role.inputs.get('rules')}"]
    if pod_spec(sts).get("automountServiceAccountToken") is not True:
        return ["the ranks need their service-account token to scale the finished run to zero"]
    return []


def _ingress_ports(policy: dict[str, Any]) -> set[Any]:
    return {p.get("port") for rule in policy.get("ingress", []) for p in rule.get("ports", [])}


def check_network_policies(run: ProgramRun, lab: LabConfig) -> list[str]:
    policies = [r.inputs["spec"] for r in run.of_kind("NetworkPolicy")]
    problems = []
    if not any(
        p["podSelector"] == {} and "Ingress" in p.get("policyTypes", []) and not p.get("ingress")
        for p in policies
    ):
        problems.append("no policy closes the namespace to incoming traffic")
    for name, port in (("training", lab.trainer.port), ("registry", 5000)):
        workload = one(run, name)
        labels = pod_labels(workload) if workload else {}
        if not any(
            matches(p["podSelector"].get("matchLabels", {}), labels) and port in _ingress_ports(p)
            for p in policies
        ):
            problems.append(f"no policy lets {name} pods take connections on port {port}")
    return problems


CHECKS: list[Check] = [
    check_headless_service,
    check_claims,
    check_trainer_image,
    check_gpu_only_on_gpu_labs,
    check_placement,
    check_sweep,
    check_start_order,
    check_rendezvous,
    check_namespace_and_labels,
    check_pod_security,
    check_network_policies,
    check_release_rights,
]
