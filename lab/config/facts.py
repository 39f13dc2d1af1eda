"""The facts the lab is built on: ports, networks, names, limits and what the trainer image asks
of a node, each written once with where it comes from. The configuration's models check values
against them, the inventory hands them to the roles, the cluster's objects and the CLI read them.
"""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = "k8scifar"
# Pulumi's own rule for a stack name (pulumi/pulumi sdk/go/common/tokens/stack_name.go,
# ParseStackName): 1 to 100 characters, each a letter, a digit, '_', '.' or '-'. It admits `.` and
# `..`, which name folders, not a stack's own: the lab refuses those two, so a stack's files stay
# in stacks/ and its state in .lab/<stack>/.
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


# The newest patch release of each supported minor that this table knows (kubernetes-validate
# ships schemas for exactly these minors; objects are validated against the configured one).
# Each is the "Latest patch release" the release page (https://kubernetes.io/releases/1.MINOR/)
# named when last read; pages read earlier may lag a patch or two. A patch above the one listed
# is refused as not released: when Kubernetes publishes a newer patch, raise its entry here.
KNOWN_PATCHES = {
    25: 16, 26: 15, 27: 16, 28: 15, 29: 15, 30: 14, 31: 14,
    32: 13, 33: 10, 34: 9, 35: 9, 36: 4, 37: 1,
}  # fmt: skip

# The Kubernetes API server's port on the server node (k3s and kubeadm alike).
API_PORT = 6443
# Ports the cluster listens on at the nodes: k3s (https://docs.k3s.io/installation/requirements,
# inbound rules) and kubeadm (https://kubernetes.io/docs/reference/networking/ports-and-protocols/).
# Each is also what the inventory hands the roles (lab/bootstrap/inventory.py lab_vars), so the firewall
# openings and the daemons' configuration read them from here.
KUBELET_PORT = 10250
VXLAN_PORT = 8472
NFS_PORT_NUMBER = 2049
# kube-proxy runs on every node under both distributions; its health and metrics listeners are
# upstream's defaults (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/,
# --healthz-bind-address 0.0.0.0:10256, --metrics-bind-address 127.0.0.1:10249): one on the
# loopback address still holds the port on the host network. So does the kubelet's health
# listener (KubeletConfiguration `healthzPort` 10248 on `healthzBindAddress` 127.0.0.1, upstream's
# defaults: https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
NODE_PORTS = {
    (KUBELET_PORT, "tcp"): "kubelet",
    (10248, "tcp"): "kubelet health",
    (VXLAN_PORT, "udp"): "flannel VXLAN",
    (10256, "tcp"): "kube-proxy health",
    (10249, "tcp"): "kube-proxy metrics",
}
# The controller-manager's and scheduler's secure ports (--secure-port of kube-controller-manager
# and kube-scheduler) are held by kubeadm's static pods and by the k3s server, which runs both.
SERVER_PORTS = {
    (API_PORT, "tcp"): "Kubernetes API",
    (10257, "tcp"): "controller-manager",
    (10259, "tcp"): "scheduler",
}
# kubeadm's etcd static pod also serves its metrics on 127.0.0.1:2381 (`--listen-metrics-urls`,
# kubeadm's EtcdMetricsPort, cmd/kubeadm/app/constants/constants.go).
KUBEADM_SERVER_PORTS = {(2379, "tcp"): "etcd", (2380, "tcp"): "etcd peers", (2381, "tcp"): "etcd metrics"}
NFS_PORT = {(NFS_PORT_NUMBER, "tcp"): "NFS"}
# Every port some node of a lab holds, by protocol, under either distribution.
HELD_PORTS = NODE_PORTS | SERVER_PORTS | KUBEADM_SERVER_PORTS | NFS_PORT
# The node exporter's port, which it takes on every node's own network (the chart runs it with
# hostNetwork): prometheus-community/helm-charts charts/prometheus-node-exporter 4.56.1 values.yaml
# `service.port`, also the port of Debian's and Ubuntu's `prometheus-node-exporter` package. The
# stack moves the lab's exporter with `observability.nodeExporterPort`; this is its default.
NODE_EXPORTER_PORT = 9100
# kube-proxy may hold any port of the NodePort range on every node for a Service.
NODE_PORT_RANGE = range(30000, 32768)
# Linux's default net.ipv4.ip_local_port_range (https://docs.kernel.org/networking/ip-sysctl.html):
# where NCCL's and Gloo's listening sockets are bound.
EPHEMERAL_PORTS = (32768, 60999)

