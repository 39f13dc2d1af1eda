"""Read the trainer's run folders: runs, sweeps, their status, metrics, summaries and plots.

Run folders are hostile input: pods write them, and so may any NFS client the export admits. So
this reader, the only one `labctl` and the trainer's own commands have (`read_in`, `read_named`
for one file), never follows a link (each name is opened relative to its
folder with O_NOFOLLOW, and checked with lstat first and fstat after), reads regular files only,
of bounded size and with one link (a hard link may be a file from outside the folder), never
opens a pipe or a device (lstat says what a name is before it is opened, O_NONBLOCK keeps an open
from waiting), replaces every control character in what it returns with a visible escape, and
names each file it leaves alone in one line (`problems`). It runs as whoever calls it: on the
NFS server that is the SSH user, without sudo (the trainer's files are readable by all, under a
container's umask 022); a file that user cannot read is named, never read as root.

Standard library only, and Python 3.8's: `labctl` also sends this file to the NFS server's own
python3 (`python3 - RUNS_DIR` prints the JSON of `collect`, `python3 - --tar RUNS_DIR` writes the
tar of `archive` and its problems), so a run is read the same way on the operator's machine and
on the export.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
import tarfile
import unicodedata
from collections.abc import Iterator
from typing import Any, BinaryIO

# trainer/contract.py's names, written out because this file travels alone; tests/test_contract.py
# holds them equal.
STATUS_FILE, SUMMARY_FILE, METRICS_FILE = RUN_FILES = ("status.json", "summary.json", "metrics.jsonl")
SKIPPED = {"checkpoints"}

# What the trainer writes is far below these: a status or summary of a few KiB, a metrics line
# of under 1 KiB per epoch (1000 epochs at most), plots of a few hundred KiB.
MAX_JSON_BYTES = 1 << 20
MAX_METRICS_BYTES = 16 << 20
MAX_FILE_BYTES = 64 << 20
MAX_FETCH_BYTES = 1 << 30
MAX_ENTRIES = 10_000
MAX_DEPTH = 4
MAX_PROBLEMS = 50

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_DIGITS = re.compile(r"[0-9]+")
# Control characters (C0, DEL, C1), and the format and separator characters that move or hide
# text on a terminal (bidirectional overrides, zero-width characters, line separators).
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def printable(text: str) -> str:
    """`text` with every character that could steer a terminal written as a visible escape."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char == " " or unicodedata.category(char) not in _HIDDEN_CATEGORIES:
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def printable_data(value: Any) -> Any:
    """A JSON value with every string in it, keys too, made `printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [printable_data(item) for item in value]
    if isinstance(value, dict):
        return {printable(str(k)): printable_data(v) for k, v in value.items()}
    return value


class Problems:
    """The files left alone and why, one line each, at most MAX_PROBLEMS of them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.dropped = 0

    def add(self, path: str, why: str) -> None:
        if len(self.lines) < MAX_PROBLEMS:
            self.lines.append(f"{printable(path)}: {why}")
        else:
            self.dropped += 1

    def report(self) -> list[str]:
        more = [f"... and {self.dropped} more files left alone"] if self.dropped else []
        return self.lines + more


