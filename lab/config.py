"""The lab's stack configuration: one typed, validated object built from the `k8scifar:*` keys.

Every other part of the lab (inventory, Ansible variables, Kubernetes objects, the CLI) reads
this object and nothing else, so a bad value is caught here, named by its key, before any host
is touched.
"""

from __future__ import annotations

import ipaddress
import json
import re
import stat
from collections.abc import Mapping
from difflib import get_close_matches
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic.alias_generators import to_camel, to_snake

from lab.batch import chosen_note, global_batch
from lab.kubeconfig import API_PORT
from lab.world import CPU_PACK_RANKS, World, capacity, plan
from trainer import contract
from trainer import sweep as trainer_sweep
from trainer.hyperparameters import RULES, HyperparameterError, Rule, nearest_batch
from trainer.hyperparameters import check as check_hyperparameter

PROJECT = "k8scifar"
STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"
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

# Ports the cluster listens on at the nodes: k3s (https://docs.k3s.io/installation/requirements,
# inbound rules) and kubeadm (https://kubernetes.io/docs/reference/networking/ports-and-protocols/).
# Each is also what the inventory hands the roles (lab/inventory.py lab_vars), so the firewall
# openings and the daemons' configuration read them from here.
KUBELET_PORT = 10250
VXLAN_PORT = 8472
NFS_PORT_NUMBER = 2049
NODE_PORTS = {(KUBELET_PORT, "tcp"): "kubelet", (VXLAN_PORT, "udp"): "flannel VXLAN"}
SERVER_PORTS = {(API_PORT, "tcp"): "Kubernetes API"}
KUBEADM_SERVER_PORTS = {
    (2379, "tcp"): "etcd",
    (2380, "tcp"): "etcd peers",
    (10257, "tcp"): "controller-manager",
    (10259, "tcp"): "scheduler",
}
NFS_PORT = {(NFS_PORT_NUMBER, "tcp"): "NFS"}
# kube-proxy may hold any port of the NodePort range on every node for a Service.
NODE_PORT_RANGE = range(30000, 32768)
# Linux's default net.ipv4.ip_local_port_range (https://docs.kernel.org/networking/ip-sysctl.html):
# where NCCL's and Gloo's listening sockets are bound.
EPHEMERAL_PORTS = (32768, 60999)

# Namespaces Kubernetes creates and uses itself; `kube-` is reserved for its system namespaces
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/).
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
RESERVED_NAMESPACE_PREFIX = "kube-"

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
DERIVED_NAMESPACE_SUFFIXES = (
    BUILD_NAMESPACE_SUFFIX,
    GPU_NAMESPACE_SUFFIX,
    MONITORING_NAMESPACE_SUFFIX,
    EXPORTERS_NAMESPACE_SUFFIX,
)
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
# The first bytes of what airgap's files must be: an ELF executable (k3s), and a tar archive
# (POSIX ustar magic at offset 257) or one compressed with zstd (RFC 8878 frame magic) or gzip.
ELF_MAGIC = b"\x7fELF"
TAR_MAGIC = (257, b"ustar")
COMPRESSED_MAGIC = (b"\x28\xb5\x2f\xfd", b"\x1f\x8b")

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
INTERFACE_NAME = r"^[A-Za-z0-9_.:@-]{1,15}$"
DnsLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=63)]
InterfaceName = Annotated[str, StringConstraints(pattern=INTERFACE_NAME)]
# What a value that misses each pattern should be, and how to fix it, for the one-line message.
PATTERN_RULES = {
    DNS_LABEL: "a lowercase DNS label (letters, digits, '-')",
    USER_NAME: "a POSIX user name (letters, digits, '.', '_', '-', a letter or '_' first, at most"
    " 32 characters); write the account's login name",
    INTERFACE_NAME: "a network interface name (1 to 15 letters, digits, '_', '.', ':', '@' or '-');"
    " write the name `ip -brief link` shows on the node, such as eth0 or enp3s0",
}
# Unquoted, these words are booleans to YAML 1.1 (https://yaml.org/type/bool.html), which PyYAML
# and Pulumi's stack-file reader (gopkg.in/yaml.v2 in pulumi/pulumi sdk/go/common/encoding/marshal.go)
# both follow: a value such as `off` must be quoted to stay a word.
YAML_BOOLEAN_WORDS = {
    False: ("off", "no", "false", "n"),
    True: ("on", "yes", "true", "y"),
}
# Beyond this many characters a value is cut short where a message quotes it.
SHOWN_CHARACTERS = 40


