"""`labctl doctor`: everything a `pulumi up` needs, checked before it runs, each finding with its fix."""

from __future__ import annotations

import argparse

from lab.cli.support import bandwidth, operator_checks, preflight
from lab.cli.support.console import CliError, Finding, Level, console, plural, print_findings
from lab.cli.support.ddp_cost import ADVICE_TEXT, Advice, ddp_cost
from lab.cli.support.stackarg import add_stack_option, load
from lab.config import Compression, LabConfig, Placement
from lab.remote.ssh import Remote, SshError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check the operator's machine and the nodes before `pulumi up`",
        description="Preflight: Pulumi CLI, Python dependencies, SSH and sudo, OS, GPU driver, time"
        " sync, free ports, the configured interfaces, the trainer's uid, two nodes on one machine, an"
        " existing cluster the lab did not install, the host firewall when the ranks use the host"
        " network, and the bandwidth between the nodes with what it means for DDP."
        " Exits 1 when any finding is an error.",
    )
    add_stack_option(parser)
    parser.add_argument(
        "--bandwidth-mib", type=int, default=256, help="MiB streamed between the nodes (default: %(default)s)"
    )
    parser.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth measurement")
    parser.add_argument(
        "--nodes-only", action="store_true", help="skip the operator's machine (Pulumi CLI, Python packages)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    cfg = load(args)
    findings = []
    if not args.nodes_only:
        with console.status("checking the operator's machine"):
            findings += [
                operator_checks.pulumi_cli(),
                operator_checks.python_dependencies(),
                operator_checks.python_imports(),
            ]
    machines: dict[str, str] = {}
    for node in cfg.nodes:
        with console.status(f"checking {node.name} ({node.address})"):
            findings += preflight.node_findings(cfg, args.stack, node, machines)
    reachable = not any(f.check == "SSH" and f.level is Level.ERROR for f in findings)
    if len(cfg.nodes) > 1 and reachable and not args.no_bandwidth:
        with console.status(f"measuring the link between {cfg.nodes[0].name} and {cfg.nodes[1].name}"):
            findings.append(link_finding(cfg, args.stack, args.bandwidth_mib))
    print_findings(f"labctl doctor --stack {args.stack}", findings)
    counts = {level: sum(f.level is level for f in findings) for level in Level}
    warnings, errors = plural(counts[Level.WARNING], "warning"), plural(counts[Level.ERROR], "error")
    console.print(f"{counts[Level.OK]} ok, {warnings}, {errors}")
    return 1 if counts[Level.ERROR] else 0


def link_finding(cfg: LabConfig, stack: str, mebibytes: int) -> Finding:
    """The measured link between the first two nodes, and what it means for the configured run."""
    sender, receiver = (Remote.of(stack, cfg.ssh, node) for node in cfg.nodes[:2])
    where = f"{sender.node.name}->{receiver.node.name}"
    try:
        link = bandwidth.measure(sender, receiver, cfg.trainer.port, mebibytes)
    except (CliError, SshError) as err:
        return Finding(where, "bandwidth", Level.ERROR, str(err), "fix the link, then run doctor again")
    can_pack = cfg.has_gpus and max(n.gpus for n in cfg.nodes) >= cfg.replicas
    cost = ddp_cost(
        cfg.trainer.model, cfg.replicas, cfg.trainer.batch_size, link.bits_per_second, cfg.has_gpus, can_pack
    )
    detail = f"{link.describe()}; {cfg.trainer.model} on {cfg.replicas} ranks: {cost.explain()}"
    if _configured_for(cfg, cost.advice):
        return Finding(where, "bandwidth", Level.OK, f"{detail}; the stack already suits it")
    return Finding(where, "bandwidth", Level.WARNING, detail, ADVICE_TEXT[cost.advice])


def _configured_for(cfg: LabConfig, advice: Advice) -> bool:
    """Whether the stack already follows the advice (packed ranks never cross the link)."""
    compression = cfg.trainer.compression
    return (
        advice is Advice.SPREAD
        or cfg.trainer.placement is Placement.PACK
        or (advice is Advice.COMPRESS and compression is not Compression.NONE)
        or (advice is Advice.POWERSGD and compression is Compression.POWERSGD)
    )
