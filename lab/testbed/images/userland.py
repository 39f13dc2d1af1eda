"""Programs copied out of a Debian 12 root with every shared library they load.

Each program's interpreter and DT_NEEDED libraries (lab.testbed.images.elf) are looked up in the
root's library folders, recursively; libraries a program opens itself at run time are not in
DT_NEEDED, so their folders are named and copied whole (iptables' extensions,
/usr/lib/x86_64-linux-gnu/xtables/libxt_*.so, which it dlopen()s by match and target name), and
their own needs followed too. Symlinks inside the root (Debian's /etc/alternatives, the merged /usr)
are followed to the file they name; the layer holds that file at the path given, or the program
links the caller names.

Debian 12's root has merged /usr (/lib -> usr/lib, /lib64 -> usr/lib64, /bin -> usr/bin,
/sbin -> usr/sbin): the layers keep that layout, so ELF interpreter paths such as
/lib64/ld-linux-x86-64.so.2 resolve as they do in the root.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from lab.testbed.images import elf
from lab.testbed.images.oci import Entry, file, symlink

LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64")
MERGED_USR = (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"))


class MissingInRoot(FileNotFoundError):
    """A program or a library it needs is not in the Debian root."""


def resolve(root: Path, path: str, _depth: int = 0) -> str:
    """`path` (absolute, inside `root`) with every symlink followed inside `root`; root-relative."""
    if _depth > 40:
        raise MissingInRoot(f"{path}: too many symlinks in {root}")
    parts = PurePosixPath(path).parts[1:] if path.startswith("/") else PurePosixPath(path).parts
    done = PurePosixPath("/")
    for index, part in enumerate(parts):
        here = done / part
        real = root / str(here).lstrip("/")
        if real.is_symlink():
            target = os.readlink(real)
            base = PurePosixPath(target) if target.startswith("/") else done / target
            rest = PurePosixPath(*parts[index + 1 :]) if index + 1 < len(parts) else PurePosixPath()
            return resolve(root, os.path.normpath(str(base / rest)), _depth + 1)
        done = here
    if not (root / str(done).lstrip("/")).exists():
        raise MissingInRoot(f"{path}: not in {root}")
    return str(done).lstrip("/")


def _find_library(root: Path, name: str) -> str:
    for folder in LIBRARY_DIRS:
        candidate = f"/{folder}/{name}"
        if (root / candidate.lstrip("/")).exists() or (root / candidate.lstrip("/")).is_symlink():
            return resolve(root, candidate)
    raise MissingInRoot(f"library {name} not found in {root} ({', '.join(LIBRARY_DIRS)})")


def closure(root: Path, programs: list[str]) -> dict[str, str]:
    """Layer path -> root-relative real file, for `programs` (absolute paths) and all they load.

    A library is kept under its soname in the folder it was found in (so the loader finds it by
    the name DT_NEEDED gives), holding the real file's bytes.
    """
    wanted: dict[str, str] = {}
    pending: list[tuple[str, str]] = [(p.lstrip("/"), resolve(root, p)) for p in programs]
    while pending:
        layer_path, real = pending.pop()
        if layer_path in wanted:
            continue
        wanted[layer_path] = real
        if not elf.is_elf(root / real):
            continue
        needs = elf.needs(root / real)
        if needs.interpreter:
            interp = needs.interpreter
            pending.append((_merged(interp), resolve(root, interp)))
        for soname in needs.libraries:
            found = _find_library(root, soname)
            folder = str(PurePosixPath(found).parent)
            pending.append((f"{folder}/{soname}", found))
    return wanted


def _merged(path: str) -> str:
    """The path a merged-/usr root really keeps `path` under (/lib64/x -> usr/lib64/x)."""
    relative = path.lstrip("/")
    for top, real in MERGED_USR:
        if relative == top or relative.startswith(top + "/"):
            return real + relative[len(top) :]
    return relative


def entries(
    root: Path, programs: list[str], folders: tuple[str, ...] = (), links: dict[str, str] | None = None
) -> list[Entry]:
    """Layer entries: `programs` (as real files at their merged-/usr paths), every file of
    `folders`, what they all load, the merged-/usr top links, and `links` (path -> target)."""
    wanted = list(programs)
    for folder in folders:
        real = root / resolve(root, folder)
        wanted += [
            f"/{folder.strip('/')}/{child.name}" for child in sorted(real.iterdir()) if child.is_file()
        ]
    found = closure(root, [f"/{_merged(p)}" for p in wanted])
    result = [file(path, source=root / real) for path, real in sorted(found.items())]
    result += [symlink(top, real) for top, real in MERGED_USR]
    result += [symlink(_merged(path), target) for path, target in sorted((links or {}).items())]
    return result
