"""`labctl try`: the lab's main job on local test machines (two unless `--machines` says), in one
command (root).

It brings up that many systemd-nspawn machines (lab.testbed), bootstraps them with the real roles
through the runner `pulumi up` uses (`labctl hosts up`, with the `testbed` stack's settings, which
skip the Kubernetes install), trains CIFAR-10 with DDP across all of them (one torchrun per machine,
ranks talking Gloo over the machines' own links: lab.testbed.ddp) while a real Prometheus on this
machine scrapes each rank's metrics (lab.cli.try_local.metrics), copies results, plots and the
scraped series out, runs the validation suite, and removes everything, also when interrupted.

Its parts are the package's modules: the data it trains on (`dataset`), how long it says it takes
(`duration`), and what watches the ranks (`metrics`: a `local_prometheus`, and a `node_exporter` per
machine).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from lab import testbed
from lab.cli import hosts
from lab.cli.common.console import CliError, console
from lab.cli.common.runsource import LocalRuns
from lab.cli.common.signals import uninterrupted
from lab.cli.hosts import add_verbose_option
from lab.cli.try_local import dataset, metrics
from lab.cli.try_local.duration import estimate, minutes_range
from lab.config import PROJECT, LabConfig, load_stack, read_stack_values, stack_file
from lab.files import write_file
from lab.paths import STATE_DIR
from lab.remote import prometheus
from lab.testbed import ddp
from lab.testbed.commands import missing_tools
from lab.testbed.layout import MAX_MACHINES, Layout
from lab.testbed.machines import login_command
from lab.validation.runner import validate
from trainer import contract
from trainer.hyperparameters import nearest_batch
from trainer.inputs import integer

# Its own machines and addresses, apart from the test machines the integration tests use.
TESTBED_NAME = "try"
SUBNET = "10.77.2.0/24"
STACK = "try"  # the state it keeps in .lab/try/ while it runs
MACHINES = 2  # unless --machines says otherwise: a server and an agent, as the reference lab
BASE_STACK = "testbed"  # whose settings the machines get (stacks/Pulumi.testbed.yaml)
COLLECTIVE_TIMEOUT_S = 30
EPOCHS = {"generated": 4, "real": 1}
BOOTSTRAP_LOG = "bootstrap.log"  # in the run folder: site.yml's full log, every task's line


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "try",
        help="run the lab's main job on local test machines (root, a few minutes)",
        description="Bring up local test machines (systemd-nspawn; two unless --machines says), bootstrap"
        " them with the lab's Ansible roles, train CIFAR-10 with DDP across all of them (a rank per"
        " machine), write results and plots, run the"
        " validation suite, and remove the machines. Needs root and the Debian packages"
        " debootstrap, systemd-container and apt-cacher-ng (scripts/setup.sh as root installs them)."
        " Kubernetes is not installed on these machines.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="real CIFAR-10: the folder that holds cifar-10-batches-py/ (default: download it, or"
        " generate a CIFAR-format set when that fails)",
    )
    parser.add_argument(
        "--generated",
        action="store_true",
        help="train on a generated CIFAR-format set without trying to download CIFAR-10 (quickest)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("try-results"),
        help="folder for the run's results (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=integer, help="epochs (default: 4 on generated data, 1 on CIFAR-10)")
    parser.add_argument(
        "--machines",
        type=integer,
        default=MACHINES,
        metavar="N",
        help=f"machines, a rank on each: a server and N-1 agents, 2 to {MAX_MACHINES} (default: %(default)s)",
    )
    add_verbose_option(parser)
    parser.add_argument("--keep", action="store_true", help="leave the machines up afterwards")
    parser.add_argument("--down", action="store_true", help="only remove the machines a --keep run left")
    parser.set_defaults(handler=run)


def layout(machines: int = MACHINES) -> Layout:
    return Layout(TESTBED_NAME, machines, SUBNET)


def _check(args: argparse.Namespace) -> None:
    """Every reason it cannot run, before anything is made: the command line's own first."""
    if args.epochs is not None and args.epochs < 1:
        raise CliError(f"--epochs {args.epochs}: give at least 1")
    if not MACHINES <= args.machines <= MAX_MACHINES:
        raise CliError(
            f"--machines {args.machines}: give {MACHINES} to {MAX_MACHINES} (a server and at least one"
            " agent, and the test machines' subnet holds at most that many)"
        )
    problem = _unwritable(args.out)
    if problem:
        raise CliError(f"--out {args.out}: {problem}; name a folder this user can write")
    if os.geteuid() != 0:
        raise CliError("labctl try needs root (network namespaces, mounts, machines): run it with sudo")
    missing = missing_tools() + metrics.missing_tools()
    if missing:
        raise CliError(
            f"missing host tools: {', '.join(missing)}; install them with scripts/setup.sh as root"
        )


