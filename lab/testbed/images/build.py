"""The images: what each holds, where upstream puts it, and the build that writes their archives.

Each image follows its upstream definition for paths and entrypoint:

- kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy: Kubernetes'
  build/server-image/Dockerfile copies the binary to /usr/local/bin/${BINARY} (build/lib/release.sh
  builds one image per server binary from it; the base is go-runner, or distroless-iptables for
  kube-proxy). kubeadm runs the control plane as `command: [kube-apiserver, ...]`
  (cmd/kubeadm/app/phases/controlplane/manifests.go, getAPIServerCommand and its siblings), found
  on the image's PATH, and kube-proxy as `/usr/local/bin/kube-proxy --config=...`
  (cmd/kubeadm/app/phases/addons/proxy/manifests.go). Here the one multi-call `kube` binary of the
  tools folder is a layer of its own, /usr/local/bin/kube, the same bytes in all four images so
  containerd stores it once, and each image adds a small layer with the link
  /usr/local/bin/<program> -> kube (the binary picks its program from argv[0], which a link keeps).
- kube-proxy also carries the packet-filter programs (NETFILTER, below) with their libraries.
- etcd: etcd's Dockerfile (v3.6.5) puts etcd in /usr/local/bin/ with CMD ["/usr/local/bin/etcd"]
  and WORKDIR /var/lib/etcd/ (also /var/etcd/); kubeadm runs `command: [etcd, ...]`. Only etcd is
  here: the tools folder's etcdctl is 3.6.8, not a 3.6.5 image's.
- CoreDNS: its Dockerfile copies /coredns, ENTRYPOINT ["/coredns"], USER 65532:65532, with the file
  capability cap_net_bind_service set by setcap. No file capabilities are written here, so this
  image keeps root (the kubeadm Deployment adds NET_BIND_SERVICE, which root then has).
- flannel: flannel's images/Dockerfile (v0.28.9 and the snapshot after it, cdf76059) puts flanneld
  at /opt/bin/flanneld, ENTRYPOINT ["/opt/bin/flanneld"], with iptables, nftables and iproute2;
  its CNI plugin ships as its own image, flannel-cni-plugin, holding /flannel, which the manifest's
  init container installs with `command: [cp] args: [-f, /flannel, /opt/cni/bin/flannel]`
  (Documentation/kube-flannel.yml). Both images here carry Debian's cp for those init containers.
  Upstream's second init container runs /opt/bin/install-conf, a program the tools folder lacks:
  a manifest for these images copies the CNI configuration with `cp` instead.
- pause: upstream's build/pause/Dockerfile: /pause, ENTRYPOINT ["/pause"]; pause.c here.

Packet filter mode. Upstream's kube-proxy image is distroless-iptables, which has both iptables
backends and iptables-wrapper choosing one at first run (the one with rules already, nft when
neither has). The test machines run on the host's kernel, which has both nf_tables and ip_tables
built in (CONFIG_NF_TABLES=y, CONFIG_IP_NF_IPTABLES=y, CONFIG_NFT_COMPAT=y); the machines' Debian
has no iptables of its own, so no legacy rules exist there and the wrapper would choose nft. So
`iptables`, `iptables-save`, `iptables-restore` and the ip6tables ones here are iptables-nft
(Debian 12's default alternative too); the -legacy names are also there for a look by hand, and
`nft` for kube-proxy's nftables mode.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.testbed.images import names, userland
from lab.testbed.images.oci import (
    Blob,
    Entry,
    ImageSpec,
    directory,
    file,
    symlink,
    write_archive,
    write_layer,
)
from lab.testbed.images.pause import CFLAGS, SOURCE, compile_pause

BUILDER_VERSION = 1  # bump when the images' contents change without an input changing
KUBE = "usr/local/bin/kube"
KUBE_PROGRAMS = {
    names.KUBE_APISERVER: "kube-apiserver",
    names.KUBE_CONTROLLER_MANAGER: "kube-controller-manager",
    names.KUBE_SCHEDULER: "kube-scheduler",
    names.KUBE_PROXY: "kube-proxy",
}
_NFT_NAMES = [f"{family}tables{suffix}" for family in ("ip", "ip6") for suffix in ("", "-save", "-restore")]
NETFILTER_PROGRAMS = [
    "/usr/sbin/xtables-nft-multi",
    "/usr/sbin/xtables-legacy-multi",
    "/usr/sbin/nft",
    "/usr/sbin/conntrack",
]
NETFILTER_FOLDERS = ("/usr/lib/x86_64-linux-gnu/xtables",)
NETFILTER_LINKS = {
    **{f"/usr/sbin/{name}": "xtables-nft-multi" for name in _NFT_NAMES},
    **{f"/usr/sbin/{name.replace('tables', 'tables-nft', 1)}": "xtables-nft-multi" for name in _NFT_NAMES},
    **{
        f"/usr/sbin/{name.replace('tables', 'tables-legacy', 1)}": "xtables-legacy-multi"
        for name in _NFT_NAMES
    },
}
CP_PROGRAMS = ["/usr/bin/cp"]
# A minimal /etc for Go programs (user lookups, the resolver's nsswitch) and a /tmp.
BASE_FILES = {
    "etc/passwd": b"root:x:0:0:root:/root:/sbin/nologin\n"
    b"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    "etc/group": b"root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
    "etc/nsswitch.conf": b"hosts: files dns\n",
}
STAMP = "build.json"


@dataclass(frozen=True)
class Image:
    """A built image: its full name, its archive (for `ctr -n k8s.io images import`), the process
    it runs, its manifest digest and size in bytes of its archive."""

    name: str
    archive: Path
    entrypoint: tuple[str, ...]
    digest: str
    size: int


def _inputs(tools_bin: Path, debian_root: Path) -> dict[str, Path]:
    """The files the images are made of, by role."""
    found = {
        "kube": tools_bin / "kube",
        "etcd": tools_bin / "etcd",
        "coredns": tools_bin / "coredns",
        "flanneld": tools_bin / "flanneld",
        "flannel": tools_bin / "flannel",
        "pause.c": SOURCE,
    }
    for program in [*NETFILTER_PROGRAMS, *CP_PROGRAMS]:
        found[program] = debian_root / userland.resolve(debian_root, program)
    return found


def inputs_key(tools_bin: Path, debian_root: Path) -> str:
    """A hash of everything a build reads: each input's path, size and mtime, the Debian root's
    library folders' listing, and this package's own source."""
    digest = hashlib.sha256(f"builder {BUILDER_VERSION} {' '.join(CFLAGS)}\n".encode())
    for role, path in sorted(_inputs(tools_bin, debian_root).items()):
        info = path.stat()
        digest.update(f"{role} {path} {info.st_size} {info.st_mtime_ns}\n".encode())
    for folder in userland.LIBRARY_DIRS:
        real = debian_root / folder
        if real.is_dir():
            listing = sorted((c.name, c.stat().st_mtime_ns) for c in real.iterdir() if c.is_file())
            digest.update(f"{folder} {listing}\n".encode())
    for source in sorted(Path(__file__).parent.glob("*.[pc]*")):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def build(
    tools_bin: Path, debian_root: Path, out: Path, log: Callable[[str], None] | None = None
) -> list[Image]:
    """Build every image's archive into `out` (one `NAME_TAG.tar` each, and build.json: the
    inputs' key, the images, seconds per step) from the tools folder's `bin` and a Debian 12 root
    with iptables, nftables and conntrack (lab.testbed.images.debian.tools_tree makes one). A
    second call with the same inputs returns the recorded images at once."""
    out.mkdir(parents=True, exist_ok=True)
    key = inputs_key(tools_bin, debian_root)
    cached = _cached(out, key)
    if cached is not None:
        return cached
    say = log or (lambda _line: None)
    store = out / "blobs"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    sources = _inputs(tools_bin, debian_root)
    timings: dict[str, float] = {}

    def layer(what: str, entries: list[Entry]) -> Blob:
        started = time.monotonic()
        blob = write_layer(entries, store)
        timings[what] = time.monotonic() - started
        say(f"layer {what}: {blob.size} bytes {blob.digest}")
        return blob

    pause_binary = compile_pause(out / "work" / "pause")
    base = layer(
        "base", [*(file(p, data=d, mode=0o644) for p, d in BASE_FILES.items()), directory("tmp", 0o1777)]
    )
    kube = layer("kube", [file(KUBE, source=sources["kube"], mode=0o755)])
    netfilter = layer(
        "netfilter", userland.entries(debian_root, NETFILTER_PROGRAMS, NETFILTER_FOLDERS, NETFILTER_LINKS)
    )
    cp = layer("cp", userland.entries(debian_root, CP_PROGRAMS))
    specs: list[ImageSpec] = []
    for name, program in KUBE_PROGRAMS.items():
        link = layer(program, [symlink(f"usr/local/bin/{program}", "kube")])
        extra = (netfilter,) if name == names.KUBE_PROXY else ()
        specs.append(ImageSpec(name, (base, kube, *extra, link), (f"/usr/local/bin/{program}",)))
    etcd = layer(
        "etcd",
        [
            file("usr/local/bin/etcd", source=sources["etcd"], mode=0o755),
            directory("var/etcd"),
            directory("var/lib/etcd"),
        ],
    )
    specs.append(ImageSpec(names.ETCD, (base, etcd), ("/usr/local/bin/etcd",), workdir="/var/lib/etcd"))
    coredns = layer("coredns", [file("coredns", source=sources["coredns"], mode=0o755)])
    specs.append(ImageSpec(names.COREDNS, (base, coredns), ("/coredns",)))
    pause = layer("pause", [file("pause", source=pause_binary, mode=0o755)])
    specs.append(ImageSpec(names.PAUSE_IMAGE, (pause,), ("/pause",)))
    flanneld = layer("flanneld", [file("opt/bin/flanneld", source=sources["flanneld"], mode=0o755)])
    specs.append(ImageSpec(names.FLANNEL, (base, netfilter, cp, flanneld), ("/opt/bin/flanneld",)))
    plugin = layer("flannel-cni-plugin", [file("flannel", source=sources["flannel"], mode=0o755)])
    specs.append(ImageSpec(names.FLANNEL_CNI_PLUGIN, (base, cp, plugin), ("/flannel",)))

    images = []
    for spec in specs:
        started = time.monotonic()
        archive = out / archive_name(spec.name)
        digest = write_archive(spec, store, archive)
        timings[f"archive {spec.name}"] = time.monotonic() - started
        images.append(Image(spec.name, archive, spec.entrypoint, digest, archive.stat().st_size))
        say(f"image {spec.name}: {archive} {digest}")
    shutil.rmtree(out / "work", ignore_errors=True)
    shutil.rmtree(store)  # every archive holds its own copy of the blobs it needs
    record = {"key": key, "images": [_jsonable(image) for image in images], "seconds": timings}
    (out / STAMP).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return images


def archive_name(name: str) -> str:
    """`registry.k8s.io/coredns/coredns:v1.15.0` -> `coredns_v1.15.0.tar` (the last path part, tag)."""
    repository, tag = name.rsplit(":", 1)
    return f"{repository.rsplit('/', 1)[-1]}_{tag}.tar"


def _jsonable(image: Image) -> dict[str, object]:
    record = asdict(image)
    record["archive"] = image.archive.name
    record["entrypoint"] = list(image.entrypoint)
    return record


def _cached(out: Path, key: str) -> list[Image] | None:
    try:
        record = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != key:
        return None
    images = [
        Image(r["name"], out / r["archive"], tuple(r["entrypoint"]), r["digest"], r["size"])
        for r in record["images"]
    ]
    if not all(image.archive.is_file() and image.archive.stat().st_size == image.size for image in images):
        return None
    return images
