"""`labctl hosts up|down`: the host bootstrap without the Pulumi CLI.

The same provider code `pulumi up` and `pulumi destroy` run (lab/bootstrap/resource.py): site.yml or reset.yml
through lab.bootstrap.playbook in a fresh process, with the same progress lines. What Pulumi would keep in
its state (the join secrets, the kubeconfig) is kept in the stack's private state folder instead,
so a second `hosts up` keeps the tokens and changes nothing on a converged lab.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lab.bootstrap.inventory import stack_state_dir
from lab.bootstrap.playbook import PlaybookError, log_file
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs, runner_dir
from lab.cli.common.console import CliError, console
from lab.cli.common.stackarg import add_stack_option, flags, load
from lab.config import LabConfig
from lab.files import write_file
from lab.paths import STATE_DIR

RESOURCE_ID = "hosts-{stack}"


def record_file(stack: str, base: Path = STATE_DIR) -> Path:
    """The bootstrap's outputs, join secrets included (0600): what Pulumi's state holds for it."""
    return base / stack / "hosts.json"


def kubeconfig_file(stack: str, base: Path = STATE_DIR) -> Path:
    """The cluster's administrator kubeconfig (0600), for kubectl."""
    return base / stack / "kubeconfig"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "hosts",
        help="bootstrap the machines (site.yml) or reset them (reset.yml) without the Pulumi CLI",
        description="`up` runs ansible/playbooks/site.yml on the stack's machines, `down` runs reset.yml,"
        " through the same runner and provider code as `pulumi up` and `pulumi destroy`. The join"
        " secrets and the kubeconfig are kept in .lab/NAME/ (0600). Then `labctl render` writes the"
        " cluster objects for `kubectl apply -f`.",
    )
    parser.add_argument("action", choices=("up", "down"), help="up: site.yml; down: reset.yml")
    add_stack_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(handler=run)


def add_verbose_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show every Ansible task's result as it comes, not a line per play and node (the full"
        " log is kept either way)",
    )


def _write_private(path: Path, text: str) -> None:
    stack_state_dir(path.parent.name, path.parent.parent)
    write_file(path, text, 0o600)


def up(cfg: LabConfig, stack: str, verbose: bool = False, log_copy: Path | None = None) -> dict[str, Any]:
    """site.yml on the stack's machines, as `pulumi up` creates or updates the bootstrap.

    `log_copy`: where the run's full log is copied to, however the run ends (and named then).
    """
    inputs = bootstrap_inputs(cfg, stack)
    provider = HostBootstrapProvider(verbose)
    record = record_file(stack)
    with _told_above(log_file(runner_dir(stack), "site.yml"), log_copy):
        if record.exists():
            old = json.loads(record.read_text())
            outs = provider.update(RESOURCE_ID.format(stack=stack), old, inputs).outs
        else:
            outs = provider.create(inputs).outs
    if outs is None:  # the provider always returns its outputs; Pulumi's result type allows none
        raise RuntimeError("the host bootstrap returned no outputs")
    _write_private(record, json.dumps(outs))
    if outs["kubeconfig"]:
        _write_private(kubeconfig_file(stack), outs["kubeconfig"])
    return outs


def down(cfg: LabConfig, stack: str, verbose: bool = False) -> None:
    """reset.yml on the stack's machines, as `pulumi destroy` deletes the bootstrap."""
    record = record_file(stack)
    props = json.loads(record.read_text()) if record.exists() else bootstrap_inputs(cfg, stack)
    with _told_above(log_file(runner_dir(stack), "reset.yml")):
        HostBootstrapProvider(verbose).delete(RESOURCE_ID.format(stack=stack), props)
    record.unlink(missing_ok=True)
    kubeconfig_file(stack).unlink(missing_ok=True)


@contextmanager
def _told_above(log: Path, log_copy: Path | None = None) -> Iterator[None]:
    """A failed run's failures were shown in full as they came: end on one line that names the
    nodes and the full log (`log`, or its copy), not on all of them again."""
    kept = log_copy or log
    try:
        yield
    except PlaybookError as err:
        if not err.failures:
            raise  # it ended before any task failed: its message is all there is
        # Sorted: Ansible reports hosts in the order they fail, which varies from run to run.
        hosts = ", ".join(sorted({f.host for f in err.failures}))
        why = "could not be reached" if all(f.unreachable for f in err.failures) else "failed"
        then = f"; {err.aftermath}" if err.aftermath else ""
        raise CliError(
            f"{err.playbook} stopped: {hosts} {why}, as said above; every task's line is in {kept}{then}"
        ) from None
    finally:
        if log_copy is not None and log.exists():
            shutil.copyfile(log, log_copy)


def run(args: argparse.Namespace) -> int:
    cfg = load(args)
    names = ", ".join(f"{n.name} ({n.address})" for n in cfg.nodes)
    if args.action == "down":
        console.print(f"reset.yml on {names}: removing what the lab installed")
        down(cfg, args.stack, args.verbose)
        console.print(f"stack {args.stack}: the machines are as they were; the export's data is kept")
        return 0
    console.print(f"site.yml on {names}")
    outs = up(cfg, args.stack, args.verbose)
    changed = ", ".join(f"{host} {count} changed" for host, count in sorted(outs["changed"].items()))
    console.print(f"stack {args.stack}: bootstrapped ({changed})")
    if outs["kubeconfig"]:
        console.print(
            f"kubeconfig in {kubeconfig_file(args.stack)}; next: labctl render {flags(args)} DIR,"
            f" then KUBECONFIG={kubeconfig_file(args.stack)} kubectl apply -f DIR"
        )
    return 0