class ConfigError(ValueError):
    """A stack configuration that cannot build a lab. The message names every bad key and its fix."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid lab configuration in {source}:\n{lines}")


class _Model(BaseModel):
    # camelCase keys in the stack file, snake_case in Python; unknown keys are errors so typos surface.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Distribution(StrEnum):
    K3S = "k3s"
    KUBEADM = "kubeadm"


# (pod network, service network) of each distribution: k3s's defaults (https://docs.k3s.io/cli/server,
# --cluster-cidr and --service-cidr), kubeadm's service default and flannel's pod network
# (https://kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4/#kubeadm-k8s-io-v1beta4-Networking,
# flannel's Documentation/kube-flannel.yml net-conf.json).
CLUSTER_NETWORKS = {
    Distribution.K3S: ("10.42.0.0/16", "10.43.0.0/16"),
    Distribution.KUBEADM: ("10.244.0.0/16", "10.96.0.0/12"),
}


class Role(StrEnum):
    SERVER = "server"
    AGENT = "agent"


class HostKeyPolicy(StrEnum):
    ACCEPT_NEW = "accept-new"  # trust on first contact, refuse a changed key
    STRICT = "strict"  # the key must already be in known_hosts
    OFF = "off"  # no checking: only for throw-away test machines


class Placement(StrEnum):
    SPREAD = "spread"  # one rank per node: required pod anti-affinity
    PACK = "pack"  # every rank on one node: required pod affinity


class Backend(StrEnum):
    AUTO = contract.AUTO
    NCCL = contract.NCCL
    GLOO = contract.GLOO


class Compression(StrEnum):
    NONE = contract.NO_COMPRESSION
    FP16 = contract.FP16
    BF16 = contract.BF16
    POWERSGD = contract.POWERSGD


class Model(StrEnum):
    AIRBENCH = contract.AIRBENCH
    RESNET9 = contract.RESNET9


class SweepStrategy(StrEnum):
    GRID = "grid"
    RANDOM = "random"


class SkipStep(StrEnum):
    """Bootstrap steps a machine may be unable to run; each is skipped with its stated reason."""

    KUBERNETES_INSTALL = "kubernetesInstall"  # installing and starting k3s/kubeadm, node labels
    NFS_SERVER_START = "nfsServerStart"  # starting the kernel NFS server


class Node(_Model):
    """One machine of the lab, reachable over SSH."""

    name: DnsLabel = Field(description="Kubernetes node name and inventory host name (DNS label).")
    address: str = Field(
        description="IPv4 address the other node and the operator reach it at (the lab is IPv4 only)."
    )
    user: Annotated[str, StringConstraints(pattern=USER_NAME)] = Field(
        description="SSH user with passwordless sudo. A POSIX user name: letters, digits, '.', '_',"
        " '-', a letter or '_' first, at most 32 characters."
    )
    role: Role = Field(description="`server` (control plane, exactly one) or `agent`.")
    gpus: int = Field(
        default=0, ge=0, le=MAX_NODE_GPUS, description="NVIDIA GPUs on this node; 0 for CPU only."
    )
    interface: InterfaceName | None = Field(
        default=None,
        description="Network interface for NCCL/Gloo traffic and flannel (default: the route's).",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_not_boolean(cls, value: Any) -> Any:
        # The int type would read `true` as 1.
        if isinstance(value, bool):
            raise ValueError(f"{str(value).lower()} is not a number of GPUs; write 0, 1, 2, ...")
        return value

    @field_validator("address")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        if "%" in value:
            raise ValueError(
                f"{value!r} is zone-qualified; the lab reaches nodes by IPv4 address only:"
                " write the node's IPv4 address"
            )
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address (write it as e.g. 192.168.1.10)") from None
        if isinstance(ip, ipaddress.IPv6Address):
            # The registry endpoint, image references and the registry mirror configuration are
            # written address:port, which an IPv6 address would need brackets for.
            plain = f"write it as {ip.ipv4_mapped}" if ip.ipv4_mapped else "use the node's IPv4 address"
            raise ValueError(f"{value!r} is IPv6, and the lab supports IPv4 node addresses only; {plain}")
        kind = next(
            (
                name
                for name, found in (
                    ("the unspecified address", ip.is_unspecified),
                    ("the broadcast address", ip == ipaddress.IPv4Address("255.255.255.255")),
                    ("a multicast address", ip.is_multicast),
                    ("a link-local address, which is not routed", ip.is_link_local),
                    ("a reserved address", ip.is_reserved),
                )
                if found
            ),
            None,
        )
        if kind is not None:
            raise ValueError(f"{value!r} is {kind}; use the address the node has on the lab's network")
        return str(ip)


class Ssh(_Model):
    """How Ansible reaches the nodes."""

    key_path: str = Field(
        default="~/.ssh/id_ed25519",
        description="Private key for every node; its path holds no '\"', '\\', '%', '${' or control"
        " character, which ssh reads specially.",
    )
    port: int = Field(default=22, ge=1, le=65535, description="SSH port on every node.")
    host_key_policy: HostKeyPolicy = Field(
        default=HostKeyPolicy.ACCEPT_NEW,
        description="`accept-new` (default), `strict` (known_hosts only) or `off` (test machines).",
    )

    @field_validator("key_path")
    @classmethod
    def _plain_key_path(cls, value: str) -> str:
        found = KEY_PATH_UNSAFE.search(value)
        if found is not None:
            raise ValueError(
                f"{value!r} holds {found.group()!r}, which ssh reads specially in a key path;"
                " move or link the key to a path without it"
            )
        return value


class Nfs(_Model):
    """The shared export that holds the dataset, runs and the registry's storage."""

    server: DnsLabel | None = Field(default=None, description="Node that exports (default: the server).")
    export_path: str = Field(
        default="/srv/k8scifar",
        description="Directory to export, which the lab creates (it refuses one that exists and it did"
        " not make), reached through no symbolic link and no directory anyone but root may write;"
        " its datasets/ and runs/ are trainer.uid's and purgeOnDestroy deletes what the lab made."
        " Absolute, at least"
        " two levels deep, of letters, digits and `.` `_` `-` only; not inside a system directory"
        " (/etc, /usr, /var, /root, /boot, ...) and not a home or mount point itself (/home/NAME,"
        " /mnt/NAME).",
    )
    allowed_networks: list[str] | None = Field(
        default=None,
        description="IPv4 CIDRs allowed to mount, each holding a node (default: each node's"
        f" address as a /32); wider than /{WIDEST_NETWORK_PREFIX} only with allowWideNetworks.",
    )
    allow_wide_networks: bool = Field(
        default=False,
        description=f"Let allowedNetworks hold networks wider than /{WIDEST_NETWORK_PREFIX}: every"
        " host in them may mount the export read-write. Never allows 0.0.0.0/0.",
    )
    purge_on_destroy: bool = Field(
        default=False, description="Delete the export's data on `pulumi destroy` (kept by default)."
    )

    @field_validator("export_path")
    @classmethod
    def _dedicated(cls, value: str) -> str:
        path = Path(value)
        fix = "use a directory for the lab alone, such as /srv/k8scifar"
        if not path.is_absolute() or ".." in path.parts or path == Path("/"):
            raise ValueError(f"{value!r} must be an absolute directory below / such as /srv/k8scifar")
        if not re.fullmatch(EXPORT_PATH, value):
            raise ValueError(
                f"{value!r} holds a character other than letters, digits, '.', '_', '-' and '/',"
                f" which breaks the exports line; {fix}"
            )
        system = next((tree for tree in SYSTEM_TREES if path.is_relative_to(tree)), None)
        if system is not None:
            where = "the" if path == system else "inside the"
            raise ValueError(f"{value!r} is {where} system directory {system}; {fix}")
        if len(path.parts) < 3:
            raise ValueError(f"{value!r} is a top-level directory, which the lab would take over; {fix}")
        if path.parent in OWNED_PARENTS:
            raise ValueError(
                f"{value!r} is a home or mount point, whose files are not the lab's; {fix} or {path}/k8scifar"
            )
        return str(path)

    @field_validator("allowed_networks")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("is empty; list the CIDRs that may mount, or leave the key out")
        networks = []
        for cidr in value:
            try:
                network = ipaddress.ip_network(cidr, strict=True)
            except ValueError as err:
                raise ValueError(f"{cidr!r} is not a CIDR such as 192.168.1.0/24 ({err})") from None
            if network.prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} is every address: a read-write export to any network;"
                    " list the lab's network, such as 192.168.1.0/24"
                )
            networks.append(str(network))
        return networks