def _refuse_leftovers() -> None:
    """Machines left up, looked for once this try holds the lock: a try still running holds it,
    so what is found here is a finished `--keep` run's (or a killed one's), never a running try's."""
    if testbed.leftovers(layout()):
        raise CliError(
            "the machines of an earlier `labctl try --keep` are still up;"
            " remove them with `labctl try --down`"
        )


def _unwritable(out: Path) -> str | None:
    """Why the results could not be written to `out` (nor the folder made), found by making a
    folder where they would go: a file in the way, a read-only mount, /proc; None when they can."""
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".labctl-try-", dir=existing))
    except OSError as err:
        return f"cannot write in {existing} ({err.strerror or err})"
    return None


def _plan(args: argparse.Namespace, epochs: int, images: int) -> None:
    lay = layout(args.machines)
    low, high = minutes_range(images, epochs, args.machines)
    data = (
        f"CIFAR-10 from {args.data}"
        if args.data
        else "CIFAR-10 if this machine can download it, else a generated set"
    )
    if args.generated:
        data = "a generated CIFAR-format set (--generated)"
    ending = "the machines stay up (--keep)"
    if not args.keep:
        ending = "everything removed, also on Ctrl-C, a kill or a closed terminal"
    console.print(
        f"labctl try: the lab's main job on {lay.count} local machines, {low:g} to {high:g} minutes on"
        " 2 cores (the longer on a busy machine).\n"
        f"  1. {lay.count} Debian 12 machines (systemd-nspawn) on a private bridge: "
        f"{', '.join(f'{m.name} {m.address}' for m in lay.machines)}\n"
        f"  2. bootstrap with the lab's Ansible roles through the runner `pulumi up` uses"
        f" (stack {BASE_STACK}'s settings: packages, kernel settings, NFS export folders, registry mirror)\n"
        f"  3. DDP training across the {lay.count} machines, one rank each, over their own network: {data},"
        f" {epochs} epochs of a narrow network; a Prometheus on this machine scrapes every rank and each"
        f" machine's node exporter every {metrics.SCRAPE_INTERVAL_S} s and is asked for the ranks'"
        " figures at the end\n"
        f"  4. results and plots into {args.out}/, then the validation suite\n"
        f"  5. {ending}\n"
        "  Not covered here: Kubernetes (no k3s or kubelet inside these machines; the stack skips the"
        " install), so no registry, image build or pods: the same trainer runs under torchrun instead."
    )


def _step(text: str) -> None:
    console.print(f"[bold]{text}[/]")


@contextmanager
def _timed(text: str) -> Iterator[None]:
    began = time.monotonic()
    _step(f"{text} ...")
    yield
    console.print(f"  done in {time.monotonic() - began:.0f} s")


def stack_values(lay: Layout) -> dict[str, Any]:
    """The `testbed` stack's settings on `lay`'s machines: its server on the first machine, an
    agent like its own on each of the others, a rank each."""
    values = read_stack_values(stack_file(BASE_STACK))
    server, agent = values["nodes"]
    values["nodes"] = [
        (server if index == 0 else agent) | {"name": machine.name, "address": machine.address}
        for index, machine in enumerate(lay.machines)
    ]
    values["ssh"] = values.get("ssh", {}) | {"keyPath": str(lay.key)}
    values["trainer"] = values["trainer"] | {
        "replicas": lay.count,
        "batchSize": nearest_batch(values["trainer"]["batchSize"], lay.count),
    }
    return values


