"""The `--stack NAME` option the subcommands share, and loading the stack it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.config import STACKS_DIR, LabConfig, load_stack, stack_flags

DEFAULT_STACK = "lab"


def add_stack_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help=f"stack name: stacks/Pulumi.NAME.yaml (default: {DEFAULT_STACK})",
    )
    parser.add_argument(
        "--stacks-dir", type=Path, default=STACKS_DIR, help="folder of the stack files (default: %(default)s)"
    )


def load(args: argparse.Namespace) -> LabConfig:
    """The validated stack; a ConfigError names the file and every bad key."""
    return load_stack(args.stack, args.stacks_dir)


def flags(args: argparse.Namespace) -> str:
    """`--stack NAME [--stacks-dir DIR]` as the operator must type them again in a hint."""
    return stack_flags(args.stack, args.stacks_dir)
