"""Validate a lab: `python -m lab.validation.runner --stack NAME`.

Generates the stack's inventory, runs the testinfra suite in lab/validation/suite against every node
through testinfra's `ansible://` backend, and prints one line per check and node: passed, failed
with what is wrong, or skipped with why the check does not apply to this lab.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from lab.bootstrap.inventory import build_inventory, known_hosts_file, stack_state_dir
from lab.config import STACKS_DIR, ConfigError, LabConfig, Node, SkipStep, load_stack
from lab.files import write_file
from lab.paths import ROOT
from lab.remote.server_cluster import has_cluster, no_cluster
from lab.remote.ssh import CONNECT_TIMEOUT_S, NEVER_PROMPT, Remote, SshError, sudo_fix
from lab.validation.parts import (
    AFTER_RESET_MODULE,
    ALL,
    DESCRIPTIONS,
    MODULES,
    NO_PARTS,
    Part,
    ordered,
    parse_parts,
)

SUITE = Path(__file__).resolve().parent / "suite"
SUITE_TIMEOUT_S = 1200
MARKS = {"failed": "FAIL", "error": "ERROR", "passed": "PASS", "skipped": "SKIP"}


@dataclass(frozen=True)
class Outcome:
    """One check on one node."""

    check: str
    host: str
    status: str  # passed, failed, skipped or error
    detail: str = ""

    def __str__(self) -> str:
        line = f"{MARKS[self.status]:<5} {_words(self.check)}: {self.host}"
        return f"{line}\n      {self.detail}" if self.detail else line


def write_inventory(lab: LabConfig, stack: str) -> Path:
    """The stack's generated inventory as a private YAML file for testinfra's ansible backend."""
    path = stack_state_dir(stack) / "validate-inventory.yml"
    inventory = build_inventory(lab, known_hosts_file(stack))
    # testinfra's ssh backend takes these from the inventory: no prompt, and a dead node fails fast.
    inventory["all"]["vars"]["ansible_ssh_extra_args"] = (
        f"{NEVER_PROMPT} -o ConnectTimeout={CONNECT_TIMEOUT_S}"
    )
    write_file(path, yaml.safe_dump(inventory, sort_keys=False), 0o600)
    return path


def run_suite(
    stack: str,
    inventory: Path,
    *,
    after_reset: bool = False,
    stacks_dir: Path = STACKS_DIR,
    parts: Set[Part] = ALL,
) -> list[Outcome]:
    """Run the checks of `parts` in lab/validation/suite (or, after reset, the reset checks) against
    the inventory's hosts and return every check's outcome."""
    if not after_reset and not parts:
        raise ValueError(NO_PARTS)
    modules = [AFTER_RESET_MODULE] if after_reset else [MODULES[p] for p in ordered(parts)]
    with tempfile.TemporaryDirectory(prefix="validate-") as tmp:
        report = Path(tmp) / "junit.xml"
        cmd = [
            sys.executable, "-m", "pytest", *(str(SUITE / m) for m in modules),
            f"--confcutdir={SUITE}",  # only the suite's conftest: its skips are results, not faults
            "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
            "--hosts=ansible://all", f"--ansible-inventory={inventory}",
            f"--lab-stack={stack}", f"--lab-stacks-dir={stacks_dir}",
            f"--junitxml={report}", "-o", "junit_family=xunit2",
        ]  # fmt: skip
        if after_reset:
            cmd.append("--lab-after-reset")
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=SUITE_TIMEOUT_S,
        )  # fmt: skip
        if not report.exists():
            raise RuntimeError(f"the validation suite did not run:\n{proc.stdout}{proc.stderr}")
        return parse_junit(report.read_text())


def parse_junit(xml: str) -> list[Outcome]:
    """Outcomes from pytest's junit XML; a test id `check[ansible://host]` names its host."""
    outcomes = []
    for case in ET.fromstring(xml).iter("testcase"):
        name = case.get("name", "?")
        check, _, param = name.partition("[")
        host = param.rstrip("]").removeprefix("ansible://") or "-"
        status, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                status = {"failure": "failed"}.get(kind, kind)
                detail = _first_line(element.get("message") or element.text or "")
                break
        outcomes.append(Outcome(check, host, status, detail))
    return outcomes


