"""`labctl doctor`: everything a `pulumi up` needs, checked before it runs, each finding with its fix.

Its checks are the package's modules: the operator's machine against the lock (`operator_checks`,
`locks`), each node over SSH (`preflight`, `gpu_fit`), the links between the nodes (`bandwidth`),
and what the slowest link means for DDP (`ddp_cost`); on a stack that names a cluster's
kubeconfig, that cluster through its API in place of the nodes and links (`cluster_checks`).
"""

from __future__ import annotations

import argparse
import itertools

from lab.cli.common.console import CliError, Finding, Level, console, plural, print_findings
from lab.cli.common.stackarg import add_stack_option, load
from lab.cli.doctor import bandwidth, cluster_checks, operator_checks, preflight
from lab.cli.doctor.ddp_cost import ADVICE_TEXT, Advice, ddp_cost
from lab.config import Compression, LabConfig, Placement
from lab.remote.ssh import Remote, SshError
from trainer.inputs import integer


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check the operator's machine and the nodes before `pulumi up`",
        description="Preflight: Pulumi CLI, Python dependencies, SSH and sudo, OS, GPU driver, time"
        " sync, free ports, the configured interfaces, the trainer's uid, two nodes on one machine, an"
        " existing cluster the lab did not install, the host firewall when the ranks use the host"
        " network, the bandwidth between every pair of nodes, and what the slowest link means for DDP at"
        " the planned world size. On a stack that names a cluster's kubeconfig, the cluster through its API"
        " instead of the nodes over SSH: it answers, the stack's nodes and their GPUs, and Kueue as the"
        " stack says."
        " Exits 1 when any finding is an error.",
    )
    add_stack_option(parser)
    parser.add_argument(
        "--bandwidth-mib",
        type=integer,
        default=256,
        help="MiB streamed between the nodes (default: %(default)s)",
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
    if cfg.bootstraps_hosts:
        machines: dict[str, str] = {}
        for node in cfg.nodes:
            with console.status(f"checking {node.name} ({node.address})"):
                findings += preflight.node_findings(cfg, args.stack, node, machines)
    else:
        findings.append(cluster_checks.hosts_skipped(cfg))
        with console.status(f"checking the cluster of {cfg.kubeconfig}"):
            findings += cluster_checks.cluster_findings(cfg)
    reachable = not any(f.check == "SSH" and f.level is Level.ERROR for f in findings)
    links: list[bandwidth.Measurement] = []
    # The bandwidth is measured over SSH between the nodes: a cluster's owner's machines are not.
    if len(cfg.nodes) > 1 and cfg.bootstraps_hosts and reachable and not args.no_bandwidth:
        link_results, links = link_findings(cfg, args.stack, args.bandwidth_mib)
        findings += link_results
    if cfg.batch_note:
        findings.append(Finding("lab", "batch", Level.OK, cfg.batch_note))
    print_findings(f"labctl doctor --stack {args.stack}", findings)
    if len(links) > 1:
        console.print(bandwidth.matrix(cfg.nodes, links))
    counts = {level: sum(f.level is level for f in findings) for level in Level}
    warnings, errors = plural(counts[Level.WARNING], "warning"), plural(counts[Level.ERROR], "error")
    console.print(f"{counts[Level.OK]} ok, {warnings}, {errors}")
    return 1 if counts[Level.ERROR] else 0


def link_findings(
    cfg: LabConfig, stack: str, mebibytes: int
) -> tuple[list[Finding], list[bandwidth.Measurement]]:
    """Every pair of nodes measured (a finding each), and what the slowest link means for the
    planned run: a ring all-reduce moves at the pace of its slowest hop, so that link decides."""
    findings, links = [], []
    for first, second in itertools.combinations(cfg.nodes, 2):
        sender, receiver = (Remote.of(stack, cfg.ssh, node) for node in (first, second))
        where = f"{first.name}->{second.name}"
        with console.status(f"measuring the link between {first.name} and {second.name}"):
            try:
                link = bandwidth.measure(sender, receiver, cfg.trainer.port, mebibytes)
            except (CliError, SshError) as err:
                findings.append(
                    Finding(where, "bandwidth", Level.ERROR, str(err), "fix the link, then run doctor again")
                )
                continue
        links.append(link)
        findings.append(Finding(where, "bandwidth", Level.OK, link.describe()))
    if links:
        findings.append(_speedup_finding(cfg, min(links, key=lambda link: link.bits_per_second)))
    return findings, links


def _speedup_finding(cfg: LabConfig, slowest: bandwidth.Measurement) -> Finding:
    """The expected speed-up of the planned world over one rank, on the slowest link."""
    can_pack = cfg.has_gpus and max(n.gpus for n in cfg.nodes) >= cfg.replicas
    cost = ddp_cost(
        cfg.trainer.model, cfg.replicas, cfg.batch_size, slowest.bits_per_second, cfg.has_gpus, can_pack
    )
    detail = (
        f"slowest link {slowest.describe()}; {cfg.trainer.model} on {cfg.replicas} ranks, batch"
        f" {cfg.batch_size}: {cost.explain()}"
    )
    if _configured_for(cfg, cost.advice):
        return Finding("lab", "DDP speed-up", Level.OK, f"{detail}; the stack already suits it")
    return Finding("lab", "DDP speed-up", Level.WARNING, detail, ADVICE_TEXT[cost.advice])


def _configured_for(cfg: LabConfig, advice: Advice) -> bool:
    """Whether the stack already follows the advice (packed ranks never cross the link)."""
    compression = cfg.trainer.compression
    return (
        advice is Advice.SPREAD
        or cfg.trainer.placement is Placement.PACK
        or (advice is Advice.COMPRESS and compression is not Compression.NONE)
        or (advice is Advice.POWERSGD and compression is Compression.POWERSGD)
    )
