"""A Debian 12 tree with the user-space tools the network images copy programs from.

kube-proxy and flanneld drive the kernel's packet filter through programs (iptables, nft,
conntrack), so their images carry those programs and the shared libraries they load, copied out of
a Debian root where the packages are installed. `tools_tree` makes one: a copy of the test
machines' cached base tree (lab/testbed/rootfs.py) with the packages added by `apt-get` in a
chroot, kept in the testbed's cache beside the base tree. Any Debian 12 root with those packages
does as well: the image builder takes the root folder as an argument.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lab.testbed.commands import run
from lab.testbed.tree_cache import cached_tree

# iptables: both backends (xtables-nft-multi, xtables-legacy-multi); nftables: nft; conntrack:
# conntrack; coreutils (in the base already): cp, which flannel's init containers run.
PACKAGES = ("iptables", "nftables", "conntrack")


def tools_tree(base: Path, mirror_proxy: str | None = None) -> Path:
    """A copy of Debian tree `base` with PACKAGES installed, built now if missing (root, network).

    `mirror_proxy`: an apt proxy URL (the testbed's apt-cacher-ng), or None for the tree's own
    sources.
    """

    def build(building: Path) -> None:
        run(["cp", "-a", "--reflink=auto", str(base), str(building)], timeout=600)
        apt = ["chroot", str(building), "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y"]
        if mirror_proxy:
            apt += ["-o", f"Acquire::http::Proxy={mirror_proxy}"]
        # The tree's /etc/resolv.conf is the base tree's; name lookups inside the chroot use the host's.
        resolv = building / "etc/resolv.conf"
        if resolv.is_symlink() or resolv.exists():
            resolv.unlink()
        shutil.copyfile("/etc/resolv.conf", resolv)
        run([*apt, "update"], timeout=600)
        run([*apt, "install", "--no-install-recommends", *PACKAGES], timeout=900)
        run(["chroot", str(building), "apt-get", "clean"])
        os.truncate(resolv, 0)

    return cached_tree("image-tools", f"{base.resolve()} {' '.join(PACKAGES)}", build)
