"""`labctl dashboard`: the way to the lab's Grafana from the operator's machine.

A `kubectl port-forward` to Grafana's Service through the stack's kubeconfig: `--kubeconfig`, the
one the stack names (`k8scifar:kubeconfig`, with its context, once the cluster's API says Grafana's
Service is there), the one `labctl hosts up` keeps in .lab/NAME/, or the stack's secret output
`kubeconfig` (`pulumi stack output --show-secrets`). A kubeconfig from Pulumi goes to kubectl in
a file only this user may read, removed as soon as kubectl has read it. The admin password is never
printed: the command that prints it is (the secret stack output `grafanaAdminPassword`). `--print`
starts nothing and says where Grafana is and what to run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.cli.common import stackcluster
from lab.cli.common.console import CliError, console
from lab.cli.common.signals import Stopped
from lab.cli.common.stackarg import add_stack_option, load
from lab.cli.hosts import kubeconfig_file
from lab.config import LabConfig, monitoring
from lab.paths import ROOT
from trainer.inputs import integer

DEFAULT_PORT = 3000
FORWARD_TIMEOUT_S = 60
FORWARDING = re.compile(r"^Forwarding from (127\.0\.0\.1|\[::1\]):([0-9]+) ->")
PULUMI_TIMEOUT_S = 120


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dashboard",
        help="open the way to the lab's Grafana (a kubectl port-forward) and say where its password is",
        description="Forward a local port to Grafana's Service with kubectl and the stack's kubeconfig"
        " (--kubeconfig, .lab/NAME/kubeconfig from `labctl hosts up`, or the stack's secret output"
        " `kubeconfig`), and print the address, the user and the command that prints the admin"
        " password (a Pulumi secret, never printed here). Ctrl-C ends the forward.",
    )
    add_stack_option(parser)
    parser.add_argument(
        "--port",
        type=integer,
        default=DEFAULT_PORT,
        help="local port on 127.0.0.1 (default: %(default)s; 0: any free one)",
    )
    parser.add_argument("--kubeconfig", type=Path, help="use this kubeconfig instead of the stack's")
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="start nothing: print where Grafana is and the commands that reach it",
    )
    parser.set_defaults(handler=run)


def _usable(cfg: LabConfig, stack: str) -> None:
    if not cfg.installs_kubernetes:
        raise CliError(
            f"stack {stack} skips the Kubernetes install, so it has no Grafana; `labctl try` shows"
            " figures from a Prometheus of its own at the end of its run"
        )
    if cfg.provides.monitoring is not None:
        raise CliError(
            f"stack {stack} installs no Grafana: the cluster's own monitoring (k8scifar:provides.monitoring,"
            f" namespace {cfg.provides.monitoring.namespace}) scrapes the ranks; open its dashboards"
        )
    if not cfg.observability.enabled:
        raise CliError(
            f"stack {stack} has no Grafana (k8scifar:observability.enabled is false); set it to true"
            f" and run `pulumi up --stack {stack}`"
        )


def forward_command(cfg: LabConfig, kubeconfig: str, port: int, context: str | None = None) -> list[str]:
    service = f"svc/{monitoring.GRAFANA_SERVICE}"
    return [
        "kubectl",
        f"--kubeconfig={kubeconfig}",
        # The context the stack names, not the file's current-context, which anyone may change.
        *([f"--context={context}"] if context is not None else []),
        "--namespace",
        monitoring.monitoring_namespace(cfg),
        "port-forward",
        "--address=127.0.0.1",
        service,
        f"{port or ''}:{monitoring.GRAFANA_SERVICE_PORT}",
    ]


def _password_lines(stack: str) -> list[str]:
    return [
        f"  user:     {monitoring.GRAFANA_ADMIN_USER}",
        f"  password: `{monitoring.password_command(stack)}` prints it (a Pulumi secret; labctl never"
        " prints it)",
    ]


def print_only(cfg: LabConfig, stack: str, port: int, kubeconfig: Path | None) -> None:
    namespace = monitoring.monitoring_namespace(cfg)
    kept = cfg.kubeconfig or f"{kubeconfig_file(stack)} (or the stack's output `kubeconfig`)"
    shown = str(kubeconfig or kept)
    console.print(
        f"Grafana of stack {stack}: Service {monitoring.GRAFANA_SERVICE} in {namespace}, port"
        f" {monitoring.GRAFANA_SERVICE_PORT}; inside the cluster"
        f" http://{monitoring.GRAFANA_SERVICE}.{namespace}.svc.cluster.local",
        soft_wrap=True,
    )
    console.print(f"from this machine (kubeconfig: {shown}):", soft_wrap=True)
    command = forward_command(cfg, "KUBECONFIG_FILE", port or DEFAULT_PORT, _context(cfg, kubeconfig))
    console.print("  " + " ".join(command), soft_wrap=True, markup=False)
    address = f"http://127.0.0.1:{port or DEFAULT_PORT}"
    console.print(f"  then open {address} (folder {monitoring.DASHBOARD_FOLDER})")
    for line in _password_lines(stack):
        console.print(line, soft_wrap=True, markup=False)


def _pulumi_kubeconfig(stack: str) -> str:
    """The stack's secret output `kubeconfig`, read into memory: never printed, never on a command line."""
    if shutil.which("pulumi") is None:
        raise CliError(
            f"no kubeconfig for stack {stack}: {kubeconfig_file(stack)} does not exist and the Pulumi CLI"
            " (which holds the stack's output `kubeconfig`) is not installed; pass --kubeconfig PATH,"
            " or see `labctl dashboard --print`"
        )
    try:
        done = subprocess.run(
            ["pulumi", "stack", "output", "--stack", stack, "--show-secrets", "kubeconfig"],
            # Pulumi.yaml's folder, where `pulumi` finds the project.
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PULUMI_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CliError(f"`pulumi stack output` did not answer within {PULUMI_TIMEOUT_S} s") from None
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["it printed no kubeconfig"])[-1]
        raise CliError(
            f"could not read stack {stack}'s output `kubeconfig` with `pulumi stack output`: {last}"
        )
    return done.stdout