def _first_line(message: str) -> str:
    text = message.removeprefix("Skipped: ").removeprefix("AssertionError: ").strip()
    return text.splitlines()[0] if text else ""


def print_report(outcomes: list[Outcome], out: TextIO) -> None:
    """A line per check and result, naming the nodes it holds for, failures first; the checks
    skipped for one reason share a line, so the reason is said once. The summary counts checks,
    as the lines name them, not check-and-node results."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for o in outcomes:
        groups.setdefault((o.status, o.check, o.detail), []).append(o.host)
    skipped: dict[str, dict[str, str]] = {}  # reason -> check -> its nodes
    order = list(MARKS)
    for (status, check, detail), hosts in sorted(groups.items(), key=lambda g: order.index(g[0][0])):
        if status == "skipped":
            skipped.setdefault(detail, {})[_words(check)] = ", ".join(hosts)
        else:
            print(Outcome(check, ", ".join(hosts), status, detail), file=out)
    for detail, checks in skipped.items():
        print(Outcome(*_skipped_checks(checks), "skipped", detail), file=out)
    counts = {status: len({o.check for o in outcomes if o.status == status}) for status in MARKS}
    print(", ".join(f"{n} {status}" for status, n in counts.items() if n) or "no checks ran", file=out)


def _words(check: str) -> str:
    return check.removeprefix("test_").replace("_", " ")


def _skipped_checks(checks: dict[str, str]) -> tuple[str, str]:
    """(what, where) of checks skipped for one reason: their names and their nodes, or each
    check with its own nodes where those differ."""
    if len(checks) == 1:
        return next(iter(checks.items()))
    if len(set(checks.values())) == 1:
        return f"{len(checks)} checks ({', '.join(checks)})", next(iter(checks.values()))
    return f"{len(checks)} checks", "; ".join(f"{check} on {hosts}" for check, hosts in checks.items())


def _node_problem(lab: LabConfig, stack: str, node: Node) -> str | None:
    """Why the suite cannot check `node` (no SSH login, no passwordless sudo), or None."""
    remote = Remote.of(stack, lab.ssh, node)
    try:
        done = remote.run("sudo -n true", timeout=CONNECT_TIMEOUT_S + 20)
    except SshError as err:
        return " ".join(str(err).split())
    if done.returncode != 0:
        who = f"{node.name} ({remote.target})"
        return f"{who}: {node.user} cannot sudo without a password; {sudo_fix(node.user)}"
    return None


def reach_problems(lab: LabConfig, stack: str) -> list[str]:
    """One line per node the suite could not check, found in one connection attempt per node, at once."""
    with ThreadPoolExecutor(max_workers=len(lab.nodes)) as pool:
        found = pool.map(lambda node: _node_problem(lab, stack, node), lab.nodes)
    return [problem for problem in found if problem]


def validate(
    stack: str,
    *,
    after_reset: bool = False,
    stacks_dir: Path = STACKS_DIR,
    parts: Set[Part] | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Validate `parts` of the lab of `stack` (None: all) and print the report: 0 when every
    applicable check holds, 1 when one fails, 2 when the stack cannot be validated (bad
    configuration, missing key, a node that cannot be reached or logged in to, no cluster yet, parts
    none of whose checks could apply), each problem on one line."""
    if parts is not None and not parts:
        raise ValueError(NO_PARTS)
    if after_reset and parts is not None:
        print(
            "--only names parts of a lab, --after-reset checks that none is left: give one of the two",
            file=out,
        )
        return 2
    try:
        lab = load_stack(stack, stacks_dir)
    except ConfigError as err:
        print(err, file=out)
        return 2
    chosen = ALL if parts is None else frozenset(parts)
    if not after_reset and (problem := _nothing_to_check(lab, stack, chosen)):
        print(problem, file=out)
        return 2
    if not lab.bootstraps_hosts:
        return _validate_cluster(lab, stack, after_reset=after_reset, parts=chosen, out=out)
    key = Path(lab.ssh.key_path).expanduser()
    if not key.is_file():
        print(f"k8scifar:ssh.keyPath: {key} does not exist; point it at the key the nodes accept", file=out)
        return 2
    problems = reach_problems(lab, stack)
    in_cluster = not after_reset and lab.installs_kubernetes and chosen != {Part.HOSTS}
    if not problems and in_cluster and not has_cluster(lab, stack):
        problems = [no_cluster(lab, stack, stacks_dir)]
    if problems:
        print("\n".join(problems), file=out)
        return 2
    what = "reset left nothing behind on" if after_reset else f"validating{_naming(chosen)}"
    print(f"{what} stack {stack!r}: {', '.join(f'{n.name} ({n.address})' for n in lab.nodes)}", file=out)
    outcomes = run_suite(
        stack, write_inventory(lab, stack), after_reset=after_reset, stacks_dir=stacks_dir, parts=chosen
    )
    print_report(outcomes, out)
    return 1 if not outcomes or any(o.status in {"failed", "error"} for o in outcomes) else 0


