"""`labctl validate`: the lab's testinfra suite against the stack's nodes (lab/validation/runner.py
runs it)."""

from __future__ import annotations

import argparse

from lab.cli.common.stackarg import add_stack_option, load
from lab.validation.runner import add_parts_option, validate


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "validate",
        help="run the validation suite against the lab",
        description="Generate the inventory from the stack, run the testinfra suite (host checks, and"
        " the cluster's and the workload's checks once the cluster is up) and print its report. Exits"
        " non-zero on a failure.",
    )
    add_stack_option(parser)
    parser.add_argument(
        "--after-reset", action="store_true", help="check instead that `pulumi destroy` left the nodes clean"
    )
    add_parts_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    load(args)  # a bad stack file is reported here, in one line, before the suite starts
    return validate(args.stack, after_reset=args.after_reset, stacks_dir=args.stacks_dir, parts=args.only)
