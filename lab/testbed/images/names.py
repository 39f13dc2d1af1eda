"""The images' names and tags, in one place a kubeadm configuration can import.

kubeadm 1.34.4 asks for these (`kubeadm config images list --kubernetes-version v1.34.4`, run with
the tools folder's kubeadm link):

    registry.k8s.io/kube-apiserver:v1.34.4
    registry.k8s.io/kube-controller-manager:v1.34.4
    registry.k8s.io/kube-scheduler:v1.34.4
    registry.k8s.io/kube-proxy:v1.34.4
    registry.k8s.io/coredns/coredns:v1.12.1
    registry.k8s.io/pause:3.10.1
    registry.k8s.io/etcd:3.6.5-0

The images built here keep kubeadm's repository names, but a tag always says what is inside: the
Kubernetes images are v1.34.4, as kubeadm expects; etcd is 3.6.5 without upstream's `-0` (that
suffix numbers revisions of Kubernetes' own etcd image, cluster/images/etcd, which this is not);
CoreDNS is 1.15.0, not kubeadm's default 1.12.1. So a ClusterConfiguration sets `etcd.local.imageTag`
to ETCD_TAG and `dns.imageTag` to COREDNS_TAG (CLUSTER_CONFIGURATION_TAGS, below).

pause: kubeadm lists registry.k8s.io/pause:3.10.1, but the kubelet does not choose the sandbox
image: with containerd 1.6 every pod's sandbox is containerd's CRI `sandbox_image` (kubeadm only
warns when the two differ). The pause here is the project's own program (pause.c), not upstream's
3.10.1, so it gets a name of its own, PAUSE_IMAGE, which containerd's `sandbox_image` must name.
kubeadm's preflight still looks for registry.k8s.io/pause:3.10.1 and, offline, cannot pull it:
that one check (ImagePull) is what an offline `kubeadm init` has to be told about.

The versions are those of the pinned tools folder (lab.testbed.tools.MANIFEST_SHA256; docs/tools.md).
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "3.6.5"
COREDNS_VERSION = "1.15.0"
FLANNEL_VERSION = "v0.28.10"
FLANNEL_CNI_PLUGIN_VERSION = "v1.9.1-flannel1"  # the tools README: cni-plugin tag v1.9.1-flannel1

# kubeadm's imageRepository default (ClusterConfiguration.imageRepository).
REPOSITORY = "registry.k8s.io"
ETCD_TAG = ETCD_VERSION
COREDNS_TAG = f"v{COREDNS_VERSION}"
PAUSE_TAG = "1.0"  # the project's pause.c; bump when it changes

KUBE_APISERVER = f"{REPOSITORY}/kube-apiserver:{KUBERNETES_VERSION}"
KUBE_CONTROLLER_MANAGER = f"{REPOSITORY}/kube-controller-manager:{KUBERNETES_VERSION}"
KUBE_SCHEDULER = f"{REPOSITORY}/kube-scheduler:{KUBERNETES_VERSION}"
KUBE_PROXY = f"{REPOSITORY}/kube-proxy:{KUBERNETES_VERSION}"
ETCD = f"{REPOSITORY}/etcd:{ETCD_TAG}"
COREDNS = f"{REPOSITORY}/coredns/coredns:{COREDNS_TAG}"
PAUSE_IMAGE = f"localhost/k8scifar/pause:{PAUSE_TAG}"  # containerd's `sandbox_image`
FLANNEL = f"ghcr.io/flannel-io/flannel:{FLANNEL_VERSION}"
FLANNEL_CNI_PLUGIN = f"ghcr.io/flannel-io/flannel-cni-plugin:{FLANNEL_CNI_PLUGIN_VERSION}"

# What kubeadm would use without these settings (recorded above), for the checks that compare.
KUBEADM_DEFAULT_ETCD = f"{REPOSITORY}/etcd:3.6.5-0"
KUBEADM_DEFAULT_COREDNS = f"{REPOSITORY}/coredns/coredns:v1.12.1"
KUBEADM_DEFAULT_PAUSE = f"{REPOSITORY}/pause:3.10.1"

# The ClusterConfiguration (kubeadm.k8s.io/v1beta4) fields that make kubeadm name these images.
CLUSTER_CONFIGURATION_TAGS = {
    "kubernetesVersion": KUBERNETES_VERSION,
    "imageRepository": REPOSITORY,
    "etcd": {"local": {"imageTag": ETCD_TAG}},
    "dns": {"imageTag": COREDNS_TAG},
}
