"""Upstream's programs for the tests that run the real thing: the Pulumi CLI, its Python language
host and the Kubernetes provider, etcd, Kubernetes 1.34, kwok, Kueue, the CNI plugins and CoreDNS.

None of them ships in PyPI or Debian. They come prebuilt from pinned upstream sources in a tools
folder (`install.sh`, `MANIFEST.tsv` with each file's version and sha256, `LINKS.tsv`): by
default `shared/tools` beside the checkout, or the folder `K8SCIFAR_TOOLS_SOURCE` names. They
are installed into a cache outside the checkout, one folder per manifest, named by the manifest's
hash: `python -m lab.testbed.tools install` (scripts/setup.sh runs it) does nothing when that
folder is complete, and `python -m lab.testbed.tools status` says in one line whether it is.
Nothing upstream is kept in this repository.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from lab.paths import ROOT

SOURCE_VARIABLE = "K8SCIFAR_TOOLS_SOURCE"
CACHE_VARIABLE = "K8SCIFAR_TOOLS_CACHE"
DEFAULT_SOURCE = ROOT.parent / "shared" / "tools"
# The manifest these tests were written against: sha256 of MANIFEST.tsv then LINKS.tsv, the value
# install.sh writes to DEST/.tools-stamp (it hashes the two files the same way). A tools folder
# with another manifest is other versions, refused until this pin moves on purpose.
MANIFEST_SHA256 = "0faec9e6fe14e82f4ec0edb83eab9db315323a980958d71aa4bbcb4eed4f2446"
STAMP = ".tools-stamp"
# What a machine without the tools folder does to get the same programs.
HOW_TO_OBTAIN = (
    f"set {SOURCE_VARIABLE} to a tools folder with MANIFEST.tsv sha256 {MANIFEST_SHA256[:12]}...,"
    " or build one from the pinned upstream sources with its build.sh (about 35 minutes on two"
    " cores; docs/tools.md lists the versions)"
)


class ToolsMissing(RuntimeError):
    """The tools are not installed and cannot be: one line saying why and what to do."""


def source() -> Path:
    return Path(os.environ.get(SOURCE_VARIABLE) or DEFAULT_SOURCE)


def cache_root() -> Path:
    given = os.environ.get(CACHE_VARIABLE)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "k8scifar" / "tools"


def install_dir() -> Path:
    """Where the pinned manifest's programs are (or will be) installed."""
    return cache_root() / MANIFEST_SHA256[:16]


def manifest_hash(folder: Path) -> str:
    """The stamp install.sh gives `folder`'s manifest: sha256 of MANIFEST.tsv then LINKS.tsv."""
    digest = hashlib.sha256((folder / "MANIFEST.tsv").read_bytes())
    links = folder / "LINKS.tsv"
    if links.exists():
        digest.update(links.read_bytes())
    return digest.hexdigest()


def complete() -> bool:
    """The cache holds the pinned manifest's programs, whole (install.sh writes the stamp last and
    renames the folder into place, so a stamp means every file was checked)."""
    stamp = install_dir() / STAMP
    return stamp.is_file() and stamp.read_text().strip() == MANIFEST_SHA256


def install() -> Path:
    """Install the pinned tools into the cache unless they are there; their folder."""
    dest = install_dir()
    if complete():
        return dest
    folder = source()
    if not (folder / "install.sh").is_file() or not (folder / "MANIFEST.tsv").is_file():
        raise ToolsMissing(f"no tools folder at {folder} (install.sh and MANIFEST.tsv); {HOW_TO_OBTAIN}")
    found = manifest_hash(folder)
    if found != MANIFEST_SHA256:
        raise ToolsMissing(
            f"the tools folder {folder} holds other versions (manifest sha256 {found[:12]}...,"
            f" pinned {MANIFEST_SHA256[:12]}...); point {SOURCE_VARIABLE} at the pinned one, or move"
            " MANIFEST_SHA256 in lab/testbed/tools.py together with the tests"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bash", str(folder / "install.sh"), str(dest)], capture_output=True, text=True)
    if done.returncode != 0 or not complete():
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ToolsMissing(f"installing the tools into {dest} failed: {reason[0]}")
    return dest


def bin_dir() -> Path:
    """The installed programs' folder; raises ToolsMissing, saying how to install them, if absent."""
    if not complete():
        raise ToolsMissing(f"the tools are not installed in {install_dir()}; run scripts/setup.sh")
    return install_dir() / "bin"


def status() -> str:
    if complete():
        return f"tools: complete in {install_dir()}"
    return f"tools: not installed in {install_dir()}; run scripts/setup.sh"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["status"]:
        print(status())
        return 0 if complete() else 1
    if args == ["install"]:
        try:
            print(f"tools: complete in {install()}")
        except ToolsMissing as err:
            print(f"tools: {err}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m lab.testbed.tools install|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
