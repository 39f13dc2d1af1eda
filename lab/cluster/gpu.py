"""GPU support on GPU labs only: the `nvidia` RuntimeClass and NVIDIA's device plugin DaemonSet.

The host bootstrap installs the NVIDIA container toolkit (which registers the `nvidia` runtime
handler with containerd) and labels GPU nodes `nvidia.com/gpu.present=true`; these objects make
the GPUs schedulable as `nvidia.com/gpu` and let pods ask for that runtime.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.pods import GPU_NODE_LABEL, GPU_RESOURCE, GPU_RUNTIME_CLASS, container_security
from lab.cluster.scope import Scope
from lab.cluster.versions import DEVICE_PLUGIN_IMAGE

APP = "nvidia-device-plugin"
COMPONENT = "gpu"
KUBELET_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def declare_gpu_support(scope: Scope) -> list[pulumi.Resource]:
    """The GPU objects of a GPU lab; none at all on a CPU lab."""
    if not scope.lab.has_gpus:
        return []
    runtime_class = k8s.node.v1.RuntimeClass(
        "nvidia",
        metadata=scope.cluster_metadata(GPU_RUNTIME_CLASS, APP, COMPONENT),
        handler=GPU_RUNTIME_CLASS,
        opts=scope.opts(),
    )
    return [runtime_class, _device_plugin(scope, runtime_class)]


def _device_plugin(scope: Scope, runtime_class: k8s.node.v1.RuntimeClass) -> k8s.apps.v1.DaemonSet:
    pod = {
        "runtimeClassName": GPU_RUNTIME_CLASS,
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        # GPU nodes are often tainted so that only GPU work lands there; the plugin must still run.
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        # Without the plugin no GPU is allocatable: it is the last pod a node should evict.
        "priorityClassName": "system-node-critical",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "device-plugin",
                "image": DEVICE_PLUGIN_IMAGE,
                # A GPU node whose driver is broken keeps its plugin running and reports no GPUs.
                "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                "securityContext": container_security(),
                "volumeMounts": [{"name": "device-plugins", "mountPath": KUBELET_PLUGIN_DIR}],
            }
        ],
        "volumes": [{"name": "device-plugins", "hostPath": {"path": KUBELET_PLUGIN_DIR}}],
    }
    return k8s.apps.v1.DaemonSet(
        "nvidia-device-plugin",
        metadata=scope.metadata(APP, APP, COMPONENT),
        spec={
            "selector": {"matchLabels": scope.selector(APP, COMPONENT)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": scope.labels(APP, COMPONENT)}, "spec": pod},
        },
        opts=scope.opts(runtime_class),
    )
