"""GPU support on GPU labs only: the GPU node label, the `nvidia` RuntimeClass and NVIDIA's device plugin.

The host bootstrap installs the NVIDIA container toolkit (which registers the `nvidia` runtime
handler with containerd); these objects make the GPUs schedulable as `nvidia.com/gpu` and let
pods ask for that runtime.

GPU nodes are labelled `nvidia.com/gpu.present=true` through the API, one server-side-apply patch
per node, so the label follows the stack file: k3s's `node-label` and the kubelet's
`--node-labels` apply only when a node registers (docs.k3s.io/cli/agent, "Node Labels and Taints
for Agents"), so a node given GPUs later would never be labelled there. A node whose `gpus` drops
to 0 loses its patch, and with it the label (the patch's field manager owned it).

Unless the stack says the cluster provides them (`provides.devicePlugin`, as NVIDIA's GPU operator
installs both), the lab owns the RuntimeClass `nvidia` on both distributions: kubeadm ships none, and the k3s
role disables k3s's own (`disable: runtimes`, ansible/roles/k3s/defaults/main.yml), which k3s
would otherwise apply from its packaged runtimes.yaml; pulumi-kubernetes creates new objects with
a plain create (4.29 on), so an object of that name already there would fail `pulumi up`.

The plugin runs alone in its own namespace at Pod Security `privileged` (its hostPath to the
kubelet's socket directory is more than `baseline` admits), with no API token and no network.
It hands GPUs to containers as volume mounts, not as an `NVIDIA_VISIBLE_DEVICES` variable, and the
toolkit on the nodes (the nvidia role) ignores that variable in unprivileged containers: a pod can
no longer get every GPU by setting `NVIDIA_VISIBLE_DEVICES=all` (NVIDIA/k8s-device-plugin README,
"deviceListStrategy"; NVIDIA, "Preventing unprivileged access to GPUs in Kubernetes").
The plugin itself finds the GPUs through that very variable (its image sets
`NVIDIA_VISIBLE_DEVICES=all`, deployments/container/Dockerfile at v0.17.1), so it holds the one
capability the toolkit takes as "privileged": CAP_SYS_ADMIN in its bounding set
(nvidia-container-toolkit v1.17.8 internal/config/image/privileged.go IsPrivileged, read by
cmd/nvidia-container-runtime-hook/container_config.go getDevices). NVIDIA's own chart adds it for
the same reason whenever the strategy includes volume-mounts (deployments/helm/nvidia-device-plugin
templates/_helpers.tpl, `requiresCapSysAdmin`, v0.17.1). Without it the plugin sees no NVML,
reports no GPU, and every GPU pod stays Pending. Workloads keep the protection: the lab's
namespace enforces `restricted`, which admits no added capability but NET_BIND_SERVICE.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.pods import GPU_NODE_LABEL, GPU_RUNTIME_CLASS, GPU_TOLERATION
from lab.cluster.scope import Scope
from lab.cluster.security import SIZES, container_security, harden
from lab.cluster.versions import DEVICE_PLUGIN_IMAGE

APP = "nvidia-device-plugin"
COMPONENT = "gpu"
KUBELET_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEVICE_LIST_STRATEGY = "volume-mounts"
# Every capability dropped but the one that makes the toolkit honour the image's
# NVIDIA_VISIBLE_DEVICES=all for the plugin (see the module's docstring).
PLUGIN_CAPABILITIES = {"drop": ["ALL"], "add": ["SYS_ADMIN"]}


def declare_gpu_support(scope: Scope) -> list[pulumi.Resource]:
    """The GPU objects of a GPU lab, the device plugin in `scope`'s namespace (the GPU namespace);
    the node labels alone where the cluster provides the plugin and its RuntimeClass."""
    labels = gpu_node_labels(scope)
    if scope.lab.provides.device_plugin:
        # Declaring either of them would fail `pulumi up` on the cluster's own (a plain create).
        return [*labels]
    runtime_class = k8s.node.v1.RuntimeClass(
        "nvidia",
        metadata=scope.cluster_metadata(GPU_RUNTIME_CLASS, APP, COMPONENT),
        handler=GPU_RUNTIME_CLASS,
        opts=scope.opts(),
    )
    return [*labels, runtime_class, _device_plugin(scope, runtime_class, *labels)]


def gpu_node_labels(scope: Scope) -> list[k8s.core.v1.NodePatch]:
    """One patch per GPU node of the stack, setting the label the device plugin and GPU pods select."""
    return [
        k8s.core.v1.NodePatch(
            f"gpu-label-{node.name}",
            metadata={"name": node.name, "labels": {GPU_NODE_LABEL: "true"}},
            opts=scope.opts(),
        )
        for node in scope.lab.gpu_nodes
    ]


def _device_plugin(
    scope: Scope, runtime_class: k8s.node.v1.RuntimeClass, *labels: k8s.core.v1.NodePatch
) -> k8s.apps.v1.DaemonSet:
    pod = harden(
        {
            "runtimeClassName": GPU_RUNTIME_CLASS,
            "nodeSelector": {GPU_NODE_LABEL: "true"},
            "tolerations": [GPU_TOLERATION],
            # Without the plugin no GPU is allocatable: it is the last pod a node should evict.
            "priorityClassName": "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "device-plugin",
                    "image": DEVICE_PLUGIN_IMAGE,
                    "env": [
                        # A GPU node whose driver is broken keeps its plugin running and reports no GPUs.
                        {"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                        {"name": "DEVICE_LIST_STRATEGY", "value": DEVICE_LIST_STRATEGY},
                    ],
                    "securityContext": {**container_security(), "capabilities": PLUGIN_CAPABILITIES},
                    "resources": SIZES["device-plugin"].resources(),
                    "volumeMounts": [{"name": "device-plugins", "mountPath": KUBELET_PLUGIN_DIR}],
                }
            ],
            "volumes": [{"name": "device-plugins", "hostPath": {"path": KUBELET_PLUGIN_DIR}}],
        }
    )
    return k8s.apps.v1.DaemonSet(
        "nvidia-device-plugin",
        metadata=scope.metadata(APP, APP, COMPONENT),
        spec={
            "selector": {"matchLabels": scope.selector(APP, COMPONENT)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": scope.labels(APP, COMPONENT)}, "spec": pod},
        },
        opts=scope.opts(runtime_class, *labels),
    )
