"""Reading an OCI image-layout archive back, checking it as an importer would, without containerd.

Each check raises LayoutError saying what is wrong, so a test can show it failing on a broken
archive as well as passing on a good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.tiers import costly

CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64", "lib", "lib64")


class LayoutError(AssertionError):
    """The archive is not what an importer would take."""


@dataclass(frozen=True)
class Read:
    name: str
    layers: list[str]  # layer digests, bottom first
    entrypoint: list[str]
    config: dict[str, object]


def read_archive(archive: Path, scratch: Path) -> Read:
    """Unpack `archive` into `scratch` and check it: the layout file, every blob's digest and size,
    the manifest's one image named in both annotations and in manifest.json, and each layer's
    diffID being the sha256 of its uncompressed bytes."""
    with tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
    layout = json.loads((scratch / "oci-layout").read_text())
    if layout != {"imageLayoutVersion": "1.0.0"}:
        raise LayoutError(f"oci-layout is {layout}")
    index = json.loads((scratch / "index.json").read_text())
    if len(index["manifests"]) != 1:
        raise LayoutError(f"index.json names {len(index['manifests'])} manifests")
    entry = index["manifests"][0]
    name = entry["annotations"][CONTAINERD_NAME]
    if entry["annotations"][OCI_REF_NAME] != name or ":" not in name or "/" not in name:
        raise LayoutError(f"annotations {entry['annotations']} do not both give the full name")
    manifest = json.loads(_blob(scratch, entry))
    config = json.loads(_blob(scratch, manifest["config"]))
    layers = [layer["digest"] for layer in manifest["layers"]]
    for layer in manifest["layers"]:
        _blob(scratch, layer)
        if not layer["mediaType"].endswith(".tar"):
            raise LayoutError(f"layer {layer['digest']} is {layer['mediaType']}, not an uncompressed tar")
    if config["rootfs"]["diff_ids"] != layers:
        raise LayoutError(f"diff_ids {config['rootfs']['diff_ids']} are not the layers' sha256 {layers}")
    docker = json.loads((scratch / "manifest.json").read_text())
    if docker[0]["RepoTags"] != [name] or docker[0]["Layers"] != [f"blobs/sha256/{d[7:]}" for d in layers]:
        raise LayoutError(f"manifest.json {docker} disagrees with index.json")
    if (config["os"], config["architecture"]) != ("linux", "amd64"):
        raise LayoutError(f"platform {config['os']}/{config['architecture']}")
    return Read(name, layers, config["config"]["Entrypoint"], config)


def _blob(scratch: Path, descriptor: dict[str, object]) -> bytes:
    digest = str(descriptor["digest"])
    data = (scratch / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        raise LayoutError(f"blob {digest} does not hash to its name")
    if len(data) != descriptor["size"]:
        raise LayoutError(f"blob {digest} is {len(data)} bytes, its descriptor says {descriptor['size']}")
    return data


def unpack(scratch: Path, read: Read, root: Path) -> Path:
    """The image's filesystem: its layers unpacked in order into `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for digest in read.layers:
        with tarfile.open(scratch / "blobs" / "sha256" / digest.removeprefix("sha256:")) as tar:
            tar.extractall(root, filter="fully_trusted")
    return root


def missing_libraries(root: Path) -> list[str]:
    """`program: soname` for every DT_NEEDED library (readelf's reading) of every ELF file in
    `root` that no library folder of `root` holds, and every interpreter that is absent."""
    missing = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        with path.open("rb") as handle:
            if handle.read(4) != b"\x7fELF":
                continue
        dynamic = subprocess.run(["readelf", "-d", "-l", "-W", str(path)], capture_output=True, text=True)
        for line in dynamic.stdout.splitlines():
            if "(NEEDED)" in line:
                soname = line.split("[", 1)[1].rstrip("]")
                if not any(os.path.lexists(_inside(root, f"/{d}/{soname}")) for d in LIBRARY_DIRS):
                    missing.append(f"{path.relative_to(root)}: {soname}")
            elif "Requesting program interpreter:" in line:
                interpreter = line.split(":", 1)[1].strip().rstrip("]")
                if not _inside(root, interpreter).exists():
                    missing.append(f"{path.relative_to(root)}: interpreter {interpreter}")
    return missing


def _inside(root: Path, path: str, depth: int = 0) -> Path:
    """`path` in `root`, following absolute symlinks as a chroot would."""
    here = root
    for part in Path(path).parts[1:]:
        here = here / part
        if here.is_symlink() and depth < 20:
            target = os.readlink(here)
            here = (
                _inside(root, target, depth + 1)
                if target.startswith("/")
                else (here.parent / target).resolve()
            )
    return here


@costly("programs run as root in a chroot of an unpacked image")
def run_in_chroot(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run `command` inside `root` with chroot, in a new network namespace of its own."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        raise LayoutError("needs root and unshare")
    return subprocess.run(
        ["unshare", "-n", "--", "chroot", str(root), *command], capture_output=True, text=True
    )
