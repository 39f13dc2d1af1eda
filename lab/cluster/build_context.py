"""The trainer image's build context: a deterministic tarball of `images/trainer/` and `trainer/`.

The image tag is a hash of this tarball, so it must depend on file paths and contents only:
entries are sorted and carry a fixed mtime, owner and mode, and Python's byte-code caches are
left out. The same tree then always gives the same tag, on any machine, and any change to a
file gives a new one.

The Dockerfile's base image, pinned by digest there, is also read here: the build pod's recording
step runs it (lab/cluster/image.py).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from lab.paths import ROOT

# Paths relative to the repository root; the Dockerfile refers to them from the context's root.
CONTEXT_DIRS = ("images/trainer", "trainer")
DOCKERFILE = "images/trainer/Dockerfile"

# A ConfigMap holds at most 1 MiB of data; the compressed context travels in one.
MAX_ARCHIVE_BYTES = 1024 * 1024

TAG_LENGTH = 12
FIRST_FROM = re.compile(r"^FROM\s+(\S+)", re.MULTILINE)
BY_DIGEST = re.compile(r"\S+@sha256:[0-9a-f]{64}")
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = {".pyc"}


class BuildContextError(ValueError):
    """The build context cannot be made or would not fit where it has to go."""


@dataclass(frozen=True)
class BuildContext:
    archive: bytes  # gzip-compressed tar, what the build Job extracts
    tag: str  # first hex digits of the uncompressed tar's sha256
    files: tuple[str, ...]  # paths inside the context, in archive order
    base_image: str  # the Dockerfile's base, by tag and digest


def _included(path: Path, root: Path) -> bool:
    relative = path.relative_to(root)
    if any(part in _SKIPPED_DIRS for part in relative.parts):
        return False
    return path.suffix not in _SKIPPED_SUFFIXES


def _entries(root: Path, dirs: tuple[str, ...]) -> list[Path]:
    entries: list[Path] = []
    for top in dirs:
        base = root / top
        if not base.is_dir():
            raise BuildContextError(f"{base} is missing; the trainer image is built from {', '.join(dirs)}")
        entries.append(base)
        entries.extend(p for p in base.rglob("*") if _included(p, root))
    for path in entries:
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise BuildContextError(
                f"{path} is not a regular file or directory; replace it with a copy of what it points at"
            )
    return sorted(entries, key=lambda p: p.relative_to(root).as_posix())


def _member(path: Path, root: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path.relative_to(root).as_posix())
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if path.is_dir():
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = path.stat().st_size
        # Executable bits survive (entrypoint scripts); everything else is normalised.
        info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return info


def _tar(root: Path, entries: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in entries:
            info = _member(path, root)
            if info.isdir():
                tar.addfile(info)
            else:
                with path.open("rb") as data:
                    tar.addfile(info, data)
    return buffer.getvalue()


def _gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    # No file name and a zero timestamp in the header keep the archive reproducible.
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as out:
        out.write(data)
    return buffer.getvalue()


def _largest(root: Path, entries: list[Path], count: int = 3) -> str:
    files = sorted((p for p in entries if p.is_file()), key=lambda p: p.stat().st_size, reverse=True)
    return ", ".join(f"{p.relative_to(root)} ({p.stat().st_size} bytes)" for p in files[:count])


def _base_image(root: Path) -> str:
    dockerfile = root / DOCKERFILE
    found = FIRST_FROM.search(dockerfile.read_text()) if dockerfile.is_file() else None
    if found is None or not BY_DIGEST.fullmatch(found.group(1)):
        raise BuildContextError(
            f"{dockerfile} must start from a base image pinned by digest (FROM <name>:<tag>@sha256:<digest>)"
        )
    return found.group(1)


def build_context(root: Path = ROOT, dirs: tuple[str, ...] = CONTEXT_DIRS) -> BuildContext:
    """The context of the trainer image under `root`; BuildContextError when it cannot ship."""
    entries = _entries(root, dirs)
    tar = _tar(root, entries)
    archive = _gzip(tar)
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise BuildContextError(
            f"the trainer build context ({', '.join(dirs)}) compresses to {len(archive)} bytes, over the"
            f" {MAX_ARCHIVE_BYTES}-byte ConfigMap limit; largest files: {_largest(root, entries)}."
            " Keep data, checkpoints and results out of these directories."
        )
    # The tag hashes the uncompressed tar: gzip output may differ between zlib versions.
    tag = hashlib.sha256(tar).hexdigest()[:TAG_LENGTH]
    files = tuple(p.relative_to(root).as_posix() for p in entries)
    return BuildContext(archive=archive, tag=tag, files=files, base_image=_base_image(root))
