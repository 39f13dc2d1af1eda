"""Files and folders the orchestrator writes on the operator's machine: each file whole or not at
all (a temporary file beside it, synced, then renamed over it), and what the machine cannot do (a
full or read-only disk, a file where the state folder must be) as the one line of
trainer.errors.machine_problem, the trainer's own, before anything is half-written."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from trainer.errors import MachineError, machine_problem

__all__ = ["MachineError", "ensure_folder", "extract_whole", "machine_problem", "write_file"]


def _failed(err: OSError, path: Path) -> MachineError:
    named = err if err.filename is not None else OSError(err.errno, err.strerror, str(path))
    return MachineError(machine_problem(named))


def ensure_folder(path: Path, mode: int = 0o700) -> Path:
    """`path` as a folder (made with `mode` when missing); MachineError naming what is in the way."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
    except OSError as err:
        raise _failed(err, path) from None
    if not path.is_dir():
        raise _failed(OSError(17, "File exists", str(path)), path)
    return path


@contextlib.contextmanager
def _temporary(path: Path) -> Iterator[Path]:
    """A fresh name beside `path`, removed afterwards whatever happened."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield tmp
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_file(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Write `data` to `path` whole or not at all; MachineError when the machine cannot."""
    content = data.encode() if isinstance(data, str) else data
    with _temporary(path) as tmp:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as err:
            raise _failed(err, path) from None
    with contextlib.suppress(OSError):  # durable once the folder's entry is on disk too
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def extract_whole(archive: IO[bytes], dest: Path) -> None:
    """Unpack a tar stream into `dest` whole or not at all: into a fresh folder beside it first,
    then each file renamed into place. The "data" filter refuses absolute paths, links, devices
    and anything that would land outside the folder; a link already inside `dest` that a file
    would be written through is refused before any file is placed."""
    dest = Path(os.path.abspath(dest))
    if dest.parent == dest:
        raise MachineError(
            f"{dest} is the root folder, which a copy would fill; name a folder for it, such as ./results"
        )
    ensure_folder(dest.parent, 0o755)
    with _temporary(dest) as staging:
        try:
            staging.mkdir(mode=0o700)
            with tarfile.open(fileobj=archive, mode="r|") as tar:
                tar.extractall(staging, filter="data")
            ensure_folder(dest, 0o755)
            sources = sorted(staging.rglob("*"))
            for source in sources:
                _not_through_a_link(dest, dest / source.relative_to(staging))
            for source in sources:
                target = dest / source.relative_to(staging)
                if source.is_dir():
                    ensure_folder(target, 0o755)
                else:
                    os.replace(source, target)
        except OSError as err:
            raise _failed(err, dest) from None


def _not_through_a_link(dest: Path, target: Path) -> None:
    """Refuse `target` when a folder on its way below `dest` is a symbolic link, which the copy
    would write through to wherever it leads (a link named `target` itself is replaced, not followed)."""
    for folder in reversed(target.relative_to(dest).parents[:-1]):
        if (dest / folder).is_symlink():
            raise MachineError(
                f"{dest / folder} is a symbolic link, through which the copy would write outside"
                f" {dest}; remove the link, or fetch into a new folder"
            )
