"""Stand-in inputs for the image builder, made in a second from this machine's own files.

The tools folder's programs are replaced by small files of known bytes (the builder only copies
them), and the Debian root with iptables, nftables and conntrack by a tree of this machine's own
Debian 12 programs under those names (`true` as each netfilter program, a library as an iptables
extension) with the libraries they load, found by the builder's own closure on `/`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lab.testbed.images import userland
from lab.testbed.images.build import CP_PROGRAMS, NETFILTER_FOLDERS, NETFILTER_PROGRAMS
from tests.support.tiers import TEST_MACHINES, costly

TOOL_PROGRAMS = ("kube", "etcd", "coredns", "flanneld", "flannel")


def fake_tools_bin(folder: Path, marker: str = "") -> Path:
    """A tools `bin` whose programs are small files saying their own name (and `marker`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOOL_PROGRAMS:
        program = folder / name
        program.write_text(f"#!/bin/sh\necho {name} {marker}\n")
        program.chmod(0o755)
    return folder


def host_debian_root(folder: Path) -> Path:
    """A Debian root holding this machine's `true` under the netfilter programs' names, its `cp`,
    an extension folder with one library in it, and everything these load."""
    stand_in = "/usr/bin/true"
    extension = "/usr/lib/x86_64-linux-gnu/libacl.so.1"
    wanted = userland.closure(Path("/"), [stand_in, *CP_PROGRAMS, extension])
    for layer_path, real in wanted.items():
        target = folder / layer_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path("/") / real, target)
    for program in NETFILTER_PROGRAMS:
        (folder / program.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(stand_in, folder / program.lstrip("/"))
    for extensions in NETFILTER_FOLDERS:
        (folder / extensions.lstrip("/")).mkdir(parents=True, exist_ok=True)
        shutil.copy2(extension, folder / extensions.lstrip("/") / "libxt_comment.so")
    for top, real in userland.MERGED_USR:
        (folder / real).mkdir(parents=True, exist_ok=True)
        (folder / top).symlink_to(real)
    return folder


@costly(
    "a package install (iptables, nftables, conntrack) into a copy of the test machines' tree",
    shares=TEST_MACHINES,
)
def netfilter_tree() -> Path:
    """The Debian 12 tree the real images are built from (lab.testbed.images.debian). It may build
    the test machines' base tree in their cache, so it takes turns with the integration tier."""
    from lab.testbed import aptproxy, rootfs
    from lab.testbed.images import debian

    return debian.tools_tree(rootfs.base_tree(aptproxy.host_mirror()))