class Registry(_Model):
    """The in-cluster registry the trainer image is built into and pulled from over plain HTTP."""

    port: int = Field(
        default=30500,
        ge=NODE_PORT_RANGE.start,
        le=NODE_PORT_RANGE.stop - 1,
        description="NodePort the nodes pull from (30000-32767).",
    )


class Airgap(_Model):
    """Install k3s from local files instead of the internet."""

    k3s_binary: str = Field(
        alias="k3sBinary",
        description="Path on the operator's machine to the k3s binary (an ELF executable, readable by all).",
    )
    images_tarball: str = Field(
        description="Path to k3s-airgap-images-<arch>.tar(.zst) (a tar archive, plain, zstd or gzip,"
        " readable by all)."
    )

    @field_validator("k3s_binary")
    @classmethod
    def _executable(cls, value: str) -> str:
        path, head = _readable_file(value, "the k3s binary")
        if not head.startswith(ELF_MAGIC):
            raise ValueError(
                f"{value!r} is not an executable (ELF) file; point it at the k3s binary of the"
                " release (https://github.com/k3s-io/k3s/releases)"
            )
        return str(path)

    @field_validator("images_tarball")
    @classmethod
    def _archive(cls, value: str) -> str:
        path, head = _readable_file(value, "the images tarball")
        offset, magic = TAR_MAGIC
        if not (head[offset : offset + len(magic)] == magic or head.startswith(COMPRESSED_MAGIC)):
            raise ValueError(
                f"{value!r} is not a tar archive (plain, zstd or gzip); point it at the release's"
                " k3s-airgap-images-<arch>.tar.zst"
            )
        return str(path)


def _readable_file(value: str, what: str) -> tuple[Path, bytes]:
    """The resolved path of a regular file this process can read, and its first bytes."""
    path = Path(value).expanduser().resolve()
    fix = f"download {what} and point the key at it"
    try:
        mode = path.stat().st_mode
    except OSError:
        raise ValueError(f"{value!r} does not exist on this machine; {fix}") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{value!r} is not a regular file (a directory, device or pipe); {fix}")
    if mode & stat.S_IROTH == 0:
        # Copied to every node by Ansible: a file kept from others (/etc/shadow, a private key)
        # is nothing the lab should ship; a release file is readable by everyone.
        raise ValueError(
            f"{value!r} is kept from other users (mode {stat.S_IMODE(mode):04o}), as secrets are;"
            f" if it is {what}, `chmod a+r` it"
        )
    try:
        with path.open("rb") as handle:
            return path, handle.read(512)
    except OSError as err:
        raise ValueError(f"{value!r} cannot be read ({err.strerror}); {fix}") from None


class Trainer(_Model):
    """The DDP training run the StatefulSet executes."""

    model: Model = Field(default=Model.AIRBENCH, description="`airbench` (default) or `resnet9`.")
    replicas: int | None = Field(
        default=None,
        ge=1,
        description="Ranks, a GPU each on GPU labs; default: every GPU of the lab (with pack and no"
        " Kueue, the largest node's), one rank per node on CPU labs (docs/scaling.md).",
    )
    placement: Placement = Field(
        default=Placement.SPREAD, description="`spread` (pods on different nodes) or `pack` (fewest nodes)."
    )
    epochs: int | None = Field(
        default=None,
        **RULES["epochs"].bounds(),
        description="Epochs to train; default: the model's recipe (docs/trainer.md).",
    )
    batch_size: int = Field(
        default=1024,
        **RULES["batch_size"].bounds(),
        description="Global batch size, fixed whatever the world size; a multiple of the ranks,"
        " at most CIFAR-10's 50000 training images. Left out: 1024, or the nearest batch that splits"
        " evenly over the ranks when 1024 does not (1026 for 6), which `pulumi up` and `doctor` say.",
    )
    learning_rate: float | None = Field(
        default=None, **RULES["lr"].bounds(), description="Learning rate; default: the model's recipe."
    )
    seed: int = Field(
        default=0, **RULES["seed"].bounds(), description="Seed for data order, augmentation and init."
    )
    backend: Backend = Field(default=Backend.AUTO, description="`auto`, `nccl` or `gloo`.")
    compression: Compression = Field(
        default=Compression.NONE,
        description="Gradient compression for slow links: `none`, `fp16`, `bf16`, `powersgd`.",
    )
    target_accuracy: float = Field(
        default=0.94, **RULES["target_accuracy"].bounds(), description="Test accuracy whose time is reported."
    )
    port: int = Field(
        default=29500,
        ge=1024,
        le=65535,
        description="Rendezvous port (MASTER_PORT); not a port the cluster uses (6443, 10250,"
        " 8472, etcd's, the registry's), nor a NodePort with hostNetwork.",
    )
    host_network: bool = Field(
        default=False,
        description="Run ranks on the host network (faster collectives, node interfaces).",
    )
    # Above 2**31 - 1, tools that keep uids as signed 32-bit numbers misread it.
    uid: int = Field(
        default=10001,
        ge=TRAINER_UID_MIN,
        le=2**31 - 1,
        description="Non-root user the pods and the export use; not a login user of the hosts"
        f" (`labctl doctor` checks), not a system account or the first user (below {TRAINER_UID_MIN}),"
        f" not nobody ({NOBODY_UID}).",
    )
    checkpoint_keep: int = Field(
        default=3, **RULES["checkpoint_keep"].bounds(), description="Checkpoints kept per run."
    )

    @field_validator("uid")
    @classmethod
    def _not_nobody(cls, value: int) -> int:
        if value == NOBODY_UID:
            raise ValueError(
                f"{value} is nobody, whom the export maps every node's root to; use the default 10001"
            )
        return value

    @field_validator(
        "epochs", "batch_size", "learning_rate", "seed", "target_accuracy", "checkpoint_keep", mode="before"
    )
    @classmethod
    def _not_boolean(cls, value: Any) -> Any:
        # The number types would read `true` as 1.
        if isinstance(value, bool):
            raise ValueError(f"{str(value).lower()} is not a number")
        return value


