"""The trainer image, built inside the cluster by rootless BuildKit: no Docker on the operator's machine.

The build context (`lab.build_context`) travels in a ConfigMap; an init container unpacks it and
`buildctl-daemonless.sh` builds `images/trainer/Dockerfile` and pushes to the private registry.
The ConfigMap and the Job are named after the context's content hash, which is also the image
tag: an unchanged tree declares the same objects (nothing is built again), a changed one
declares new ones, and the new tag rolls the workloads that run the image.
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.apparmor import BUILD_PROFILE
from lab.build_context import DOCKERFILE, BuildContext
from lab.cluster.pods import container_security, mount
from lab.cluster.registry import REPOSITORY, Registry, image_reference
from lab.cluster.scope import Scope, kubernetes_minor
from lab.cluster.versions import BUILDKIT_IMAGE

APP = "trainer"
COMPONENT = "build"
ARCHIVE_KEY = "context.tar.gz"
CONTEXT_DIR = "/context"
WORKSPACE = "/workspace"
# The rootless image's user; BuildKit keeps its state under that user's home.
BUILDKIT_UID = 1000
BUILDKIT_STATE = "/home/user/.local/share/buildkit"
BUILD_TIMEOUT = "60m"  # the CUDA PyTorch base image is several GB


@dataclass(frozen=True)
class TrainerImage:
    reference: str  # what the nodes pull: <registry endpoint>/k8scifar/trainer:<tag>
    tag: str
    job: k8s.batch.v1.Job


def build_job_name(tag: str) -> str:
    return f"trainer-build-{tag}"


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
    ]  # fmt: skip


def _build_security(scope: Scope, container: str) -> tuple[dict[str, object], dict[str, object]]:
    """Pod metadata (annotations) and container security that let rootless BuildKit create user namespaces.

    The runtime's default seccomp and AppArmor profiles forbid the mounts and `unshare` that
    rootlesskit needs. The lab's AppArmor profile (lab/apparmor.py, loaded on the nodes by the
    prereq role) is unconfined but also allows user namespaces where Ubuntu 24.04 restricts them,
    which `Unconfined` does not. BuildKit still runs as an unprivileged user with no added capability.
    """
    security: dict[str, object] = {
        "runAsUser": BUILDKIT_UID,
        "runAsGroup": BUILDKIT_UID,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "Unconfined"},
    }
    if kubernetes_minor(scope.lab) >= 30:  # the field replaced the annotation in 1.30
        security["appArmorProfile"] = {"type": "Localhost", "localhostProfile": BUILD_PROFILE}
        return {}, security
    return {
        "annotations": {
            f"container.apparmor.security.beta.kubernetes.io/{container}": f"localhost/{BUILD_PROFILE}"
        }
    }, security


def declare_image(scope: Scope, registry: Registry, context: BuildContext) -> TrainerImage:
    tag = context.tag
    context_map = k8s.core.v1.ConfigMap(
        "trainer-context",
        metadata=scope.metadata(f"trainer-context-{tag}", APP, COMPONENT),
        binary_data={ARCHIVE_KEY: base64.b64encode(context.archive).decode()},
        immutable=True,
        opts=scope.opts(),
    )
    pod_metadata, build_security = _build_security(scope, "buildkit")
    unpack = {
        "name": "unpack",
        # The BuildKit image carries busybox tar: no second image to pin and pull.
        "image": BUILDKIT_IMAGE,
        "command": ["tar", "-xzf", f"{CONTEXT_DIR}/{ARCHIVE_KEY}", "-C", WORKSPACE],
        "securityContext": {**container_security(), "runAsUser": BUILDKIT_UID, "runAsNonRoot": True},
        "volumeMounts": [mount("context", CONTEXT_DIR, read_only=True), mount("workspace", WORKSPACE)],
    }
    buildkit = {
        "name": "buildkit",
        "image": BUILDKIT_IMAGE,
        "command": ["buildctl-daemonless.sh"],
        "args": _buildctl_args(
            image_reference(registry.push_host, tag), f"{registry.push_host}/{REPOSITORY}:buildcache"
        ),
        # No process sandbox: the pod itself is the sandbox, and a nested PID namespace needs privileges.
        "env": [{"name": "BUILDKITD_FLAGS", "value": "--oci-worker-no-process-sandbox"}],
        "securityContext": build_security,
        "volumeMounts": [mount("workspace", WORKSPACE, read_only=True), mount("state", BUILDKIT_STATE)],
    }
    job = k8s.batch.v1.Job(
        "trainer-build",
        metadata=scope.job_metadata(build_job_name(tag), APP, COMPONENT),
        spec={
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": scope.labels(APP, COMPONENT), **pod_metadata},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"fsGroup": BUILDKIT_UID},
                    "initContainers": [unpack],
                    "containers": [buildkit],
                    "volumes": [
                        {"name": "context", "configMap": {"name": context_map.metadata.name}},
                        {"name": "workspace", "emptyDir": {}},
                        {"name": "state", "emptyDir": {}},
                    ],
                },
            },
        },
        opts=scope.opts(
            *registry.resources,
            custom_timeouts=pulumi.CustomTimeouts(create=BUILD_TIMEOUT, update=BUILD_TIMEOUT),
        ),
    )
    return TrainerImage(image_reference(scope.lab.registry_endpoint, tag), tag, job)
