"""The machines of a lab and how the lab reaches them: nodes, SSH, the NFS export, the registry's
port and the files of an air-gapped install."""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from lab.config.facts import (
    ANSIBLE_HOST_NAMES,
    CNI_PLUGINS_RELEASES,
    COMPRESSED_MAGIC,
    ELF_MAGIC,
    EXPORT_PATH,
    EXPORT_PATH_MAX,
    FLANNEL_DAEMONSET,
    FLANNEL_RELEASES,
    GZIP_MAGIC,
    IMAGE_TAG,
    K3S_RELEASES,
    KEY_PATH_UNSAFE,
    KUBERNETES_RELEASE_BINARIES,
    MAX_NODE_GPUS,
    NAME_MAX,
    NODE_PORT_RANGE,
    OWNED_PARENTS,
    SYSTEM_TREES,
    TAR_MAGIC,
    USER_NAME,
    WIDEST_NETWORK_PREFIX,
)
from lab.config.keys import DnsLabel, InterfaceName, KeyModel


class Distribution(StrEnum):
    K3S = "k3s"
    KUBEADM = "kubeadm"


class Role(StrEnum):
    SERVER = "server"
    AGENT = "agent"


class HostKeyPolicy(StrEnum):
    ACCEPT_NEW = "accept-new"  # trust on first contact, refuse a changed key
    STRICT = "strict"  # the key must already be in known_hosts
    OFF = "off"  # no checking: only for throw-away test machines


class SkipStep(StrEnum):
    """Bootstrap steps a machine may be unable to run; each is skipped with its stated reason."""

    KUBERNETES_INSTALL = "kubernetesInstall"  # installing and starting k3s/kubeadm, node labels
    NFS_SERVER_START = "nfsServerStart"  # starting the kernel NFS server


class Node(KeyModel):
    """One machine of the lab, reachable over SSH."""

    name: DnsLabel = Field(
        description="Kubernetes node name and inventory host name (DNS label); not one Ansible reads"
        " as a group or as the machine it runs on (all, localhost, the inventory's groups)."
    )
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

    @field_validator("name")
    @classmethod
    def _not_an_ansible_pattern(cls, value: str) -> str:
        # Imported here: the inventory is built from this configuration, so it imports lab.config.
        from lab.bootstrap.inventory import INVENTORY_GROUPS

        meaning = ANSIBLE_HOST_NAMES.get(value)
        if meaning is None and value in INVENTORY_GROUPS:
            meaning = "a group of the lab's inventory"
        if meaning is not None:
            raise ValueError(
                f"{value!r} is {meaning}, which Ansible would take this node for, running the plays"
                f" meant for it on this node alone; name the node otherwise, such as {value}-1"
            )
        return value

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


class Ssh(KeyModel):
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
        fix = "point it at the private key the nodes accept, such as ~/.ssh/id_ed25519"
        if not value.strip():
            raise ValueError(f"is empty; {fix}")
        found = KEY_PATH_UNSAFE.search(value)
        if found is not None:
            raise ValueError(
                f"{value!r} holds {found.group()!r}, which ssh reads specially in a key path;"
                " move or link the key to a path without it"
            )
        # ssh and Ansible expand `~user` where the playbook runs, which is this machine.
        expanded = os.path.expanduser(value)
        if value.startswith("~") and expanded == value:
            user = value[1:].partition("/")[0]
            raise ValueError(
                f"{value!r} starts with the home of {user!r}, a user this machine does not know;"
                " write the key's path in full"
            )
        if os.path.lexists(expanded) and not os.path.isfile(expanded):
            raise ValueError(f"{value!r} is not a regular file (a folder, a pipe or a device); {fix}")
        return value