def _write_stack(lay: Layout) -> LabConfig:
    """stack_values(lay) as stack `try` in the testbed's state."""
    values = stack_values(lay)
    folder = stacks_dir(lay)
    folder.mkdir(mode=0o700)
    content = {"config": {f"{PROJECT}:{key}": value for key, value in values.items()}}
    write_file(stack_file(STACK, folder), yaml.safe_dump(content, sort_keys=False), 0o644)
    return load_stack(STACK, folder)


def stacks_dir(lay: Layout) -> Path:
    return lay.state / "stacks"


def _follow(job: ddp.DdpJob, timeout: float) -> list[int]:
    """Print rank 0's progress lines as they come; every torchrun's exit status."""
    shown, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        new, shown = job.lines_since(shown)
        for line in new:
            if line.node == 0 and line.text.startswith(("epoch ", "done:", "resumed from")):
                console.print(f"  {line.text}", soft_wrap=True, markup=False)
        if all(proc.poll() is not None for proc in job.procs):
            return job.wait(1)
        time.sleep(0.5)
    return job.wait(1)


def _train(lay: Layout, data: dataset.Dataset, epochs: int, name: str, runs: Path, metrics_port: int) -> None:
    args = [
        *ddp.small_run(data.root, runs, name, epochs, lay.count),
        *("--metrics-port", str(metrics_port), "--metrics-linger", str(metrics.LINGER_S)),
    ]
    job = ddp.DdpJob(lay, args, name, COLLECTIVE_TIMEOUT_S)
    job.start()
    try:
        codes = _follow(job, timeout=estimate(data.images, epochs, lay.count) * 4 + metrics.LINGER_S)
    finally:
        job.stop()
    if any(codes):
        last = job.output(last=1).split("] ", 1)[-1]
        raise CliError(f"training failed (torchrun exit codes {codes}): {last}")


def _hand_over(folder: Path) -> None:
    """Give the results to the user who ran sudo, not to root."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if uid and gid:
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, int(uid), int(gid))


def _summary_line(run_folder: Path) -> str:
    summary: dict[str, Any] = json.loads((run_folder / contract.SUMMARY_FILE).read_text())
    backend = summary.get("backend", contract.GLOO)
    data = summary[contract.TRAINED_ON]
    return (
        f"{summary['world_size']} ranks ({backend}), {summary['epochs']} epochs on {data}:"
        f" test accuracy {summary['final_test_acc']:.2%} (best {summary['best_test_acc']:.2%}),"
        f" {summary['wall_seconds']:.0f} s of training"
    )


def remove(lay: Layout) -> None:
    """The machines and the stack's state, whatever is left of them; no stop signal cuts it short."""
    with uninterrupted():
        try:
            testbed.down(lay)
            shutil.rmtree(STATE_DIR / STACK, ignore_errors=True)
        except testbed.TestbedError as err:
            raise CliError(str(err)) from None


def _validate(lay: Layout, run_folder: Path) -> int:
    report = io.StringIO()
    code = validate(STACK, stacks_dir=stacks_dir(lay), out=report)
    console.print(report.getvalue().rstrip(), soft_wrap=True, markup=False)
    write_file(run_folder / "validation.txt", report.getvalue(), 0o644)
    return code