# Namespaces Kubernetes creates and uses itself; `kube-` is reserved for its system namespaces
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/).
SYSTEM_NAMESPACE = "kube-system"
RESERVED_NAMESPACES = frozenset({"default", SYSTEM_NAMESPACE, "kube-public", "kube-node-lease"})
# The cluster's DNS: CoreDNS in kube-system, its pods labelled as kube-dns's were, by kubeadm's
# addon (cmd/kubeadm/app/phases/addons/dns/manifests.go) and k3s's manifest (manifests/coredns.yaml)
# alike; the Service they serve behind keeps the name kube-dns.
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
RESERVED_NAMESPACE_PREFIX = "kube-"
# Namespaces of what the lab installs beside its own: Kueue's manifests and chart install into
# kueue-system (lab.cluster.gang KUEUE_NAMESPACE; tests hold the two equal).
KUEUE_NAMESPACE = "kueue-system"

# A user name as POSIX defines it (Base Definitions 3.437 User Name: characters of the portable
# filename character set, 3.282, not starting with '-'), narrowed as shadow-utils' useradd does
# (lib/chkname.c: a letter or '_' first) and to its 32 characters. Anything else could reach
# `ssh user@address` as an option or split into several words.
USER_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"

# Directories the export must never be or lie under: the lab chowns the export to the trainer's
# uid and `purgeOnDestroy` deletes it. FHS 3.0 puts data a machine serves under /srv.
SYSTEM_TREES = tuple(
    Path(p)
    for p in (
        "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found",
        "/proc", "/root", "/run", "/sbin", "/snap", "/sys", "/usr", "/var",
    )
)  # fmt: skip
# The longest name of one path component Linux takes (NAME_MAX, include/uapi/linux/limits.h).
NAME_MAX = 255
# The longest path an NFS server exports and a client mounts (NFS_MAXPATHLEN and MNTPATHLEN, 1024,
# in Linux's include/uapi/linux/nfs.h and the MOUNT protocol, RFC 1813 section 5.1).
EXPORT_PATH_MAX = 1024
# Directories whose children belong to someone else: a user's home, another disk's mount point.
OWNED_PARENTS = tuple(Path(p) for p in ("/home", "/mnt", "/media"))
# exports(5) splits its lines on blanks and reads '#', quotes and backslashes specially; a path
# of the portable filename characters needs no quoting anywhere it is written.
EXPORT_PATH = r"^/[A-Za-z0-9._/-]+$"
# Networks wider than this may mount the read-write export only with nfs.allowWideNetworks.
WIDEST_NETWORK_PREFIX = 24
# "The maximum number of GPUs supported in a single system" (NVIDIA/open-gpu-kernel-modules,
# src/common/sdk/nvidia/inc/nvlimits.h, NV_MAX_DEVICES).
MAX_NODE_GPUS = 32
# Namespaces named after the lab's (lab/cluster/namespace.py): each is a DNS label of at most 63
# characters too, so the lab's namespace leaves room for the longest suffix.
BUILD_NAMESPACE_SUFFIX = "-build"
GPU_NAMESPACE_SUFFIX = "-gpu"
# Prometheus and Grafana; the exporters that need the host (lab.cluster.observability).
MONITORING_NAMESPACE_SUFFIX = "-monitoring"
EXPORTERS_NAMESPACE_SUFFIX = "-exporters"
DERIVED_NAMESPACE_ROLES = {
    BUILD_NAMESPACE_SUFFIX: "image build",
    GPU_NAMESPACE_SUFFIX: "NVIDIA device plugin",
    MONITORING_NAMESPACE_SUFFIX: "Prometheus and Grafana",
    EXPORTERS_NAMESPACE_SUFFIX: "exporters",
}
DERIVED_NAMESPACE_SUFFIXES = tuple(DERIVED_NAMESPACE_ROLES)
DNS_LABEL_MAX = 63
# The trainer's uid: above the system accounts (Debian Policy 9.2.2: 0-999) and the first login
# user, 1000, which is also the uid the image build's BuildKit runs as; never `nobody` (65534),
# whom the export's root_squash maps every node's root to.
TRAINER_UID_MIN = 1001
NOBODY_UID = 65534
# What Ansible and ssh cannot take in a key path: Ansible writes it as IdentityFile="PATH" without
# escaping (plugins/connection/ssh.py), ssh expands '%' tokens and `${VAR}` in it (ssh_config(5)
# TOKENS, ENVIRONMENT VARIABLES), and a control character breaks the option.
KEY_PATH_UNSAFE = re.compile(r'["\\%]|\$\{|[\x00-\x1f\x7f]')
# The first bytes of what airgap's files must be: an ELF executable (k3s, kubeadm, kubelet,
# kubectl), and a tar archive (POSIX ustar magic at offset 257) or one compressed with zstd
# (RFC 8878 frame magic) or gzip (RFC 1952 ID1 ID2).
ELF_MAGIC = b"\x7fELF"
TAR_MAGIC = (257, b"ustar")
GZIP_MAGIC = b"\x1f\x8b"
COMPRESSED_MAGIC = (b"\x28\xb5\x2f\xfd", GZIP_MAGIC)
# Where an offline install's files are published, for the messages that refuse a wrong one.
K3S_RELEASES = "https://github.com/k3s-io/k3s/releases"
KUBERNETES_RELEASE_BINARIES = "https://dl.k8s.io/release/v<version>/bin/linux/<arch>/"
CNI_PLUGINS_RELEASES = "https://github.com/containernetworking/plugins/releases"
FLANNEL_RELEASES = "https://github.com/flannel-io/flannel/releases"
# The DaemonSet of flannel's kube-flannel.yml (namespace, name): the kubeadm role points flanneld
# at the stack's interfaces through it, so an offline manifest must carry it.
FLANNEL_DAEMONSET = ("kube-flannel", "kube-flannel-ds")
# kubeadm runs the pause image from its own release and no crictl from 1.32: pkgs.k8s.io's kubeadm
# package depends on cri-tools up to 1.31 and on nothing from 1.32 (kubernetes/release,
# cmd/krel/templates/latest/metadata.yaml), so an offline install without crictl needs 1.32.
KUBEADM_AIRGAP_MIN_MINOR = 32
# An image tag as the OCI distribution spec defines it (spec.md, "Pulling manifests": tag).
IMAGE_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# The folder of the lab's volume that holds the run folders (lab.cluster.storage's runs share).
RUNS_FOLDER = "runs"
# Most objects' names: DNS labels joined by dots, at most 253 characters (Kubernetes
# apimachinery/pkg/util/validation/validation.go, dns1123SubdomainFmt and DNS1123SubdomainMaxLength).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX = 253
# Host names Ansible gives a meaning of its own (ansible-core 2.19): InventoryData.__init__
# (lib/ansible/inventory/data.py) makes the groups `all` and `ungrouped` in every inventory, and
# constants.LOCALHOST names the controller, which InventoryData.add_host makes the inventory's
# localhost when a host bears the name. InventoryManager._evaluate_patterns (inventory/manager.py)
# resolves a pattern that is a host's name to that host before any group of the name, so a node
# named `all` would be the only host of every `hosts: all` play. Pattern syntax (split_host_pattern's
# ',' and ':', _match_one_pattern's '!', '&', '~' and globs, _enumerate_matches' '.') is none of
# DNS_LABEL's characters.
ANSIBLE_HOST_NAMES = {
    "all": "Ansible's group of every host",
    "ungrouped": "Ansible's group of the hosts in no other group",
    "localhost": "Ansible's name for the machine it runs on",
}
INTERFACE_NAME = r"^[A-Za-z0-9_.:@-]{1,15}$"