class Nfs(KeyModel):
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
        # Python keeps a leading `//` as a root of its own (POSIX leaves its meaning to the
        # system), so `//etc` would not be inside /etc; Linux reads it as `/`.
        path = Path("/" + value.lstrip("/")) if value.startswith("/") else Path(value)
        fix = "use a directory for the lab alone, such as /srv/k8scifar"
        if not path.is_absolute() or ".." in path.parts or path == Path("/"):
            raise ValueError(f"{value!r} must be an absolute directory below / such as /srv/k8scifar")
        if not re.fullmatch(EXPORT_PATH, value):
            raise ValueError(
                f"{value!r} holds a character other than letters, digits, '.', '_', '-' and '/',"
                f" which breaks the exports line; {fix}"
            )
        long = next((part for part in path.parts if len(part.encode()) > NAME_MAX), None)
        if long is not None:
            raise ValueError(
                f"{value[:40]!r}... holds a folder name of {len(long.encode())} bytes, longer than the"
                f" {NAME_MAX} Linux takes; {fix}"
            )
        if len(str(path).encode()) > EXPORT_PATH_MAX:
            raise ValueError(
                f"{value[:40]!r}... is {len(str(path).encode())} bytes long, longer than the"
                f" {EXPORT_PATH_MAX} an NFS export may be; {fix}"
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


class Registry(KeyModel):
    """The in-cluster registry the trainer image is built into and pulled from over plain HTTP."""

    port: int = Field(
        default=30500,
        ge=NODE_PORT_RANGE.start,
        le=NODE_PORT_RANGE.stop - 1,
        description="NodePort the nodes pull from (30000-32767).",
    )


class KubeadmAirgap(KeyModel):
    """Install kubeadm from local files: the release's binaries, the CNI plugins, the images
    `kubeadm init` and flannel run, and flannel's manifest (docs/hosts.md, "Offline kubeadm")."""

    kubeadm: str = Field(
        description="Path to the kubeadm binary of kubernetesVersion (an ELF executable, readable by all)."
    )
    kubelet: str = Field(
        description="Path to the kubelet binary of kubernetesVersion (an ELF executable, readable by all)."
    )
    kubectl: str = Field(
        description="Path to the kubectl binary of kubernetesVersion (an ELF executable, readable by all)."
    )
    cni_plugins: str = Field(
        description="Path to the CNI plugins release, cni-plugins-linux-<arch>-v<version>.tgz (a gzip tar"
        " archive, readable by all), unpacked into /opt/cni/bin."
    )
    images: list[str] = Field(
        min_length=1,
        description="Paths to image archives `ctr images import` reads: plain tar files made by"
        " `docker save`, `podman save` or `ctr images export` (docker-archive or OCI layout), readable by"
        " all, holding every image `kubeadm config images list` names and flannel's.",
    )
    flannel_manifest: str = Field(
        description="Path to flannel's kube-flannel.yml, applied instead of downloading the pinned"
        " release (a YAML file with the kube-flannel-ds DaemonSet, readable by all)."
    )
    coredns_tag: str | None = Field(
        default=None,
        description="CoreDNS image tag the archives carry when it is not kubeadm's default"
        " (dns.imageTag of kubeadm's ClusterConfiguration).",
    )
    etcd_tag: str | None = Field(
        default=None,
        description="etcd image tag the archives carry when it is not kubeadm's default"
        " (etcd.local.imageTag of kubeadm's ClusterConfiguration).",
    )

    @field_validator("kubeadm", "kubelet", "kubectl")
    @classmethod
    def _executable(cls, value: str, info: ValidationInfo) -> str:
        return _elf(value, f"the {info.field_name} binary", KUBERNETES_RELEASE_BINARIES)

    @field_validator("cni_plugins")
    @classmethod
    def _plugins(cls, value: str) -> str:
        path, head = _readable_file(value, "the CNI plugins release")
        if not head.startswith(GZIP_MAGIC):
            raise ValueError(
                f"{value!r} is not a gzip tar archive; point it at cni-plugins-linux-<arch>-v<version>.tgz"
                f" ({CNI_PLUGINS_RELEASES})"
            )
        return str(path)

    @field_validator("images")
    @classmethod
    def _archives(cls, value: list[str]) -> list[str]:
        paths = []
        for item in value:
            path, head = _readable_file(item, "the image archive")
            offset, magic = TAR_MAGIC
            if head[offset : offset + len(magic)] != magic:
                raise ValueError(
                    f"{item!r} is not a plain tar archive, which `ctr images import` reads; write it with"
                    " `docker save -o FILE.tar IMAGE...` (decompress a .tar.gz or .tar.zst first)"
                )
            paths.append(str(path))
        return paths

    @field_validator("flannel_manifest")
    @classmethod
    def _manifest(cls, value: str) -> str:
        path, _head = _readable_file(value, "flannel's kube-flannel.yml")
        fix = f"point it at the kube-flannel.yml of flannel's release ({FLANNEL_RELEASES})"
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            raise ValueError(f"{value!r} is not a YAML file; {fix}") from None
        # The role points flanneld at the stack's interfaces by this DaemonSet's name and namespace.
        found = any(
            isinstance(d, dict)
            and d.get("kind") == "DaemonSet"
            and isinstance(d.get("metadata"), dict)
            and (d["metadata"].get("namespace"), d["metadata"].get("name")) == FLANNEL_DAEMONSET
            for d in documents
        )
        if not found:
            namespace, name = FLANNEL_DAEMONSET
            raise ValueError(
                f"{value!r} has no DaemonSet {namespace}/{name}, as flannel's manifest does; {fix}"
            )
        return str(path)

    @field_validator("coredns_tag", "etcd_tag")
    @classmethod
    def _tag(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(IMAGE_TAG, value):
            raise ValueError(
                f"{value!r} is not an image tag (letters, digits, '_', '.', '-', at most 128, not starting"
                " with '.' or '-'); write the tag alone, such as v1.12.0, without the image's name"
            )
        return value


class Airgap(KeyModel):
    """Install Kubernetes from local files instead of the internet: k3s's two files, or kubeadm's
    under `kubeadm`."""

    k3s_binary: str | None = Field(
        default=None,
        alias="k3sBinary",
        description="k3s: path on the operator's machine to the k3s binary (an ELF executable, readable"
        " by all).",
    )
    images_tarball: str | None = Field(
        default=None,
        description="k3s: path to k3s-airgap-images-<arch>.tar(.zst) (a tar archive, plain, zstd or"
        " gzip, readable by all).",
    )
    kubeadm: KubeadmAirgap | None = Field(default=None, description="kubeadm: its files (below).")

    @field_validator("k3s_binary")
    @classmethod
    def _executable(cls, value: str | None) -> str | None:
        return None if value is None else _elf(value, "the k3s binary", K3S_RELEASES)

    @field_validator("images_tarball")
    @classmethod
    def _archive(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path, head = _readable_file(value, "the images tarball")
        offset, magic = TAR_MAGIC
        if not (head[offset : offset + len(magic)] == magic or head.startswith(COMPRESSED_MAGIC)):
            raise ValueError(
                f"{value!r} is not a tar archive (plain, zstd or gzip); point it at the release's"
                " k3s-airgap-images-<arch>.tar.zst"
            )
        return str(path)


def _elf(value: str, what: str, releases: str) -> str:
    path, head = _readable_file(value, what)
    if not head.startswith(ELF_MAGIC):
        raise ValueError(
            f"{value!r} is not an executable (ELF) file; point it at {what} of the release ({releases})"
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