# Sweep parameter names (camelCase, as in the stack file) and the trainer flag each one sets.
SWEEP_PARAMETERS = {
    "learningRate": "lr",
    "batchSize": "batch_size",
    "epochs": "epochs",
    "weightDecay": "weight_decay",
    "momentum": "momentum",
    "labelSmoothing": "label_smoothing",
    "model": "model",
}


class Range(_Model):
    """A continuous range for random search."""

    min: float
    max: float
    log: bool = Field(default=False, description="Sample uniformly in log space.")


class Sweep(_Model):
    """A hyperparameter search run as an Indexed Job, one set per completion index."""

    strategy: SweepStrategy = Field(default=SweepStrategy.GRID, description="`grid` or `random`.")
    samples: int | None = Field(default=None, ge=1, le=1000, description="Sets to draw (random).")
    seed: int = Field(default=0, ge=0, description="Seed of the random draw.")
    parallelism: int | None = Field(
        default=None, ge=1, description="Sets run at once; default and maximum: the lab's GPUs."
    )
    parameters: dict[str, list[float | int | str] | Range] = Field(
        description="Parameter name to a list of values (grid, random) or a range (random)."
    )

    @field_validator("parameters", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # Before the model's number types read `true` as 1.
        for name, values in value.items() if isinstance(value, dict) else ():
            for i, item in enumerate(values if isinstance(values, list) else ()):
                if isinstance(item, bool):
                    raise ValueError(
                        f"{name}: item {i + 1} is {str(item).lower()}; give a value of its range"
                    )
        return value

    @field_validator("parameters")
    @classmethod
    def _known(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("is empty; name at least one parameter, e.g. learningRate: [0.1, 0.2]")
        for name, values in value.items():
            if name not in SWEEP_PARAMETERS:
                raise ValueError(f"unknown parameter {name!r}; choose from {', '.join(SWEEP_PARAMETERS)}")
            if isinstance(values, list) and not values:
                raise ValueError(f"{name} has no values; give at least one")
            if isinstance(values, Range) and not values.min < values.max:
                raise ValueError(f"{name}: min must be below max")
            if isinstance(values, Range) and values.log and values.min <= 0:
                raise ValueError(f"{name}: a log range needs min > 0")
        return value

    def space(self) -> dict[str, Any]:
        """The search space in the trainer's sweep-file format (snake_case trainer flags), values
        as the trainer reads them (a `1e-3` the YAML file leaves as text becomes a number)."""
        params = {
            SWEEP_PARAMETERS[name]: v.model_dump()
            if isinstance(v, Range)
            else [check_hyperparameter(SWEEP_PARAMETERS[name], item) for item in v]
            for name, v in self.parameters.items()
        }
        return {
            "strategy": self.strategy.value,
            "samples": self.samples,
            "seed": self.seed,
            "parameters": params,
        }

    def size(self) -> int:
        """How many hyperparameter sets the space holds, counted by the trainer's own expansion."""
        return trainer_sweep.count(self.space())


class GangScheduler(StrEnum):
    KUEUE = "kueue"  # all-or-nothing admission of the training run and the sweep
    NONE = "none"


# Kueue supports Kubernetes 1.29 and later (https://kueue.sigs.k8s.io/docs/installation/).
KUEUE_MIN_K8S_MINOR = 29


class Scheduling(_Model):
    """How the training run and the sweep get their GPUs."""

    gang: GangScheduler | None = Field(
        default=None,
        description="`kueue` (installed by the lab; the default on Kubernetes 1.29 and later) or `none`"
        " (the default before 1.29): see docs/scaling.md.",
    )


class Observability(_Model):
    """Prometheus, Grafana and the exporters that watch the lab train (docs/observability.md)."""

    enabled: bool = Field(default=True, description="Install the monitoring stack; `false` leaves it out.")
    metrics_port: int = Field(
        default=9464,
        ge=1024,
        # Below the ephemeral range the ranks' collectives use (EPHEMERAL_PORTS).
        le=EPHEMERAL_PORTS[0] - 1,
        description="Port each rank serves its Prometheus metrics on; not the rendezvous port.",
    )


class LabConfig(_Model):
    """Everything one stack says about the lab."""

    distribution: Distribution = Field(default=Distribution.K3S, description="`k3s` or `kubeadm`.")
    kubernetes_version: str = Field(
        default="1.33.5", description="Kubernetes release MAJOR.MINOR.PATCH (1.25 to 1.37)."
    )
    nodes: list[Node] = Field(min_length=1, description="The machines; exactly one is `server`.")
    ssh: Ssh = Field(default_factory=Ssh)
    nfs: Nfs = Field(default_factory=Nfs)
    registry: Registry = Field(default_factory=Registry)
    airgap: Airgap | None = Field(default=None, description="k3s only: install from local files.")
    namespace: DnsLabel = Field(
        default="k8scifar",
        description="Namespace of every lab object; not default, kube-system, kube-public,"
        " kube-node-lease or another kube-* one; at most"
        f" {DNS_LABEL_MAX - max(map(len, DERIVED_NAMESPACE_SUFFIXES))} characters, as the lab's"
        f" {' and '.join(f'<namespace>{x}' for x in DERIVED_NAMESPACE_SUFFIXES)} are DNS labels too.",
    )
    trainer: Trainer = Field(default_factory=Trainer)
    sweep: Sweep | None = Field(default=None, description="Optional hyperparameter sweep.")
    scheduling: Scheduling = Field(default_factory=Scheduling)
    observability: Observability = Field(default_factory=Observability)
    skip: dict[SkipStep, Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=dict,
        description="Steps to leave out, each mapped to the reason printed when it is skipped"
        " (for test machines that cannot run them, never for a real lab).",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        # Numbers as Kubernetes writes them: no leading zeros, so one release has one spelling.
        match = re.fullmatch(r"v?1\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})", value)
        if not match:
            raise ValueError(f"{value!r} is not a release such as 1.33.5 (numbers without leading zeros)")
        minor, patch = int(match.group(1)), int(match.group(2))
        if minor not in KNOWN_PATCHES:
            raise ValueError(
                f"{value!r} is outside the supported 1.{min(KNOWN_PATCHES)} to 1.{max(KNOWN_PATCHES)}"
            )
        if patch > KNOWN_PATCHES[minor]:
            raise ValueError(
                f"{value!r} is not a release the lab knows: the newest 1.{minor} patch it knows is"
                f" 1.{minor}.{KNOWN_PATCHES[minor]}; use that, or, once Kubernetes has released"
                f" 1.{minor}.{patch} (https://kubernetes.io/releases/), raise KNOWN_PATCHES in lab/config.py"
            )
        return value.removeprefix("v")

    @field_validator("namespace")
    @classmethod
    def _room_for_derived(cls, value: str) -> str:
        longest = max(DERIVED_NAMESPACE_SUFFIXES, key=len)
        if len(value) + len(longest) > DNS_LABEL_MAX:
            raise ValueError(
                f"{value!r} has {len(value)} characters: the lab's {value}{longest} namespace would"
                f" exceed {DNS_LABEL_MAX}; use at most {DNS_LABEL_MAX - len(longest)}"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NAMESPACES or value.startswith(RESERVED_NAMESPACE_PREFIX):
            raise ValueError(
                f"{value!r} is a namespace Kubernetes reserves for itself; use one of the lab's own"
                " such as k8scifar"
            )
        return value

    # Derived facts the rest of the lab reads instead of recomputing.

    @property
    def server(self) -> Node:
        return next(n for n in self.nodes if n.role is Role.SERVER)

    @property
    def agents(self) -> list[Node]:
        return [n for n in self.nodes if n.role is Role.AGENT]

    @property
    def nfs_server(self) -> Node:
        name = self.nfs.server or self.server.name
        return next(n for n in self.nodes if n.name == name)

    @property
    def nfs_allowed_networks(self) -> list[str]:
        if self.nfs.allowed_networks is not None:
            return self.nfs.allowed_networks
        return [str(ipaddress.ip_network(n.address)) for n in self.nodes]

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])

    @property
    def gang_scheduler(self) -> GangScheduler:
        """As configured, else Kueue wherever the cluster is new enough for it."""
        if self.scheduling.gang is not None:
            return self.scheduling.gang
        minor = int(self.kubernetes_version.split(".")[1])
        return GangScheduler.KUEUE if minor >= KUEUE_MIN_K8S_MINOR else GangScheduler.NONE

    @property
    def gpu_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.gpus > 0]

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_nodes)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def registry_endpoint(self) -> str:
        """host:port every node's container runtime pulls the trainer image from."""
        return f"{self.server.address}:{self.registry.port}"

    @property
    def installs_kubernetes(self) -> bool:
        """False on machines that skip the Kubernetes install: there is no cluster to declare into."""
        return SkipStep.KUBERNETES_INSTALL not in self.skip

    @property
    def packs_by_topology(self) -> bool:
        """Whether Kueue's topology-aware scheduling packs the ranks' pods (lab.world)."""
        return (
            self.trainer.placement is Placement.PACK
            and self.has_gpus
            and self.gang_scheduler is GangScheduler.KUEUE
        )

    @property
    def world(self) -> World:
        """The training run's ranks and pods: as configured, else as many ranks as the placement allows."""
        pack = self.trainer.placement is Placement.PACK
        return plan([n.gpus for n in self.nodes], pack, self.packs_by_topology, self.trainer.replicas)

    @property
    def replicas(self) -> int:
        """Ranks of the training run (the world size)."""
        return self.world.ranks

    @property
    def batch_set_by_stack(self) -> bool:
        return "batch_size" in self.trainer.model_fields_set

    @property
    def batch_size(self) -> int:
        """The global batch the run trains with: the stack's, else the default or the nearest that
        splits evenly over the ranks (lab.batch)."""
        return global_batch(self.trainer.batch_size, self.batch_set_by_stack, self.replicas)

    @property
    def batch_note(self) -> str | None:
        """The sentence that says the lab chose the batch, when it did."""
        return chosen_note(self.trainer.batch_size, self.batch_set_by_stack, self.replicas)

    @property
    def max_replicas(self) -> int:
        """Ranks the lab can place: a rank needs a whole GPU on GPU labs (lab.world)."""
        pack = self.trainer.placement is Placement.PACK
        return capacity([n.gpus for n in self.nodes], pack, self.packs_by_topology)

    @property
    def backend(self) -> str:
        if self.trainer.backend is Backend.AUTO:
            return Backend.NCCL.value if self.has_gpus else Backend.GLOO.value
        return self.trainer.backend.value

    @property
    def sweep_parallelism(self) -> int:
        limit = self.total_gpus if self.has_gpus else len(self.nodes)
        return min(self.sweep.parallelism or limit, limit) if self.sweep else 0


