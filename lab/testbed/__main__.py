"""`python -m lab.testbed up [--count 2]` creates the local test machines; `down` removes them."""

from __future__ import annotations

import argparse
import sys

from lab.testbed import TestbedError, down, load, up
from lab.testbed.layout import DEFAULT_NAME, DEFAULT_SUBNET, Layout
from lab.testbed.machines import login_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.testbed", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("up", help="create and boot the machines")
    create.add_argument("--count", type=int, default=2, help="machines to create (default 2)")
    create.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"private /24 (default {DEFAULT_SUBNET})")
    remove = commands.add_parser("down", help="remove every trace of the testbed")
    remove.add_argument("--purge-cache", action="store_true", help="also drop the base tree and apt cache")
    commands.add_parser("status", help="show the machines and how to reach them")
    for sub in (create, remove, commands.choices["status"]):
        sub.add_argument("--name", default=DEFAULT_NAME, help=f"testbed name (default {DEFAULT_NAME})")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            layout = Layout(args.name, args.count, args.subnet)
            up(layout)
            _describe(layout)
        elif args.command == "down":
            down(Layout(args.name), purge_cache=args.purge_cache)
            print(f"testbed {args.name!r}: removed")
        else:
            _describe(load(args.name).layout)
    except (TestbedError, ValueError) as err:
        print(f"testbed: {err}", file=sys.stderr)
        return 1
    return 0


def _describe(layout: Layout) -> None:
    print(f"testbed {layout.name!r}: bridge {layout.bridge} {layout.gateway}, apt proxy {layout.apt_proxy}")
    for machine in layout.machines:
        print(f"  {machine.name}  {machine.address}  {login_command(layout, machine)}")


if __name__ == "__main__":
    sys.exit(main())
