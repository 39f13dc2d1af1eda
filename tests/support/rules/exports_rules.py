"""What the kernel NFS server's own tool, Debian's `exportfs` (nfs-kernel-server), makes of an
exports file: the real parser of nfs-utils, run on the file and nothing else.

exportfs reads /etc/exports and /etc/exports.d/*.exports with one parser (exports(5): "the
format of the files in /etc/exports.d is the same as /etc/exports") and writes what it
understood to /var/lib/nfs/etab. In a private mount namespace the file is bound over
/etc/exports, an empty directory over /etc/exports.d and /var/lib/nfs, and a tmpfs over the
export's top directory (exportfs skips a path it cannot stat): nothing of the machine's own NFS
state is read or changed. Needs root (CI runs as root).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

EXPORTFS = "/usr/sbin/exportfs"
ETAB_MARK = "--- etab"


@dataclass(frozen=True)
class Export:
    """One line of etab: a path exported to one client with the options exportfs settled on."""

    path: str
    client: str
    options: frozenset[str]


def can_run() -> str:
    """'' when exportfs can run here, else why not."""
    if os.geteuid() != 0:
        return "exportfs needs root for a private mount namespace; CI runs as root"
    if not Path(EXPORTFS).exists() or shutil.which("unshare") is None:
        return "exportfs is missing: install Debian's nfs-kernel-server (scripts/apt-packages.txt)"
    return ""


def _etab_path(field: str) -> str:
    # etab writes unusual characters of a path as backslash and three octal digits (exports(5)).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def run_exportfs(exports: str, directories: list[str]) -> tuple[str, list[Export]]:
    """exportfs -ra on `exports` alone, with `directories` present; its complaints and the etab it wrote."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "exports").write_text(exports)
        for name in ("exports.d", "nfs"):
            (work / name).mkdir()
        tops = sorted({"/" + PurePosixPath(d).parts[1] for d in directories})
        script = "\n".join(
            [
                "set -e",
                f"mount --bind {work / 'exports'} /etc/exports",
                f"if [ -d /etc/exports.d ]; then mount --bind {work / 'exports.d'} /etc/exports.d; fi",
                f"mount --bind {work / 'nfs'} /var/lib/nfs",
                *(f"mkdir -p {shlex.quote(t)} && mount -t tmpfs tmpfs {shlex.quote(t)}" for t in tops),
                *(f"mkdir -p {shlex.quote(d)}" for d in directories),
                f"{EXPORTFS} -ra 2>&1 || true",
                f"echo {ETAB_MARK}",
                "cat /var/lib/nfs/etab",
            ]
        )
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    said, _, etab = done.stdout.partition(f"{ETAB_MARK}\n")
    exports_found = []
    for line in etab.splitlines():
        path, client = line.split("\t")
        host, _, options = client.partition("(")
        exports_found.append(Export(_etab_path(path), host, frozenset(options.rstrip(")").split(","))))
    return said.strip(), exports_found