def _cross_checks(cfg: LabConfig) -> list[str]:
    """Rules that involve more than one key; each problem names its key and the fix."""
    problems: list[str] = []
    names = [n.name for n in cfg.nodes]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"k8scifar:nodes: two nodes are named {name!r}; give each node its own name")
    addresses = [n.address for n in cfg.nodes]
    loopback = [n.name for n in cfg.nodes if ipaddress.ip_address(n.address).is_loopback]
    if len(loopback) > 1:
        # Every loopback address is this machine: they are one node (`labctl doctor` finds nodes
        # that share a machine under other addresses).
        problems.append(
            f"k8scifar:nodes: {', '.join(loopback)} have loopback addresses, which are all this one"
            " machine; give each node the address of its own machine"
        )
    elif loopback and len(cfg.nodes) > 1:
        # A node on a loopback address is one machine, which no other node can reach there.
        problems.append(
            f"k8scifar:nodes: {', '.join(loopback)} has a loopback address, which the other nodes"
            " cannot reach; use its address on the lab's network"
        )
    for addr in sorted({a for a in addresses if addresses.count(a) > 1}):
        problems.append(f"k8scifar:nodes: two nodes share the address {addr}; each node needs its own")
    servers = [n.name for n in cfg.nodes if n.role is Role.SERVER]
    if len(servers) != 1:
        problems.append(
            f"k8scifar:nodes: {len(servers)} nodes have role server ({', '.join(servers) or 'none'});"
            " exactly one node must be the server, the others agents"
        )
        return problems  # the checks below need the server
    if cfg.nfs.server is not None and cfg.nfs.server not in names:
        problems.append(
            f"k8scifar:nfs.server: {cfg.nfs.server!r} is not a node; use one of {', '.join(names)}"
        )
    if cfg.nfs.allowed_networks is not None:
        problems.extend(_network_checks(cfg))
    if cfg.airgap is not None and cfg.distribution is not Distribution.K3S:
        problems.append("k8scifar:airgap: only k3s installs from local files; remove it or use k3s")
    if cfg.trainer.backend is Backend.NCCL and not cfg.has_gpus:
        problems.append("k8scifar:trainer.backend: nccl needs GPUs and no node has any; use gloo or auto")
    if cfg.trainer.replicas is not None and cfg.trainer.replicas > cfg.max_replicas:
        problems.append(_placement_problem(cfg, cfg.trainer.replicas))
    # Left out, the batch is the default or the nearest that splits (lab.batch): only the stack's is refused.
    if cfg.batch_set_by_stack and cfg.trainer.batch_size % cfg.replicas:
        problems.append(
            f"k8scifar:trainer.batchSize: {cfg.trainer.batch_size} does not split evenly over"
            f" {cfg.replicas} ranks; use {nearest_batch(cfg.trainer.batch_size, cfg.replicas)},"
            f" the nearest multiple of {cfg.replicas}"
        )
    problems.extend(_port_checks(cfg))
    problems.extend(_metrics_port_checks(cfg))
    if cfg.sweep is not None:
        problems.extend(_sweep_checks(cfg))
    minor = int(cfg.kubernetes_version.split(".")[1])
    if cfg.scheduling.gang is GangScheduler.KUEUE and minor < KUEUE_MIN_K8S_MINOR:
        problems.append(
            f"k8scifar:scheduling.gang: Kueue needs Kubernetes 1.{KUEUE_MIN_K8S_MINOR} or later and the lab"
            f" runs {cfg.kubernetes_version}; use none or a newer kubernetesVersion"
        )
    return problems


