"""Where `status`, `wait` and `results` read run folders from: a local copy, or the folder on the
lab's node that holds them (its NFS export, or the shared folder the stack provides) over SSH."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from rich.markup import escape

from lab.cli.common.console import CliError, errors
from lab.cli.common.stackarg import load
from lab.config import LabConfig
from lab.files import extract_whole
from lab.remote.ssh import Remote
from trainer import inputs
from trainer.records import runfolders


class RunsSource(Protocol):
    @property
    def where(self) -> str: ...

    def collect(self) -> dict[str, Any]: ...

    def fetch(self, dest: Path) -> list[str]: ...


@dataclass(frozen=True)
class LocalRuns:
    root: Path

    @property
    def where(self) -> str:
        return str(self.root)

    def collect(self) -> dict[str, Any]:
        if not self.root.is_dir():
            raise CliError(f"{self.root} is not a directory; pass the folder that holds the run folders")
        try:
            return runfolders.collect(str(self.root))
        except OSError as err:
            raise CliError(f"cannot read {self.root} ({err.strerror}); pass a folder you may read") from None

    def fetch(self, dest: Path) -> list[str]:
        with tempfile.TemporaryFile() as spool:
            try:
                problems = runfolders.archive(str(self.root), spool)
            except OSError as err:
                raise CliError(
                    f"cannot read {self.root} ({err.strerror}); pass a folder you may read"
                ) from None
            spool.seek(0)
            _extract(spool, dest, self.where)
        return problems


@dataclass(frozen=True)
class ExportRuns:
    """The runs folder on the node that holds it, read by the server's own python3 as the SSH user: no
    sudo, for the trainer's files are readable by all (trainer/records/runfolders.py)."""

    remote: Remote
    root: str

    @property
    def where(self) -> str:
        return f"{self.remote.node.name}:{self.root}"

    def collect(self) -> dict[str, Any]:
        done = self.remote.run(f"python3 - {shlex.quote(self.root)}", stdin=_reader())
        if done.returncode != 0:
            raise CliError(f"could not read {self.where}: {runfolders.printable(_last_line(done.stderr))}")
        try:
            found: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise CliError(f"could not read {self.where}: its python3 answered no JSON") from None
        return found

    def fetch(self, dest: Path) -> list[str]:
        done = self.remote.run_bytes(f"python3 - --tar {shlex.quote(self.root)}", stdin=_reader().encode())
        said = done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise CliError(f"could not copy {self.where}: {runfolders.printable(_last_line(said))}")
        _extract(io.BytesIO(done.stdout), dest, self.where)
        try:
            problems: list[str] = json.loads(_last_line(said))["problems"]
        except (ValueError, KeyError, TypeError):
            problems = []
        return problems


def _reader() -> str:
    return Path(runfolders.__file__).read_text()


def _extract(archive: IO[bytes], dest: Path, where: str) -> None:
    """Unpack the reader's tar into `dest`, whole or not at all (lab.files.extract_whole, whose
    "data" filter refuses, once more, absolute paths, links, devices and anything outside `dest`)."""
    try:
        extract_whole(archive, dest)
    except tarfile.FilterError as err:
        raise CliError(f"refused to copy {where} into {dest}: {runfolders.printable(str(err))}") from None
    except tarfile.TarError as err:
        raise CliError(f"could not copy {where}: {runfolders.printable(str(err))}") from None


def print_problems(found: dict[str, Any], shown: set[str] | None = None) -> None:
    """One warning line per file of the run folders left alone (each once, with `shown`)."""
    for line in found.get("problems") or []:
        if shown is not None:
            if line in shown:
                continue
            shown.add(line)
        errors.print(f"[yellow]labctl:[/] {escape(runfolders.printable(str(line)))}", soft_wrap=True)


def run_option(name: str | None) -> str | None:
    """`--run NAME` (a run folder) or `--run SWEEP/INDEX` (a sweep's member), as the trainer names
    them (trainer.inputs.run_name); CliError for anything else, such as a path."""
    if name is None:
        return None
    parts = name.split("/")
    try:
        inputs.run_name(parts[0])
        valid = len(parts) == 1 or (len(parts) == 2 and inputs.is_digits(parts[1]))
    except ValueError:
        valid = False
    if not valid:
        raise CliError(
            f"--run {name[:60]!r} is not a run: name its folder under the runs folder"
            f" ({inputs.RUN_NAME_RULE}), or SWEEP/INDEX for a member of a sweep"
        )
    return name


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no error output"])[-1]


def unreadable_runs(cfg: LabConfig) -> str:
    """Why labctl cannot read the stack's run folders (LabConfig.runs_folder is None), and the way
    it can: a copy of them."""
    volume = cfg.provides.volume
    if not cfg.bootstraps_hosts:
        why = "a cluster's machines are its owner's and labctl logs in to none of them"
    else:
        assert volume is not None  # a lab of the stack's own holds them otherwise
        why = f"these are on volumes of StorageClass {volume.storage_class}, which no node of the lab holds"
    return (
        f"labctl reads the run folders over SSH on a node of the lab's own, and {why}; copy the"
        " runs folder and pass --runs-dir DIR"
    )


def runs_source(args: argparse.Namespace) -> RunsSource:
    """The local copy `--runs-dir` names (no stack file needed), else the stack's runs folder on
    the node that holds it (LabConfig.runs_folder) over SSH."""
    if args.runs_dir is not None:
        return LocalRuns(args.runs_dir)
    cfg = load(args)
    if cfg.runs_folder is None:
        raise CliError(unreadable_runs(cfg))
    node, folder = cfg.runs_folder
    return ExportRuns(Remote.of(args.stack, cfg.ssh, node), folder)
