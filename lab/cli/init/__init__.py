"""`labctl init`: from the machines' addresses, or a cluster's kubeconfig (the package's
`cluster`), to a checked, commented stacks/Pulumi.<name>.yaml.

The package's `stackfile` writes the file with the configuration model's own descriptions.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from rich.prompt import Prompt
from rich.table import Table

from lab.cli.common.console import CliError, console
from lab.cli.common.stackarg import add_stack_option
from lab.cli.init.cluster import cluster_values
from lab.cli.init.stackfile import render_stack
from lab.config import (
    Distribution,
    HostKeyPolicy,
    LabConfig,
    Nfs,
    Node,
    Role,
    Ssh,
    Trainer,
    load_stack,
    parse_config,
    read_stack_values,
    stack_file,
)
from lab.files import ensure_folder, write_file
from lab.remote.ssh import Remote, sudo_fix
from trainer.inputs import integer

NODE_SPEC = re.compile(r"^(?:(?P<name>[^=@]+)=)?(?P<user>[^=@]+)@(?P<address>[^=@]+)$")
# Placeholder name while the node's hostname is not known yet.
UNNAMED = "unnamed"


@dataclass(frozen=True)
class Machine:
    """A machine as the operator described it, before anything about it is detected."""

    name: str | None
    user: str
    address: str
    role: Role


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "init",
        help="write a stack file for your machines",
        description="Check SSH access and passwordless sudo on each machine, detect its GPUs and network"
        " interface, and write a commented stacks/Pulumi.NAME.yaml. Without --server it asks.",
    )
    add_stack_option(parser)
    parser.add_argument("--server", metavar="[NAME=]USER@ADDRESS", help="the control-plane machine")
    parser.add_argument(
        "--agent", metavar="[NAME=]USER@ADDRESS", action="append", default=[], help="a worker (repeatable)"
    )
    parser.add_argument("--key", default=Ssh().key_path, help="SSH private key (default: %(default)s)")
    parser.add_argument(
        "--ssh-port", type=integer, default=22, help="SSH port on every machine (default: 22)"
    )
    parser.add_argument(
        "--host-key-policy",
        choices=[p.value for p in HostKeyPolicy],
        default=HostKeyPolicy.ACCEPT_NEW.value,
        help=f"how SSH checks the machines' host keys: {Ssh.model_fields['host_key_policy'].description}",
    )
    parser.add_argument(
        "--distribution",
        choices=[d.value for d in Distribution],
        default=Distribution.K3S.value,
        help=f"Kubernetes distribution: {LabConfig.model_fields['distribution'].description}"
        " (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="a cluster that is already there: write a stack that names its kubeconfig, with its"
        " nodes, release and Kueue as its API server says (no machine is logged in to; instead of"
        " --server and --agent)",
    )
    parser.add_argument(
        "--kubeconfig-context", metavar="NAME", help="the context of --kubeconfig that names the cluster"
    )
    parser.add_argument(
        "--allow-kubeconfig-commands",
        action="store_true",
        help=LabConfig.model_fields["allow_kubeconfig_commands"].description,
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing stack file")
    parser.set_defaults(handler=run)


def parse_machine(spec: str, role: Role) -> Machine:
    match = NODE_SPEC.match(spec.strip())
    if not match:
        raise CliError(f"{spec!r} is not [NAME=]USER@ADDRESS, e.g. gpu-a=ubuntu@192.168.50.11")
    return Machine(match["name"], match["user"], match["address"], role)


def ask_machines() -> list[Machine]:
    """The machines, asked for one by one on the terminal."""
    try:
        user = Prompt.ask("SSH user on the machines", default=os.environ.get("USER") or "ubuntu")
        server = Prompt.ask("Server [NAME=]ADDRESS (control plane)")
        machines = [parse_machine(f"{_named(server)}{user}@{_address(server)}", Role.SERVER)]
        while agent := Prompt.ask("Agent [NAME=]ADDRESS (empty to finish)", default="", show_default=False):
            machines.append(parse_machine(f"{_named(agent)}{user}@{_address(agent)}", Role.AGENT))
    except EOFError:
        raise CliError("no answer on standard input; give the machines with --server and --agent") from None
    return machines


def _named(answer: str) -> str:
    """The `NAME=` part of an answer, kept as typed, or nothing."""
    name, sep, _ = answer.strip().rpartition("=")
    return f"{name}=" if sep else ""


def _address(answer: str) -> str:
    return answer.strip().rpartition("=")[2]


def run(args: argparse.Namespace) -> int:
    path = stack_file(args.stack, args.stacks_dir)
    if path.exists() and not args.force:
        raise CliError(f"{path} already exists; pass --force to overwrite it, or choose another --stack")
    if args.kubeconfig is not None:
        return _init_cluster(args, path)
    if args.kubeconfig_context is not None or args.allow_kubeconfig_commands:
        raise CliError("--kubeconfig-context and --allow-kubeconfig-commands go with --kubeconfig")
    if args.server:
        machines = [parse_machine(args.server, Role.SERVER)] + [
            parse_machine(a, Role.AGENT) for a in args.agent
        ]
    else:
        machines = ask_machines()
    ssh = {"keyPath": args.key, "port": args.ssh_port, "hostKeyPolicy": args.host_key_policy}
    # Validate what was typed before connecting anywhere: a bad address or name fails here, named.
    typed = [_node(m, m.name or f"{UNNAMED}-{i}") for i, m in enumerate(machines)]
    cfg = parse_config(_values(args, typed, ssh), "the command line")
    nodes = []
    for machine, node in zip(machines, cfg.nodes, strict=True):
        with console.status(f"checking {machine.user}@{machine.address}"):
            peer = next((m.address for m in machines if m is not machine), None)
            nodes.append(detect(machine, Remote.of(args.stack, cfg.ssh, node), peer))
    _distinct_names(nodes)
    write_checked(path, render_stack(_values(args, nodes, ssh)))
    console.print(_nodes_table(load_stack(args.stack, args.stacks_dir).nodes))
    console.print(f"wrote {path}; next: labctl doctor --stack {args.stack}")
    return 0


def _init_cluster(args: argparse.Namespace, path: Path) -> int:
    """The stack for the cluster `--kubeconfig` names, read through its API."""
    if args.server or args.agent:
        raise CliError(
            "--kubeconfig names a cluster whose nodes its API server lists; leave out --server and --agent"
        )
    values = cluster_values(args) | _editable()
    write_checked(path, render_stack(values))
    console.print(_nodes_table(load_stack(args.stack, args.stacks_dir).nodes))
    console.print(f"wrote {path}; next: labctl doctor --stack {args.stack}")
    return 0


def _distinct_names(nodes: list[dict[str, object]]) -> None:
    """Machines cloned from one image often share a hostname: ask for names instead of guessing."""
    names = [n["name"] for n in nodes]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        addresses = ", ".join(str(n["address"]) for n in nodes if n["name"] == name)
        raise CliError(
            f"the machines at {addresses} are all called {name!r}; name each one, e.g."
            " --server gpu-a=USER@ADDRESS --agent gpu-b=USER@ADDRESS (or answer gpu-a=ADDRESS when asked)"
        )


def _node(machine: Machine, name: str, **detected: object) -> dict[str, object]:
    node = {"name": name, "address": machine.address, "user": machine.user, "role": machine.role.value}
    return node | {k: v for k, v in detected.items() if v is not None}


# The blocks docs/quickstart.md sends the operator to edit, written with the model's defaults.
EDITABLE = {
    "trainer": ("model", "epochs", "batchSize", "placement", "compression"),
    "nfs": ("exportPath", "purgeOnDestroy"),
}


def _editable() -> dict[str, object]:
    defaults = {"trainer": Trainer(), "nfs": Nfs()}
    # A key whose default is unset (epochs: the model's recipe) is left out rather than written null.
    return {
        block: {
            k: v
            for k, v in defaults[block].model_dump(by_alias=True, mode="json").items()
            if k in keys and v is not None
        }
        for block, keys in EDITABLE.items()
    }


def _values(
    args: argparse.Namespace, nodes: list[dict[str, object]], ssh: dict[str, object]
) -> dict[str, object]:
    return {"distribution": args.distribution, "nodes": nodes, "ssh": ssh, **_editable()}


PROBE = """
hostname -s
if sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi
echo "gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
echo "route=$(ip -o route get {peer} 2>/dev/null || ip -o route show default 2>/dev/null | head -n1)"
"""


def detect(machine: Machine, remote: Remote, peer: str | None) -> dict[str, object]:
    """The node as found over SSH: its hostname, GPUs and the interface that reaches the peer."""
    done = remote.run(PROBE.replace("{peer}", shlex.quote(peer or "1.1.1.1")), timeout=30)
    lines = done.stdout.splitlines()
    facts = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    if facts.get("sudo") != "yes":
        raise CliError(
            f"{remote.target}: {machine.user} cannot sudo without a password; {sudo_fix(machine.user)} there"
        )
    hostname = re.sub(r"[^a-z0-9-]+", "-", (lines[0] if lines else "").lower()).strip("-")
    interface = re.search(r"\bdev (\S+)", facts.get("route", ""))
    return _node(
        machine,
        machine.name or hostname or machine.address.replace(".", "-").replace(":", "-"),
        gpus=integer(facts.get("gpus") or "0"),
        interface=interface[1] if interface else None,
    )


def write_checked(path: Path, text: str) -> None:
    """Write the stack file only once the lab's own loader accepts it."""
    ensure_folder(path.parent, 0o755)
    draft = path.with_name(f".{path.name}.draft")
    write_file(draft, text, 0o644)
    try:
        parse_config(read_stack_values(draft), source=str(path))
    except Exception:
        draft.unlink()
        raise
    draft.replace(path)


def _nodes_table(nodes: list[Node]) -> Table:
    table = Table(title="nodes", title_justify="left")
    for column in ("name", "address", "user", "role", "gpus", "interface"):
        table.add_column(column)
    for n in nodes:
        table.add_row(n.name, n.address, n.user, n.role.value, str(n.gpus), n.interface or "-")
    return table