def _placement_problem(cfg: LabConfig, replicas: int) -> str:
    """Why `replicas` ranks do not fit; on a GPU lab the count comes from the nodes' gpus keys,
    which are named, for the cause may lie there (a node left without its gpus)."""
    gpus = ", ".join(
        f"{n.name} has {n.gpus} (k8scifar:nodes[{cfg.nodes.index(n)}].gpus)" for n in cfg.gpu_nodes
    )
    if cfg.has_gpus and (cfg.trainer.placement is Placement.SPREAD or cfg.packs_by_topology):
        why = f"a rank needs a GPU of its own and the lab has {cfg.max_replicas} ({gpus})"
        fix = "give the other nodes their gpus, "
    elif cfg.trainer.placement is Placement.SPREAD:
        why, fix = f"spread puts one rank per node and the lab has {cfg.max_replicas} nodes", ""
    elif cfg.has_gpus:
        why = (
            f"pack without Kueue puts every rank in one pod on one node and the largest holds"
            f" {cfg.max_replicas} GPUs ({gpus})"
        )
        fix = "use scheduling.gang: kueue to pack over several nodes, "
    else:
        why = f"pack puts every rank on one node, {CPU_PACK_RANKS} at most on a CPU node"
        fix = ""
    return (
        f"k8scifar:trainer.replicas: {replicas} ranks cannot be placed: {why};"
        f" set replicas to at most {cfg.max_replicas}, {fix}or change placement"
    )


def _network_checks(cfg: LabConfig) -> list[str]:
    """Every node can mount, and only networks that hold a node, no wider than allowed, may."""
    problems = []
    nets = [ipaddress.ip_network(c) for c in cfg.nfs_allowed_networks]
    ips = {n.name: ipaddress.ip_address(n.address) for n in cfg.nodes}
    for node in cfg.nodes:
        if not any(ips[node.name] in net for net in nets if net.version == 4):
            problems.append(
                f"k8scifar:nfs.allowedNetworks: node {node.name} ({node.address}) is in none of"
                f" {', '.join(cfg.nfs_allowed_networks)}; it could not mount the share"
            )
    for net in nets:
        if not any(net.version == 4 and ip in net for ip in ips.values()):
            problems.append(
                f"k8scifar:nfs.allowedNetworks: {net} holds no node, so it only lets other"
                " machines mount the export; remove it"
            )
        elif net.prefixlen < WIDEST_NETWORK_PREFIX and not cfg.nfs.allow_wide_networks:
            problems.append(
                f"k8scifar:nfs.allowedNetworks: {net} lets {net.num_addresses} addresses mount the"
                f" export read-write; list the nodes' /{WIDEST_NETWORK_PREFIX} or their /32s, or set"
                " nfs.allowWideNetworks: true if every host in it may"
            )
    return problems


def cluster_ports(cfg: LabConfig, node: Node) -> dict[tuple[int, str], str]:
    """(port, protocol) -> purpose, for the ports the cluster itself listens on at this node."""
    ports = dict(NODE_PORTS)
    ports[(cfg.registry.port, "tcp")] = "registry NodePort"
    if node.role is Role.SERVER:
        ports |= SERVER_PORTS
        if cfg.distribution is Distribution.KUBEADM:
            ports |= KUBEADM_SERVER_PORTS
    if node.name == cfg.nfs_server.name:
        ports |= NFS_PORT
    return ports


def _port_checks(cfg: LabConfig) -> list[str]:
    """The rendezvous port is none the cluster uses, on any node and under any distribution; on
    the host network it must also miss SSH and the NodePorts kube-proxy may hold."""
    port = cfg.trainer.port
    taken = NODE_PORTS | SERVER_PORTS | KUBEADM_SERVER_PORTS | NFS_PORT
    taken[(cfg.registry.port, "tcp")] = "registry NodePort"
    users = sorted({why for (number, _), why in taken.items() if number == port})
    if cfg.trainer.host_network:
        if port == cfg.ssh.port:
            users.append("SSH")
        if port in NODE_PORT_RANGE and not users:
            users.append(f"the NodePort range {NODE_PORT_RANGE.start}-{NODE_PORT_RANGE.stop - 1}")
    if not users:
        return []
    return [
        f"k8scifar:trainer.port: {port} collides with {' and '.join(users)}; choose a free port"
        " such as the default 29500"
    ]


def _metrics_port_checks(cfg: LabConfig) -> list[str]:
    port = cfg.observability.metrics_port
    if port != cfg.trainer.port:
        return []
    return [
        f"k8scifar:observability.metricsPort: {port} is also trainer.port, where rank 0's rendezvous"
        " listens; choose another port such as the default 9464"
    ]