def _nothing_to_check(lab: LabConfig, stack: str, parts: Set[Part]) -> str | None:
    """Why none of the checks of `parts` could apply to the lab (a run that would only skip and
    exit 0), or None."""
    named = ",".join(p.value for p in ordered(parts))
    if not lab.bootstraps_hosts and parts <= {Part.HOSTS}:
        return (
            f"--only {named}: stack {stack} names a cluster's kubeconfig, so no host is logged in to"
            " and nothing would be checked; name cluster or workload"
        )
    if lab.bootstraps_hosts and not lab.installs_kubernetes and Part.HOSTS not in parts:
        return (
            f"--only {named}: stack {stack} skips {SkipStep.KUBERNETES_INSTALL.value}, so there is no"
            " cluster to check; name hosts"
        )
    return None


def _naming(parts: Set[Part]) -> str:
    """` the hosts and cluster of` where a run checks only some parts; nothing where it checks all."""
    if parts == ALL:
        return ""
    return f" the {' and '.join(p.value for p in ordered(parts))} of"


def _validate_cluster(lab: LabConfig, stack: str, *, after_reset: bool, parts: Set[Part], out: TextIO) -> int:
    """The cluster's and the workload's checks through the cluster's API (lab.validation.cluster_api),
    for a stack that names a cluster's kubeconfig; 2, in one line, where they cannot run."""
    # Imported here: the Kubernetes client loads only where a command asks a cluster.
    from lab.cli.common.stackcluster import ClusterUnreachable
    from lab.validation.cluster_api import outcomes

    if after_reset:
        print(
            f"--after-reset: stack {stack} names a cluster's kubeconfig, so `pulumi destroy` resets no"
            " host; nothing to check (`labctl validate` without it checks the lab in the cluster)",
            file=out,
        )
        return 2
    try:
        found = outcomes(lab, parts)
    except ClusterUnreachable as err:
        print(err, file=out)
        return 2
    where = f"in the cluster its kubeconfig names ({lab.kubeconfig})"
    print(f"validating{_naming(parts)} stack {stack!r} {where}", file=out)
    print_report(found, out)
    return 1 if any(o.status in {"failed", "error"} for o in found) else 0


class _Union(argparse.Action):
    """A repeated `--only` adds its parts to those named before."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, (getattr(namespace, self.dest) or frozenset()) | values)


def add_parts_option(parser: argparse.ArgumentParser) -> None:
    """`--only PART,...` (the parts the run checks; None, all, by default), which `--after-reset`
    excludes."""

    def parts(text: str) -> frozenset[Part]:
        try:
            return parse_parts(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parser.add_argument(
        "--only",
        type=parts,
        action=_Union,
        default=None,
        metavar="PART[,PART]",
        help="check only these parts (all by default): "
        + "; ".join(f"{part.value}, {what}" for part, what in DESCRIPTIONS.items()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.validation.runner", description=__doc__)
    parser.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<name>.yaml)")
    parser.add_argument(
        "--after-reset", action="store_true", help="check that reset.yml left the machines clean"
    )
    add_parts_option(parser)
    args = parser.parse_args(argv)
    return validate(args.stack, after_reset=args.after_reset, parts=args.only)


if __name__ == "__main__":
    sys.exit(main())