def _run_all(args: argparse.Namespace, lay: Layout, work: Path, name: str) -> int:
    _step(f"data: checking {args.data}" if args.data else "data: preparing the training images")
    data = dataset.choose(args.data, args.generated, work)
    console.print(f"  {data.note}", soft_wrap=True)
    epochs = args.epochs or EPOCHS["real" if data.real else "generated"]
    with _timed(f"1/5 machines: creating and booting {lay.count} Debian 12 machines"):
        testbed.up(lay)
    run_folder = args.out / name
    run_folder.mkdir(parents=True, exist_ok=True)
    cfg = _write_stack(lay)
    port = cfg.observability.metrics_port  # where the ranks serve, as in the lab's pods
    # Started now: Prometheus hands new targets to its scrapers only every 5 s (its discovery
    # manager's update interval), and the first steps come soon after training starts.
    with metrics.watching(lay, port, work) as watched:
        with _timed("2/5 bootstrap: site.yml with the lab's roles (a line per play and machine)"):
            # The full log, every task's line, kept with the run: the stack's state goes at teardown.
            hosts.up(cfg, STACK, args.verbose, log_copy=run_folder / BOOTSTRAP_LOG)
        ranks = ", ".join(f"rank {rank} on {machine.name}" for rank, machine in enumerate(lay.machines))
        with _timed(
            f"3/5 training: DDP, {ranks}, {epochs} epochs; Prometheus ({watched.server.api.url})"
            f" scrapes them on port {port}"
        ):
            _train(lay, data, epochs, name, work / "runs", port)
        try:
            figures = watched.figures(name)
        except prometheus.PrometheusError as err:
            figures = [str(err)]
    LocalRuns(work / "runs").fetch(args.out)
    watched.keep(run_folder)
    console.print(f"  {_summary_line(run_folder)}")
    console.print(
        "  asked of Prometheus on this machine, which scraped every rank as they trained (each rank's"
        " final figures: a finished rank waits to be scraped before it exits):"
    )
    for line in figures:
        console.print(f"    {line}", soft_wrap=True, markup=False)
    with _timed(f"4/5 validation: the testinfra suite against the {lay.count} machines"):
        code = _validate(lay, run_folder)
    console.print(
        f"results and plots in {run_folder}/: summary.json, metrics.jsonl, curves.png, validation.txt,"
        f" {BOOTSTRAP_LOG}, and the series Prometheus scraped ({metrics.DATA_FOLDER}/, with its"
        f" {metrics.CONFIG_FILE})"
    )
    console.print(
        f"  labctl results --runs-dir {args.out}   # every run there; status --runs-dir: the latest"
    )
    return code


def run(args: argparse.Namespace) -> int:
    if args.down:
        # A try that is running holds the lock until its own teardown: its machines are not
        # leftovers, so --down waits for it rather than pulling them from under it.
        with testbed.exclusive(_waiting_to_remove):
            remove(layout())
        console.print("the machines of `labctl try` are removed")
        return 0
    if args.data:
        dataset.given(args.data)
    _check(args)
    lay = layout(args.machines)
    images = 50_000 if args.data else dataset.GENERATED_IMAGES[0]
    with testbed.exclusive(_waiting), tempfile.TemporaryDirectory(prefix="k8scifar-try-") as work:
        _refuse_leftovers()
        _plan(args, args.epochs or EPOCHS["real" if args.data else "generated"], images)
        began = time.monotonic()
        completed = False
        try:
            code = _run_all(args, lay, Path(work), f"try-{datetime.now(UTC):%Y%m%d-%H%M%S}")
            completed = True
        finally:
            with uninterrupted():
                if args.out.exists():
                    _hand_over(args.out)
                if completed and args.keep:
                    _kept(lay)
                else:
                    # After a SIGHUP the terminal is gone: the teardown runs unseen.
                    with contextlib.suppress(OSError):
                        _step("5/5 teardown: removing the machines" + ("" if completed else " (stopped)"))
                    remove(lay)
    console.print(f"labctl try finished in {(time.monotonic() - began) / 60:.1f} minutes")
    return code


def _waiting() -> None:
    console.print(
        f"waiting for a test run or another `labctl try` on this machine to finish ({testbed.LOCK})"
    )


def _waiting_to_remove() -> None:
    console.print(
        "a `labctl try` or a test run is using the test machines: waiting for it to finish before"
        f" removing them ({testbed.LOCK}; Ctrl-C stops waiting and removes nothing)"
    )


def _kept(lay: Layout) -> None:
    _step("5/5 the machines stay up (--keep):")
    for machine in lay.machines:
        console.print(f"  {login_command(lay, machine)}   # {machine.name}", soft_wrap=True)
    console.print(f"  labctl validate --stack {STACK} --stacks-dir {stacks_dir(lay)}")
    console.print("  remove them with: labctl try --down")