# (pod network, service network) of each distribution: k3s's defaults (https://docs.k3s.io/cli/server,
# --cluster-cidr and --service-cidr), kubeadm's service default and flannel's pod network
# (https://kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4/#kubeadm-k8s-io-v1beta4-Networking,
# flannel's Documentation/kube-flannel.yml net-conf.json).
CLUSTER_NETWORKS = {
    "k3s": ("10.42.0.0/16", "10.43.0.0/16"),
    "kubeadm": ("10.244.0.0/16", "10.96.0.0/12"),
}


# Kueue supports Kubernetes 1.29 and later (https://kueue.sigs.k8s.io/docs/installation/).
KUEUE_MIN_K8S_MINOR = 29

# What the trainer image's CUDA build asks of a GPU node. The image's torch wheels carry CUDA 13.0
# (`cuda-toolkit` in images/trainer/requirements.txt), which needs an NVIDIA driver of the 580
# series or newer (CUDA 13.0 release notes, docs.nvidia.com/cuda/archive/13.0.0/
# cuda-toolkit-release-notes, driver compatibility); the wheels hold kernels for compute
# capability 7.5 (Turing) to 12.0 (Blackwell): CUDA 13 builds nothing for Maxwell, Pascal or Volta.
# The nvidia role and `labctl doctor` hold nodes to the same figures.
IMAGE_CUDA = "13.0"
MIN_DRIVER_MAJOR = 580
MIN_COMPUTE_CAPABILITY = "7.5"
MAX_COMPUTE_CAPABILITY = "12.0"

# The AppArmor profile the image build runs under. Rootless BuildKit's rootlesskit creates a user
# namespace; Ubuntu 24.04 sets `kernel.apparmor_restrict_unprivileged_userns=1`, after which only a
# process confined by a profile with the `userns` rule may (Ubuntu's announcement,
# ubuntu.com/blog/ubuntu-23-10-restricted-unprivileged-user-namespaces; moby/moby#47480,
# rootless-containers/rootlesskit#421, moby/buildkit#7073). Rather than lifting the restriction for
# the whole host, the prereq role loads a profile that is unconfined but for allowing `userns` on
# every node with AppArmor, and the build pod names it as a Localhost profile: BUILD_PROFILE is
# `profile NAME` in the file and the pod's localhostProfile.
BUILD_PROFILE = "k8scifar-buildkit"
# The kernel setting that restricts user namespaces to profiles that allow them (absent elsewhere).
USERNS_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"