def _sweep_checks(cfg: LabConfig) -> list[str]:
    sweep = cfg.sweep
    assert sweep is not None
    problems = []
    ranges = [name for name, v in sweep.parameters.items() if isinstance(v, Range)]
    if sweep.strategy is SweepStrategy.GRID:
        if ranges:
            problems.append(
                f"k8scifar:sweep.parameters: {', '.join(ranges)} is a range, which a grid cannot"
                " enumerate; give a list of values or use strategy: random"
            )
        if sweep.samples is not None:
            problems.append("k8scifar:sweep.samples: only random search draws samples; remove it")
    elif sweep.samples is None:
        problems.append("k8scifar:sweep.samples: random search needs the number of sets to draw")
    for name, values in sweep.parameters.items():
        flag = SWEEP_PARAMETERS[name]
        items = (
            [(f"item {i + 1}", v) for i, v in enumerate(values)]
            if isinstance(values, list)
            else [("min", values.min), ("max", values.max)]
        )
        for where, value in items:
            try:
                check_hyperparameter(flag, value)
            except HyperparameterError as err:
                problems.append(f"k8scifar:sweep.parameters.{name}: {where} {err}")
    if not problems:
        problems.extend(_sweep_size_checks(sweep))
    limit = cfg.total_gpus if cfg.has_gpus else len(cfg.nodes)
    if sweep.parallelism is not None and sweep.parallelism > limit:
        problems.append(
            f"k8scifar:sweep.parallelism: {sweep.parallelism} exceeds the {limit}"
            f" {'GPUs' if cfg.has_gpus else 'nodes'} of the lab; lower it or leave it out"
        )
    return problems


def _sweep_size_checks(sweep: Sweep) -> list[str]:
    """The sets fit one Indexed Job and the sweep file one ConfigMap."""
    space = sweep.space()
    try:
        sets = trainer_sweep.count(space)
    except trainer_sweep.SweepError as err:
        return [f"k8scifar:sweep: {err}"]
    if sets > trainer_sweep.MAX_SETS:
        return [
            f"k8scifar:sweep.parameters: the grid holds {sets} sets, more than the"
            f" {trainer_sweep.MAX_SETS} completions of one Indexed Job; give fewer values"
        ]
    size = len(trainer_sweep.sweep_file_text(space).encode())
    if size > trainer_sweep.MAX_FILE_BYTES:
        return [
            f"k8scifar:sweep: its {sets} sets make a sweep file of {size} bytes, more than the"
            f" {trainer_sweep.MAX_FILE_BYTES} a ConfigMap holds; give fewer values or samples"
        ]
    return []


def _path(loc: tuple[int | str, ...]) -> str:
    out = "k8scifar:"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if i else "") + part
    return out


def _trainer_rule(loc: tuple[int | str, ...]) -> Rule | None:
    """The hyperparameter rule of a `trainer.*` key, which the trainer's flag enforces too."""
    if len(loc) != 2 or loc[0] != "trainer" or not isinstance(loc[1], str):
        return None
    return RULES.get(SWEEP_PARAMETERS.get(loc[1]) or to_snake(loc[1]))


def _shown(value: Any) -> str:
    """`value` as a message quotes it: its repr, cut short when long (a 5000-digit number)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters)"


def _unquoted_word(value: bool, expected: str) -> str | None:
    """The word an unquoted YAML boolean was probably meant to be, when the key accepts it."""
    return next((w for w in YAML_BOOLEAN_WORDS[value] if f"'{w}'" in expected), None)


def _choice(err: Mapping[str, Any], message: str) -> str:
    """A value outside a key's choices, the choices as written (a YAML boolean explained)."""
    value, expected = err.get("input"), str(err.get("ctx", {}).get("expected", ""))
    choices = message[0].lower() + message[1:]
    if isinstance(value, bool):
        word = _unquoted_word(value, expected)
        words = YAML_BOOLEAN_WORDS[value]
        written = f"an unquoted {word or ', '.join(words[:-1]) + ' or ' + words[-1]}"
        fix = f'write it in quotes: "{word}"' if word else choices
        return f"{written} reads as {str(value).lower()} in YAML; {fix}"
    return f"{_shown(value)}: {choices}"


