"""`python -m lab.testbed.images build OUT --debian-root DIR`: build the images' archives into OUT.

Without --debian-root, a copy of the test machines' cached Debian tree with iptables, nftables and
conntrack added is made (root and network, once) and used.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab.testbed import tools
from lab.testbed.commands import TestbedError
from lab.testbed.images import debian, names
from lab.testbed.images.build import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.testbed.images", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="build every image's archive into OUT")
    make.add_argument("out", type=Path, help="folder for the archives")
    make.add_argument("--debian-root", type=Path, help="a Debian 12 root with iptables, nftables, conntrack")
    make.add_argument("--base-tree", type=Path, help="the Debian tree to add them to (without --debian-root)")
    make.add_argument("--tools-bin", type=Path, default=tools.bin_dir(), help="the tools' bin folder")
    args = parser.parse_args(argv)
    try:
        root = args.debian_root
        if root is None:
            if args.base_tree is None:
                parser.error("give --debian-root, or --base-tree to make one from")
            root = debian.tools_tree(args.base_tree)
        started = time.monotonic()
        images = build(args.tools_bin, root, args.out, log=lambda line: print(line, file=sys.stderr))
        seconds = time.monotonic() - started
    except (TestbedError, OSError) as err:
        print(f"images: {err}", file=sys.stderr)
        return 1
    for image in images:
        print(f"{image.name}\t{image.archive}\t{image.size}\t{' '.join(image.entrypoint)}")
    print(f"# {seconds:.1f} s; ClusterConfiguration: {names.CLUSTER_CONFIGURATION_TAGS}", file=sys.stderr)
    print(f"# containerd sandbox_image: {names.PAUSE_IMAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
