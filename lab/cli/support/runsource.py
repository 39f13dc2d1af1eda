"""Where `status` and `results` read run folders from: a local copy, or the NFS export over SSH."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lab.cli.support import runfolders
from lab.cli.support.console import CliError
from lab.cli.support.stackarg import load
from lab.remote.ssh import Remote
from trainer import inputs


class RunsSource(Protocol):
    @property
    def where(self) -> str: ...

    def collect(self) -> dict[str, Any]: ...

    def fetch(self, dest: Path) -> None: ...


@dataclass(frozen=True)
class LocalRuns:
    root: Path

    @property
    def where(self) -> str:
        return str(self.root)

    def collect(self) -> dict[str, Any]:
        if not self.root.is_dir():
            raise CliError(f"{self.root} is not a directory; pass the folder that holds the run folders")
        return runfolders.collect(self.root)

    def fetch(self, dest: Path) -> None:
        shutil.copytree(
            self.root, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*runfolders.SKIPPED)
        )


@dataclass(frozen=True)
class ExportRuns:
    """The runs folder on the NFS export, read with the server's own python3 and tar under sudo."""

    remote: Remote
    root: str

    @property
    def where(self) -> str:
        return f"{self.remote.node.name}:{self.root}"

    def collect(self) -> dict[str, Any]:
        done = self.remote.run(
            f"sudo -n python3 - {shlex.quote(self.root)}", stdin=Path(runfolders.__file__).read_text()
        )
        if done.returncode != 0:
            raise CliError(f"could not read {self.where}: {_last_line(done.stderr)}")
        return json.loads(done.stdout)

    def fetch(self, dest: Path) -> None:
        excludes = " ".join(f"--exclude={shlex.quote(s)}" for s in sorted(runfolders.SKIPPED))
        done = self.remote.run_bytes(f"sudo -n tar -C {shlex.quote(self.root)} {excludes} -cf - .")
        if done.returncode != 0:
            raise CliError(f"could not copy {self.where}: {_last_line(done.stderr.decode(errors='replace'))}")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            # The "data" filter refuses absolute paths, links out of dest and device files.
            archive.extractall(dest, filter="data")


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


def runs_source(args: argparse.Namespace) -> RunsSource:
    """The local copy `--runs-dir` names (no stack file needed), else `<nfs.exportPath>/runs` on
    the stack's NFS server."""
    if args.runs_dir is not None:
        return LocalRuns(args.runs_dir)
    cfg = load(args)
    return ExportRuns(Remote.of(args.stack, cfg.ssh, cfg.nfs_server), f"{cfg.nfs.export_path}/runs")