def _describe(err: Mapping[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if p not in {"list[union[float,int,str]]", "Range", "[key]"})
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{_path(loc)}: unknown key; check its spelling against docs/configuration.md"
    if kind == "missing":
        return f"{_path(loc)}: required key is missing"
    message = str(err["msg"]).removeprefix("Value error, ")
    rule = _trainer_rule(loc)
    if err["loc"][-1:] == ("[key]",):
        expected = err.get("ctx", {}).get("expected", "")
        message = f"unknown key; the keys are {expected}" if expected else message
    elif rule is not None and "input" in err:
        message = f"must be {rule.describe()}, got {_shown(err['input'])}"
    elif kind.startswith("string_pattern"):
        pattern = err.get("ctx", {}).get("pattern")
        message = f"{_shown(err.get('input'))} is not {PATTERN_RULES.get(pattern, f'of the form {pattern}')}"
    elif kind in {"enum", "literal_error"}:
        message = _choice(err, message)
    elif kind == "int_parsing_size":
        message = f"a number of {len(str(err.get('input')))} digits, far beyond what the key takes"
    elif "input" in err and kind not in {"value_error", "assertion_error"}:
        message = f"{message} (got {_shown(err['input'])})"
    return f"{_path(loc)}: {message}"


def parse_config(values: Mapping[str, Any], source: str = "stack configuration") -> LabConfig:
    """Validate `k8scifar:*` values (prefix already stripped); raise ConfigError naming every problem."""
    try:
        cfg = LabConfig.model_validate(dict(values))
    except ValidationError as exc:
        problems = list(dict.fromkeys(_describe(e) for e in exc.errors()))
        raise ConfigError(source, problems) from None
    problems = _cross_checks(cfg)
    if problems:
        raise ConfigError(source, problems)
    return cfg


def check_stack_name(stack: str) -> str:
    """`stack` when it is a stack name by Pulumi's rule and names no folder; ConfigError otherwise."""
    if not STACK_NAME.fullmatch(stack) or stack in {".", ".."}:
        raise ConfigError(
            "stack name",
            [
                f"{stack!r} is not one: use 1 to 100 letters, digits, '_', '.' and '-' (Pulumi's rule),"
                " other than . and .., such as lab"
            ],
        )
    return stack


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{check_stack_name(stack)}.yaml"


def stack_flags(stack: str, stacks_dir: Path = STACKS_DIR) -> str:
    """The `labctl` flags that name a stack, `--stacks-dir` only where it is not stacks/."""
    where = "" if Path(stacks_dir).resolve() == STACKS_DIR else f" --stacks-dir {stacks_dir}"
    return f"--stack {stack}{where}"


def read_stack_values(path: Path) -> dict[str, Any]:
    """The `k8scifar:*` values of a stack file, prefix stripped; ConfigError when unreadable."""
    if not path.is_file():
        existing = ", ".join(all_stacks(path.parent)) or "none"
        raise ConfigError(
            str(path),
            [f"no such stack file; existing stacks: {existing} (create one with `labctl init`)"],
        )
    doc = load_yaml(path) or {}
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(str(path), ["has no `config:` mapping with k8scifar:* keys"])
    values: dict[str, Any] = {}
    problems = []
    for key, value in config.items():
        namespace, name = _config_key(str(key))
        if not name:
            problems.append(f"{key}: keys must be written {PROJECT}:NAME, or NAMESPACE:NAME for others' keys")
        elif namespace != PROJECT and get_close_matches(namespace, [PROJECT], cutoff=0.75):
            problems.append(f"{key}: no such namespace {namespace!r}; the lab's keys are {PROJECT}:{name}")
        elif namespace == PROJECT and _encrypted(value):
            problems.append(_encrypted_problem(f"{PROJECT}:{name}"))
        elif namespace == PROJECT:
            values[name] = value
        # Other namespaces' keys (kubernetes:*, pulumi:*, a provider's) are theirs, as in `pulumi up`.
    if problems:
        raise ConfigError(str(path), problems)
    return values


def _config_key(key: str) -> tuple[str, str]:
    """(namespace, name) as Pulumi reads a stack file's key: `NAMESPACE:NAME`, or the older
    `NAMESPACE:config:NAME` (pulumi/pulumi sdk/go/common/resource/config/key.go, ParseKey); a
    name of "" when the key is neither."""
    parts = key.split(":")
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    if len(parts) == 3 and parts[1] == "config" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return key, ""


def _encrypted(value: Any) -> bool:
    """Whether `value` holds a `secure:` value anywhere (Pulumi writes `{secure: CIPHERTEXT}`)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if list(item) == ["secure"] and isinstance(item["secure"], str):
                return True
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


def _encrypted_problem(key: str) -> str:
    # Every value of the lab ends up in plain text in the inventory, the state and on the nodes:
    # encrypting it in the stack file would only pretend to keep it secret.
    return (
        f"{key}: is stored encrypted (secure:), but the lab keeps no value of its stack"
        " file secret; set it in plain text (`pulumi config set` without --secret)"
    )


class _UnreadableValue(yaml.constructor.ConstructorError):
    """Valid YAML holding a value Python cannot read."""


class _StackLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping instead of keeping the
    last value (YAML 1.2.2, 3.2.1.1: the keys of a mapping are unique)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are overridden by the mapping's own keys on purpose
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # unhashable: SafeLoader itself refuses it, with its position
            if key in seen:
                first = seen[key]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}); keep one of them",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # Python refuses to read an integer of more than 4300 digits (sys.get_int_max_str_digits).
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _UnreadableValue(
                None,
                None,
                f"a number of {len(str(node.value))} digits, far beyond what any key takes;"
                " write the value the key needs",
                node.start_mark,
            ) from None


_StackLoader.add_constructor("tag:yaml.org,2002:int", _StackLoader.construct_yaml_int)


def load_yaml(path: Path) -> Any:
    """A YAML file's content; ConfigError naming the file, line and column when it cannot be read."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}:{column}",
            [f"byte 0x{data[err.start]:02x} is not UTF-8 text; save the file as UTF-8"],
        ) from None
    try:
        return yaml.load(text, Loader=_StackLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(str(err.problem or err.context or "unreadable").split())
        fix = "" if ";" in problem else "; fix the file at that position"
        kind = "" if isinstance(err, _UnreadableValue) else "not valid YAML: "
        raise ConfigError(where, [f"{kind}{problem}{fix}"]) from None
    except yaml.YAMLError as err:
        raise ConfigError(str(path), [f"not valid YAML: {' '.join(str(err).split())}"]) from None
    except RecursionError:
        raise ConfigError(
            str(path),
            [
                "nested too deeply to read (lists or mappings inside each other); a stack file"
                " needs a few levels at most"
            ],
        ) from None


def load_stack(stack: str, stacks_dir: Path = STACKS_DIR) -> LabConfig:
    """The validated configuration of `stacks/Pulumi.<stack>.yaml`."""
    path = stack_file(stack, stacks_dir)
    return parse_config(read_stack_values(path), source=str(path))


def from_pulumi() -> LabConfig:
    """The validated configuration of the running Pulumi stack, every `k8scifar:*` key of it.

    The language host hands the program the stack's whole configuration as strings, objects and
    lists as JSON, `secure:` values decrypted, their keys listed as secret, in PULUMI_CONFIG and
    PULUMI_CONFIG_SECRET_KEYS (pulumi/pulumi: sdk/python/cmd/pulumi-language-python/main.go), and
    the SDK's launcher loads both before the program starts (sdk/python/cmd/
    pulumi-language-python-exec: set_all_config). Keys of other namespaces (`kubernetes:*`,
    `pulumi:*`) belong to others and are left alone.
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    check_stack_name(pulumi.get_stack())
    prefix = f"{PROJECT}:"
    names = set(runtime_config.get_config_env()) | set(runtime_config.CONFIG.get())
    values: dict[str, Any] = {}
    problems = []
    for key in sorted(k for k in names if k.startswith(prefix)):
        if runtime_config.is_config_secret(key):
            problems.append(_encrypted_problem(key))
            continue
        values[key.removeprefix(prefix)] = _from_text(runtime_config.get_config(key))
    source = f"stack {pulumi.get_stack()!r}"
    if problems:
        raise ConfigError(source, problems)
    return parse_config(values, source=source)


def _from_text(raw: str) -> Any:
    """A value as the stack file holds it: objects and lists come as JSON, scalars as their text,
    which the model converts as it converts the stack file's own scalars."""
    if raw.lstrip().startswith(("{", "[")):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def all_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    names = (p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml"))
    return sorted(name for name in names if STACK_NAME.fullmatch(name) and name not in {".", ".."})


__all__ = [
    "SWEEP_PARAMETERS",
    "ConfigError",
    "LabConfig",
    "Node",
    "all_stacks",
    "check_stack_name",
    "cluster_ports",
    "from_pulumi",
    "load_stack",
    "parse_config",
    "read_stack_values",
    "stack_file",
]
