"""The trainer image, built inside the cluster by rootless BuildKit: no Docker on the operator's machine.

The build context (`lab.cluster.build_context`) travels in a ConfigMap; an init container unpacks it and
`buildctl-daemonless.sh` builds `images/trainer/Dockerfile` and pushes to the private registry.
The ConfigMap and the Job are named after the context's content hash, which is also the image
tag: an unchanged tree declares the same objects (nothing is built again), a changed one
declares new ones, and the new tag rolls the workloads that run the image.

Workloads run the image by digest, not by tag. The digest exists only once BuildKit has pushed,
long after the program is planned, so the build pod records it: its last container writes the
digest BuildKit reports for the push (its `--metadata-file`) into the ConfigMap
`trainer-image-<tag>` (lab/cluster/digest_record.py), and the program reads that ConfigMap once
the Job has completed. The build runs in a namespace of its own (lab.cluster.namespace); only the
recording container gets an API token, and it runs the Dockerfile's base image, pinned by digest,
never an image pulled by tag: the registry speaks plain HTTP, so whoever sat between a node and
it could otherwise hand that container, and its token, code of their choosing. The pod runs on
the registry's node, so the push never leaves it.
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster import digest_record
from lab.cluster.build_context import DOCKERFILE, BuildContext
from lab.cluster.pods import mount, pod_security
from lab.cluster.registry import REPOSITORY, Registry, image_by_digest, image_reference
from lab.cluster.scope import Scope
from lab.cluster.security import SIZES, container_security, harden
from lab.cluster.versions import BUILDKIT_IMAGE
from lab.config.facts import BUILD_PROFILE

APP = "trainer"
COMPONENT = "build"
ARCHIVE_KEY = "context.tar.gz"
CONTEXT_DIR = "/context"
WORKSPACE = "/workspace"
# The rootless image's user; BuildKit keeps its state under that user's home.
BUILDKIT_UID = 1000
BUILDKIT_STATE = "/home/user/.local/share/buildkit"
BUILD_TIMEOUT = "60m"  # the CUDA PyTorch base image is several GB
RESULT_DIR = "/result"
METADATA_FILE = f"{RESULT_DIR}/metadata.json"
ACCOUNT = "trainer-build"
TOKEN_DIR = str(digest_record.ACCOUNT)
TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class TrainerImage:
    reference: pulumi.Output[str]  # what the nodes pull: <registry endpoint>/k8scifar/trainer@sha256:...
    tag: str
    job: k8s.batch.v1.Job


def build_job_name(tag: str) -> str:
    return f"trainer-build-{tag}"


def digest_map_name(tag: str) -> str:
    return f"trainer-image-{tag}"


def _buildctl_args(push_ref: str, cache_ref: str) -> list[str]:
    dockerfile_dir, dockerfile_name = posixpath.split(DOCKERFILE)
    registry_opts = "registry.insecure=true"  # the lab's registry speaks plain HTTP
    return [
        "build",
        "--frontend", "dockerfile.v0",
        "--local", f"context={WORKSPACE}",
        "--local", f"dockerfile={WORKSPACE}/{dockerfile_dir}",
        "--opt", f"filename={dockerfile_name}",
        "--output", f"type=image,name={push_ref},push=true,{registry_opts}",
        # Layers above the base image come from the previous build when its inputs are unchanged.
        "--import-cache", f"type=registry,ref={cache_ref},{registry_opts}",
        "--export-cache", f"type=registry,ref={cache_ref},mode=max,{registry_opts}",
        "--metadata-file", METADATA_FILE,
    ]  # fmt: skip


def _build_security(scope: Scope, container: str) -> tuple[dict[str, object], dict[str, object]]:
    """Pod metadata (annotations) and container security that let rootless BuildKit create user namespaces.

    The runtime's default seccomp and AppArmor profiles forbid the mounts and `unshare` that
    rootlesskit needs. The lab's AppArmor profile (lab/config/facts.py, loaded on the nodes by the
    prereq role) is unconfined but also allows user namespaces where Ubuntu 24.04 restricts them,
    which `Unconfined` does not. BuildKit still runs as an unprivileged user with no added capability.
    """
    security: dict[str, object] = {
        "runAsUser": BUILDKIT_UID,
        "runAsGroup": BUILDKIT_UID,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "Unconfined"},
    }
    if scope.lab.kubernetes_minor >= 30:  # the field replaced the annotation in 1.30
        security["appArmorProfile"] = {"type": "Localhost", "localhostProfile": BUILD_PROFILE}
        return {}, security
    return {
        "annotations": {
            f"container.apparmor.security.beta.kubernetes.io/{container}": f"localhost/{BUILD_PROFILE}"
        }
    }, security


def _account(scope: Scope, tag: str) -> k8s.rbac.v1.RoleBinding:
    """The build's ServiceAccount, allowed to create ConfigMaps in its namespace and replace its digest's.

    RBAC cannot narrow `create` to a name (kubernetes.io/docs/reference/access-authn-authz/rbac/,
    "Referring to resources"): the namespace holds nothing but the build's own objects.
    """
    account = k8s.core.v1.ServiceAccount(
        "trainer-build-account",
        metadata=scope.metadata(ACCOUNT, APP, COMPONENT),
        automount_service_account_token=False,
        opts=scope.opts(),
    )
    role = k8s.rbac.v1.Role(
        "trainer-build-role",
        metadata=scope.metadata(ACCOUNT, APP, COMPONENT),
        rules=[
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["update"],
                "resourceNames": [digest_map_name(tag)],
            },
        ],
        opts=scope.opts(),
    )
    return k8s.rbac.v1.RoleBinding(
        "trainer-build-binding",
        metadata=scope.metadata(ACCOUNT, APP, COMPONENT),
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.metadata.name},
        subjects=[{"kind": "ServiceAccount", "name": account.metadata.name, "namespace": scope.namespace}],
        opts=scope.opts(),
    )


def _token_volume() -> dict[str, Any]:
    """The API token and CA, mounted into the recording container alone."""
    return {
        "name": "api",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]
        },
    }


def _record(scope: Scope, context: BuildContext, push_ref: str) -> dict[str, Any]:
    return {
        "name": "record-digest",
        # Standard-library Python from the image the build starts from, by its digest.
        "image": context.base_image,
        "command": ["python", "-c", Path(digest_record.__file__).read_text()],
        "args": [scope.namespace, digest_map_name(context.tag), METADATA_FILE, push_ref],
        "securityContext": container_security(),
        "resources": SIZES["step"].resources(),
        "volumeMounts": [
            mount("result", RESULT_DIR, read_only=True),
            mount("api", TOKEN_DIR, read_only=True),
        ],
    }


def declare_image(scope: Scope, registry: Registry, context: BuildContext) -> TrainerImage:
    """The build Job in `scope`'s namespace (the build namespace) and the image it pushed, by digest."""
    tag = context.tag
    context_map = k8s.core.v1.ConfigMap(
        "trainer-context",
        metadata=scope.metadata(f"trainer-context-{tag}", APP, COMPONENT),
        binary_data={ARCHIVE_KEY: base64.b64encode(context.archive).decode()},
        immutable=True,
        opts=scope.opts(),
    )
    binding = _account(scope, tag)
    pod_metadata, build_security = _build_security(scope, "buildkit")
    unpack = {
        "name": "unpack",
        # The BuildKit image carries busybox tar: no second image to pin and pull.
        "image": BUILDKIT_IMAGE,
        "command": ["tar", "-xzf", f"{CONTEXT_DIR}/{ARCHIVE_KEY}", "-C", WORKSPACE],
        "securityContext": {**container_security(), "runAsUser": BUILDKIT_UID, "runAsNonRoot": True},
        "resources": SIZES["step"].resources(),
        "volumeMounts": [mount("context", CONTEXT_DIR, read_only=True), mount("workspace", WORKSPACE)],
    }
    push_ref = image_reference(registry.push_host, tag)
    buildkit = {
        "name": "buildkit",
        "image": BUILDKIT_IMAGE,
        "command": ["buildctl-daemonless.sh"],
        "args": _buildctl_args(push_ref, f"{registry.push_host}/{REPOSITORY}:buildcache"),
        # No process sandbox: the pod itself is the sandbox, and a nested PID namespace needs privileges.
        "env": [{"name": "BUILDKITD_FLAGS", "value": "--oci-worker-no-process-sandbox"}],
        "securityContext": build_security,
        "resources": SIZES["build"].resources(),
        "volumeMounts": [
            mount("workspace", WORKSPACE, read_only=True),
            mount("state", BUILDKIT_STATE),
            mount("result", RESULT_DIR),
        ],
    }
    job = k8s.batch.v1.Job(
        "trainer-build",
        metadata=scope.job_metadata(build_job_name(tag), APP, COMPONENT),
        spec={
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT), **pod_metadata},
                "spec": harden(
                    {
                        "restartPolicy": "Never",
                        "serviceAccountName": ACCOUNT,
                        "securityContext": {**pod_security(scope.lab), "fsGroup": BUILDKIT_UID},
                        # Beside the registry: the push reaches it without crossing the network.
                        **registry.placement,
                        # Build and push first, then record what was pushed.
                        "initContainers": [unpack, buildkit],
                        "containers": [_record(scope, context, push_ref)],
                        "volumes": [
                            {"name": "context", "configMap": {"name": context_map.metadata.name}},
                            {"name": "workspace", "emptyDir": {}},
                            {"name": "state", "emptyDir": {}},
                            {"name": "result", "emptyDir": {}},
                            _token_volume(),
                        ],
                    }
                ),
            },
        },
        opts=scope.opts(
            *registry.resources,
            binding,
            custom_timeouts=pulumi.CustomTimeouts(create=BUILD_TIMEOUT, update=BUILD_TIMEOUT),
        ),
    )
    # Read once the Job has completed: its id only resolves then.
    recorded = k8s.core.v1.ConfigMap.get(
        "trainer-image",
        pulumi.Output.all(scope.namespace, job.metadata).apply(lambda v: f"{v[0]}/{digest_map_name(tag)}"),
        opts=scope.opts(job),
    )
    reference = recorded.data.apply(
        lambda data: image_by_digest(scope.lab.registry_endpoint, data[digest_record.DIGEST_KEY])
    )
    return TrainerImage(reference, tag, job)
