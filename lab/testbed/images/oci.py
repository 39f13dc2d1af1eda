"""Deterministic image layers and OCI image-layout archives that containerd 1.6 imports by name.

A layer is an uncompressed tar (media type ...layer.v1.tar), so its digest is also its diffID and
no compressor's version can change a digest. Every tar here, layers and archives, has its entries
sorted by path, a fixed mtime (MTIME), uid/gid 0 and no user or group names: the same inputs give
the same bytes, hence the same digests.

How `ctr -n k8s.io images import FILE` (containerd 1.6.20) names what it imports: its importer
(images/archive/importer.go, `ImportIndex`, tag v1.6.20) reads `oci-layout`; when present the tar
is taken as an OCI image layout and `index.json` is the index, and a docker `manifest.json` beside
it is ignored. The client (import.go, `Import` and `imageName`, tag v1.6.20) then makes one image
per manifest of that index, named by the manifest's annotation `io.containerd.image.name` when it
has one, otherwise by `org.opencontainers.image.ref.name` passed through ctr's translator: with no
`--base-name`, ctr uses `archive.AddRefPrefix("import-DATE")` (cmd/ctr/commands/images/import.go),
which keeps a value containing `/`, `:` or `@` as it is and turns a bare tag into
`import-DATE:TAG`. So each manifest here carries both annotations set to the full name
(`registry.k8s.io/kube-apiserver:v1.34.4`): containerd 1.6 takes the first, and a tool that reads
only the OCI annotation still finds the whole name. The docker `manifest.json` (RepoTags) is
written too, for `docker load` and importers that read only that format.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MTIME = 0
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory, a regular file (from `source` or `data`) or a symlink."""

    path: str  # relative, no leading slash
    kind: str  # "dir", "file" or "symlink"
    mode: int = 0o755
    source: Path | None = None
    data: bytes | None = None
    target: str = ""


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path.strip("/"), "dir", mode)


def file(path: str, source: Path | None = None, data: bytes | None = None, mode: int | None = None) -> Entry:
    if mode is None:
        mode = stat.S_IMODE(source.stat().st_mode) if source is not None else 0o644
    return Entry(path.strip("/"), "file", mode, source=source, data=data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path.strip("/"), "symlink", 0o777, target=target)


@dataclass(frozen=True)
class Blob:
    digest: str  # "sha256:..."
    size: int
    path: Path  # where the bytes are, under the blob store


def _with_parents(entries: list[Entry]) -> list[Entry]:
    """`entries` plus a directory entry for every parent not given, sorted by path, one per path."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        if entry.path in by_path and by_path[entry.path] != entry:
            raise ValueError(f"layer path {entry.path!r} given twice, differently")
        by_path[entry.path] = entry
    for entry in list(by_path.values()):
        parts = entry.path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            by_path.setdefault("/".join(parts[:depth]), directory("/".join(parts[:depth])))
    return [by_path[path] for path in sorted(by_path)]


def _info(name: str, kind: bytes, mode: int, size: int = 0, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, target
    info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
    return info


def write_layer(entries: list[Entry], store: Path) -> Blob:
    """Write the layer tar of `entries` into blob store `store`; return its blob."""
    with (
        tempfile.NamedTemporaryFile(dir=store, prefix=".layer-", delete=False) as handle,
        tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in _with_parents(entries):
            if entry.kind == "dir":
                tar.addfile(_info(entry.path + "/", tarfile.DIRTYPE, entry.mode))
            elif entry.kind == "symlink":
                tar.addfile(_info(entry.path, tarfile.SYMTYPE, 0o777, target=entry.target))
            elif entry.source is not None:
                with entry.source.open("rb") as content:
                    size = os.fstat(content.fileno()).st_size
                    tar.addfile(_info(entry.path, tarfile.REGTYPE, entry.mode, size), content)
            else:
                data = entry.data or b""
                tar.addfile(_info(entry.path, tarfile.REGTYPE, entry.mode, len(data)), io.BytesIO(data))
    return _store(Path(handle.name), store)


def _store(path: Path, store: Path) -> Blob:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    final = store / digest.hexdigest()
    size = path.stat().st_size
    path.replace(final)
    return Blob(f"sha256:{digest.hexdigest()}", size, final)


def _json_blob(value: object, store: Path) -> Blob:
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    with tempfile.NamedTemporaryFile(dir=store, prefix=".json-", delete=False) as handle:
        handle.write(data)
    return _store(Path(handle.name), store)


@dataclass(frozen=True)
class ImageSpec:
    """What an image is: its full name, layers (bottom first) and the process it runs."""

    name: str
    layers: tuple[Blob, ...]
    entrypoint: tuple[str, ...]
    workdir: str = "/"
    env: tuple[str, ...] = (f"PATH={PATH}",)
    labels: dict[str, str] = field(default_factory=dict)


def write_archive(spec: ImageSpec, store: Path, archive: Path) -> str:
    """Write `spec` as an OCI image-layout tar at `archive`; return the manifest's digest."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(spec.entrypoint),
            "Env": list(spec.env),
            "WorkingDir": spec.workdir,
            **({"Labels": spec.labels} if spec.labels else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in spec.layers]},
    }
    config_blob = _json_blob(config, store)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": _descriptor(CONFIG_MEDIA_TYPE, config_blob),
        "layers": [_descriptor(LAYER_MEDIA_TYPE, layer) for layer in spec.layers],
    }
    manifest_blob = _json_blob(manifest, store)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                **_descriptor(MANIFEST_MEDIA_TYPE, manifest_blob),
                "annotations": {CONTAINERD_NAME: spec.name, OCI_REF_NAME: spec.name},
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    docker = [
        {
            "Config": _blob_path(config_blob),
            "RepoTags": [spec.name],
            "Layers": [_blob_path(layer) for layer in spec.layers],
        }
    ]
    small = {
        "oci-layout": _dumps({"imageLayoutVersion": "1.0.0"}),
        "index.json": _dumps(index),
        "manifest.json": _dumps(docker),
    }
    blobs = {_blob_path(blob): blob.path for blob in (config_blob, manifest_blob, *spec.layers)}
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        names = sorted({*small, *blobs, "blobs/", "blobs/sha256/"})
        for name in names:
            if name.endswith("/"):
                tar.addfile(_info(name, tarfile.DIRTYPE, 0o755))
            elif name in small:
                tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(small[name])), io.BytesIO(small[name]))
            else:
                with blobs[name].open("rb") as content:
                    size = os.fstat(content.fileno()).st_size
                    tar.addfile(_info(name, tarfile.REGTYPE, 0o644, size), content)
    partial.replace(archive)
    return manifest_blob.digest


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, blob: Blob) -> dict[str, object]:
    return {"mediaType": media_type, "digest": blob.digest, "size": blob.size}


def _blob_path(blob: Blob) -> str:
    return "blobs/sha256/" + blob.digest.removeprefix("sha256:")
