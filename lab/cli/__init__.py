"""`labctl`: the operator's command for the lab, before `pulumi up` (init, doctor) and after it
(validate, status, wait, results, dashboard).

A module per command; a package for a command with helpers of its own (doctor, init, status,
try_local), which holds them. What several commands share is in `common`; reaching the lab's
nodes, their cluster and its Prometheus is lab.remote's.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from lab.bootstrap.kubeconfig import KubeconfigError
from lab.bootstrap.playbook import PlaybookError
from lab.cli import dashboard, doctor, hosts, init, render, results, status, try_local, validate, wait
from lab.cli.common.console import CliError, print_error
from lab.cli.common.signals import Stopped, stopped_like_ctrl_c
from lab.config import ConfigError
from lab.files import MachineError, machine_problem
from lab.remote.server_cluster import ClusterError
from lab.remote.ssh import SshError

# Failures the operator can fix; anything else is a bug and keeps its traceback.
EXPECTED = (CliError, ConfigError, KubeconfigError, PlaybookError, SshError, ClusterError, MachineError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labctl",
        description="Prepare, check and follow the K8sCIFAR lab. The lab itself comes up with"
        " `pulumi up --stack NAME` (or, without the Pulumi CLI, `labctl hosts up` and `labctl render`);"
        " `labctl try` runs it on two local test machines.",
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for module in (try_local, init, doctor, hosts, render, validate, status, wait, results, dashboard):
        module.register(commands)
    _own_usage(parser)
    return parser


# Pulumi's verbs, which an operator may try on labctl: the lab's life is Pulumi's.
PULUMI_VERBS = ("up", "destroy", "preview", "refresh")


def _own_usage(parser: argparse.ArgumentParser) -> None:
    """Each command (and sub-command) knows its own parser, so that an unknown flag is answered
    with that command's usage rather than labctl's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.set_defaults(command_parser=command)
                _own_usage(command)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given and given[0] in PULUMI_VERBS:
        print_error(
            CliError(
                f"labctl has no `{given[0]}`: the lab's objects are Pulumi's, so run"
                f" `pulumi {given[0]} --stack NAME` in the checkout (`labctl --help` lists labctl's commands)"
            )
        )
        return 2
    args, unknown = build_parser().parse_known_args(given)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with stopped_like_ctrl_c():
            return args.handler(args)
    except EXPECTED as err:
        print_error(err)
        return 2
    except OSError as err:
        # The machine's own failure (a full or read-only disk, a file where a folder must be)
        # wherever it struck: one line with the path and the fix.
        print_error(CliError(machine_problem(err)))
        return 2
    except Stopped as stop:
        with contextlib.suppress(OSError):  # a closed terminal takes no more lines
            print_error(CliError(str(stop)))
        return stop.exit_code