class Folder:
    """A directory opened without following links, whose entries are looked at, never followed."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    @classmethod
    def open_root(cls, root: str) -> Folder:
        # The root is the operator's (--runs-dir) or the lab's own export path, which the nfs_server
        # role makes through no link: only what lies under it is untrusted.
        return cls(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), "")

    def close(self) -> None:
        os.close(self.fd)

    def child_path(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def entries(self, problems: Problems) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of each entry, sorted, at most MAX_ENTRIES."""
        found: list[tuple[str, os.stat_result]] = []
        with os.scandir(self.fd) as listing:
            for entry in listing:
                if len(found) == MAX_ENTRIES:
                    problems.add(
                        self.path or ".", f"holds more than {MAX_ENTRIES} entries; the rest are left alone"
                    )
                    break
                try:
                    found.append((entry.name, os.stat(entry.name, dir_fd=self.fd, follow_symlinks=False)))
                except OSError:
                    continue  # gone since the listing
        return sorted(found)

    def subfolder(self, name: str, problems: Problems) -> Folder | None:
        try:
            return Folder(os.open(name, _OPEN_DIR, dir_fd=self.fd), self.child_path(name))
        except OSError as err:
            problems.add(self.child_path(name), f"cannot be opened as a folder ({err.strerror}); left alone")
            return None

    def is_file(self, name: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def read(self, name: str, limit: int, problems: Problems, missing_ok: bool = True) -> bytes | None:
        """The bytes of regular file `name` of at most `limit` bytes, or None (the problem named)."""
        where = self.child_path(name)
        try:
            seen = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            if not missing_ok:
                problems.add(where, "is gone; left alone")
            return None
        except OSError as err:
            problems.add(where, f"cannot be looked at ({err.strerror}); left alone")
            return None
        why = _unfit(seen, limit)
        if why:
            problems.add(where, why)
            return None
        try:
            fd = os.open(name, _OPEN_FILE, dir_fd=self.fd)
        except OSError as err:
            problems.add(
                where, f"cannot be read by this user ({err.strerror}); left alone, never read as root"
            )
            return None
        try:
            opened = os.fstat(fd)
            why = _unfit(opened, limit)
            if why or (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
                problems.add(where, why or "changed while it was read; left alone")
                return None
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                problems.add(where, f"grew beyond {limit} bytes while it was read; left alone")
                return None
            return b"".join(chunks)
        except OSError as err:
            problems.add(where, f"cannot be read ({err.strerror}); left alone")
            return None
        finally:
            os.close(fd)


class Unfit(Exception):
    """A file left alone; the message is the one line that says which and why."""


def read_in(folder: str, name: str, limit: int) -> bytes:
    """The bytes of `name` in `folder`, read as a run's files are (never through a link, a regular
    file of one link and at most `limit` bytes). Raises FileNotFoundError where there is none, and
    Unfit with its line for any other file left alone."""
    problems = Problems()
    opened = Folder.open_root(folder)
    try:
        data = opened.read(name, limit, problems)
    finally:
        opened.close()
    if data is None:
        lines = problems.report()
        if not lines:
            raise FileNotFoundError(os.path.join(folder, name))
        raise Unfit(os.path.join(folder, lines[0]))
    return data


def read_named(path: str, limit: int) -> bytes:
    """`read_in` for a file a person named: the links of the path as written are followed (a
    ConfigMap's mount is one), and what they lead to is read as a run's files are."""
    real = os.path.realpath(path)
    try:
        return read_in(*os.path.split(real), limit)
    except Unfit as err:
        raise Unfit(f"{path} leads to {err}" if real != os.path.abspath(path) else str(err)) from None


def _unfit(found: os.stat_result, limit: int) -> str | None:
    """Why a file of this lstat/fstat is not read, or None."""
    mode = found.st_mode
    if stat.S_ISLNK(mode):
        return "is a symbolic link, which may lead out of the run folder; left alone"
    if not stat.S_ISREG(mode):
        kind = (
            "a pipe"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        return f"is {kind}; left alone"
    if found.st_nlink != 1:
        return f"has {found.st_nlink} hard links, and may be a file from outside the run folder; left alone"
    if found.st_size > limit:
        return f"holds {found.st_size} bytes, more than the {limit} such a file may; left alone"
    return None


def _json(folder: Folder, name: str, problems: Problems) -> dict[str, Any] | None:
    data = folder.read(name, MAX_JSON_BYTES, problems)
    if data is None:
        return None
    where = folder.child_path(name)
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        problems.add(where, "is not UTF-8 text; the trainer rewrites it, or delete it")
        return None
    except json.JSONDecodeError as err:
        problems.add(
            where,
            f"is not valid JSON (line {err.lineno} column {err.colno}); the trainer rewrites it,"
            " or delete it",
        )
        return None
    except (ValueError, RecursionError):
        problems.add(
            where, "is not JSON this reader takes (nested too deeply or a number too long); delete it"
        )
        return None
    if not isinstance(value, dict):
        problems.add(where, "is not a JSON object; the trainer rewrites it, or delete it")
        return None
    return printable_data(value)


def _last_metrics(folder: Folder, problems: Problems) -> tuple[dict[str, Any] | None, int]:
    """The last complete line of metrics.jsonl (a line being written may be cut) and the line count."""
    data = folder.read(METRICS_FILE, MAX_METRICS_BYTES, problems)
    if data is None:
        return None, 0
    lines = data.decode("utf-8", errors="replace").split("\n")
    records = []
    bad = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            if number < len(lines):  # the last line may still be being written
                bad.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        problems.add(folder.child_path(METRICS_FILE), f"line {shown} is not a JSON object; skipped")
    return (printable_data(records[-1]) if records else None), len(records)


def _is_run(folder: Folder) -> bool:
    return any(folder.is_file(name) for name in RUN_FILES)


def read_run(folder: Folder, problems: Problems) -> dict[str, Any]:
    last, epochs_logged = _last_metrics(folder, problems)
    entries = folder.entries(problems)
    return {
        "name": printable(folder.path.rsplit("/", 1)[-1]),
        "path": printable(folder.path),
        "status": _json(folder, STATUS_FILE, problems),
        "summary": _json(folder, SUMMARY_FILE, problems),
        "last_metrics": last,
        "epochs_logged": epochs_logged,
        "plots": _plots(folder, problems),
        "modified": max((s.st_mtime for _, s in entries), default=0.0),
    }


def _plots(folder: Folder, problems: Problems) -> list[str]:
    return [
        printable(folder.child_path(name))
        for name, seen in folder.entries(problems)
        if name.endswith(".png") and stat.S_ISREG(seen.st_mode) and not _hidden(name)
    ]


def _hidden(name: str) -> bool:
    """A name the trainer gives only its temporary files (no run or plot starts with '.'): neither
    listed nor copied, so the table shows what `archive` copies."""
    return name.startswith(".")


def _folders(folder: Folder, problems: Problems) -> Iterator[Folder]:
    """The subfolders of `folder` but the skipped ones, opened one at a time without following a
    link; the caller closes each."""
    for name, seen in folder.entries(problems):
        if not stat.S_ISDIR(seen.st_mode) or name in SKIPPED or _hidden(name):
            continue
        child = folder.subfolder(name, problems)
        if child is not None:
            yield child


def _sweep_members(folder: Folder, problems: Problems) -> list[dict[str, Any]]:
    """The run folders numbered 0, 1, ... in `folder`, read one at a time, in their order."""
    members = []
    numbered = sorted(
        (int(name), name)
        for name, seen in folder.entries(problems)
        if stat.S_ISDIR(seen.st_mode) and _DIGITS.fullmatch(name)
    )
    for _, name in numbered:
        member = folder.subfolder(name, problems)
        if member is None:
            continue
        try:
            if _is_run(member):
                members.append(read_run(member, problems))
        finally:
            member.close()
    return members


def collect(root: str) -> dict[str, Any]:
    """Every run and sweep directly under `root`; a sweep is a folder of numbered run folders."""
    problems = Problems()
    runs, sweeps = [], []
    try:
        base = Folder.open_root(root)
    except FileNotFoundError:
        return {"root": printable(root), "exists": False, "runs": [], "sweeps": [], "problems": []}
    try:
        for folder in _folders(base, problems):
            try:
                members = _sweep_members(folder, problems)
                if members:
                    sweeps.append(
                        {
                            "name": printable(folder.path),
                            "path": printable(folder.path),
                            "members": members,
                            "plots": _plots(folder, problems),
                        }
                    )
                elif _is_run(folder):
                    runs.append(read_run(folder, problems))
            finally:
                folder.close()
    finally:
        base.close()
    return {
        "root": printable(root),
        "exists": True,
        "runs": runs,
        "sweeps": sweeps,
        "problems": problems.report(),
    }


def _plain_name(name: str) -> bool:
    return name.isprintable() and not _hidden(name)


def _add_tree(out: tarfile.TarFile, folder: Folder, depth: int, state: dict[str, Any]) -> None:
    problems: Problems = state["problems"]
    for name, seen in folder.entries(problems):
        where = folder.child_path(name)
        if name in SKIPPED:
            continue
        if not _plain_name(name):
            if not _hidden(name):
                problems.add(where, "has a name with control characters; left alone")
            continue
        if stat.S_ISDIR(seen.st_mode):
            if depth >= MAX_DEPTH:
                problems.add(where, f"lies deeper than {MAX_DEPTH} folders; left alone")
                continue
            child = folder.subfolder(name, problems)
            if child is None:
                continue
            try:
                info = tarfile.TarInfo(where)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(seen.st_mtime)
                out.addfile(info)
                _add_tree(out, child, depth + 1, state)
            finally:
                child.close()
            continue
        if state["bytes"] + seen.st_size > MAX_FETCH_BYTES:
            problems.add(where, f"would take the copy beyond {MAX_FETCH_BYTES} bytes; left alone")
            continue
        data = folder.read(name, MAX_FILE_BYTES, problems, missing_ok=False)
        if data is None:
            continue
        state["bytes"] += len(data)
        info = tarfile.TarInfo(where)
        info.size, info.mode, info.mtime = len(data), 0o644, int(seen.st_mtime)
        out.addfile(info, io.BytesIO(data))


def archive(root: str, into: BinaryIO) -> list[str]:
    """Write a tar of every regular file under `root` (but checkpoints/, hidden and oversized
    files, links, pipes and devices) to `into`; return the problems, one line per file left alone."""
    state: dict[str, Any] = {"problems": Problems(), "bytes": 0}
    base = Folder.open_root(root)
    try:
        with tarfile.open(fileobj=into, mode="w|", format=tarfile.PAX_FORMAT) as out:
            _add_tree(out, base, 0, state)
    finally:
        base.close()
    return state["problems"].report()


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--tar"]:
        problems = archive(argv[1], sys.stdout.buffer)
        sys.stdout.buffer.flush()
        print(json.dumps({"problems": problems}), file=sys.stderr)
        return 0
    print(json.dumps(collect(argv[0])))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_main(sys.argv[1:]))
    except OSError as err:
        print(f"{printable(err.filename or '')}: {err.strerror}", file=sys.stderr)
        sys.exit(1)