def _context(cfg: LabConfig, given: Path | None) -> str | None:
    """The context kubectl is to use: the stack's, where kubectl reads the stack's kubeconfig."""
    return cfg.kubeconfig_context if given is None else None


def _grafana_declared(cfg: LabConfig, stack: str) -> None:
    """On a stack that names a cluster's kubeconfig: the kubeconfig passes the lab's rules (its
    commands refused unless the stack allows them) before kubectl reads it, and Grafana's Service
    is there, asked through the cluster's API; CliError, one line, otherwise."""
    namespace = monitoring.monitoring_namespace(cfg)
    with stackcluster.client(cfg) as api:
        found = stackcluster.get(api, f"/api/v1/namespaces/{namespace}/services/{monitoring.GRAFANA_SERVICE}")
    if found is None:
        raise CliError(
            f"no Service {monitoring.GRAFANA_SERVICE} in namespace {namespace} of the cluster yet;"
            f" `pulumi up --stack {stack}` declares it"
        )


@contextmanager
def _kubeconfig(cfg: LabConfig, stack: str, given: Path | None) -> Iterator[tuple[Path, Path | None]]:
    """(the kubeconfig file for kubectl, the private copy to remove once kubectl has read it)."""
    if given is not None:
        if not given.is_file():
            raise CliError(f"--kubeconfig {given}: no such file")
        yield given, None
        return
    if cfg.kubeconfig is not None:
        _grafana_declared(cfg, stack)
        yield Path(cfg.kubeconfig).expanduser(), None
        return
    kept = kubeconfig_file(stack)
    if kept.is_file():
        yield kept, None
        return
    text = _pulumi_kubeconfig(stack)
    folder = Path(tempfile.mkdtemp(prefix="labctl-dashboard-"))  # 0700
    copy = folder / "kubeconfig"
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        yield copy, copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read_lines(stream: object, into: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append(line.rstrip("\n"))


def forward(cfg: LabConfig, stack: str, port: int, given: Path | None) -> int:
    if shutil.which("kubectl") is None:
        raise CliError(
            "kubectl is not installed on this machine (https://kubernetes.io/docs/tasks/tools/);"
            " `labctl dashboard --print` says where Grafana is"
        )
    with _kubeconfig(cfg, stack, given) as (path, private_copy):
        command = forward_command(cfg, str(path), port, _context(cfg, given))
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out: list[str] = []
        err: list[str] = []
        for stream, lines in ((process.stdout, out), (process.stderr, err)):
            threading.Thread(target=_read_lines, args=(stream, lines), daemon=True).start()
        try:
            local = _wait_forwarding(process, out, err, port)
            try:
                if private_copy is not None:
                    private_copy.unlink()  # kubectl has read it: no copy of the credentials stays on disk
                folder = monitoring.DASHBOARD_FOLDER
                console.print(f"Grafana of stack {stack}: http://127.0.0.1:{local} (folder {folder})")
                for line in _password_lines(stack):
                    console.print(line, soft_wrap=True, markup=False)
                console.print("Ctrl-C ends the port-forward.")
                code = process.wait()
                time.sleep(0.1)  # the readers' last lines, and a Ctrl-C that reached kubectl first
            except Stopped as stop:
                if stop.signum != signal.SIGINT:
                    raise
                console.print("the port-forward to Grafana is closed")
                return 0  # Ctrl-C is how it ends
            raise CliError(f"the port-forward ended (kubectl exit status {code}): {_last(err, out)}")
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _last(err: list[str], out: list[str]) -> str:
    lines = [line for line in err + out if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _wait_forwarding(process: subprocess.Popen[str], out: list[str], err: list[str], port: int) -> int:
    """The local port once kubectl says it forwards; CliError when it stops first."""
    deadline = time.monotonic() + FORWARD_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in list(out):
            found = FORWARDING.match(line)
            if found:
                return int(found.group(2))
        if process.poll() is not None:
            time.sleep(0.1)
            last = _last(err, out)
            hint = "; choose another --port" if port and "unable to listen" in last.lower() else ""
            raise CliError(f"kubectl port-forward to Grafana failed: {last}{hint}")
        time.sleep(0.1)
    raise CliError(
        f"kubectl port-forward to Grafana did not start within {FORWARD_TIMEOUT_S} s: {_last(err, out)}"
    )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: give a TCP port from 1 to 65535, or 0 for any free one")
    cfg = load(args)
    _usable(cfg, args.stack)
    if args.print_only:
        print_only(cfg, args.stack, args.port, args.kubeconfig)
        return 0
    return forward(cfg, args.stack, args.port, args.kubeconfig)
