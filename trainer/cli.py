"""The command line: `train`, `launch`, `probe`, `data download|synthetic`, `sweep generate|report`.

Heavy imports (torch, matplotlib) happen inside the commands that need them, so `probe` (a pod's
readiness check, run every few seconds) and the sweep commands start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from trainer import contract, inputs, sweep
from trainer.errors import ELASTIC_ERROR_FILE, MachineError, TrainerError, machine_problem, report
from trainer.hyperparameters import CIFAR10_TRAIN_IMAGES, HYPERPARAMETERS, Choice, HyperparameterError, Rule


def _rule(rule: Rule) -> Callable[[str], Any]:
    """An argparse type for a hyperparameter, checked by its rule in trainer.hyperparameters."""

    def parse(text: str) -> Any:
        try:
            return rule.parse(text)
        except HyperparameterError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = rule.kind.__name__
    return parse


def _positive(text: str) -> int:
    try:
        value = inputs.integer(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be an integer above 0, got {inputs.excerpt(text)}")
    return value


def _count(high: int) -> Callable[[str], int]:
    """An argparse type for a count or an index from 0 to `high`, in the digits 0-9 as
    JOB_COMPLETION_INDEX is read (Python's int() takes any script's digits)."""

    def parse(text: str) -> int:
        try:
            value = inputs.integer(text)
        except ValueError:
            value = -1
        if not 0 <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from 0 to {high}, got {inputs.excerpt(text)}"
            )
        return value

    parse.__name__ = "int"
    return parse


def _run_name(text: str) -> str:
    try:
        return inputs.run_name(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to 65535, got {inputs.excerpt(text)}")
    return value


# The most torchrun restarts `launch` takes: beyond it a worker group is in a crash loop, not recovering.
MOST_RESTARTS = 1000


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line naming the flag and the rule; the usage is one `--help` away.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m trainer", description="CIFAR-10 training with PyTorch DDP.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train one run (under torchrun, in a pod, or alone)")
    train.add_argument("--data", type=Path, required=True, help="folder holding cifar-10-batches-py/")
    train.add_argument(
        "--require-cifar10",
        action="store_true",
        help="accept only CIFAR-10's published files, never a synthetic set's own manifest",
    )
    train.add_argument("--runs", type=Path, required=True, help="folder of run folders")
    train.add_argument(
        "--run-name", required=True, type=_run_name, help="this run's folder under --runs (a plain name)"
    )
    budget = train.add_mutually_exclusive_group()
    for name, row in HYPERPARAMETERS.items():
        where = budget if name in ("epochs", "steps") else train
        flag = "--" + name.replace("_", "-")
        if isinstance(row.rule, Rule):
            where.add_argument(flag, type=_rule(row.rule), default=row.common, help=row.help())
        elif isinstance(row.rule, Choice):
            where.add_argument(flag, choices=row.rule.options, default=row.common, help=row.help())
    train.add_argument("--backend", choices=contract.BACKENDS, default=contract.AUTO)
    train.add_argument(
        "--timeout-seconds", type=_positive, help="collective timeout (env LAB_COLLECTIVE_TIMEOUT)"
    )
    train.add_argument("--threads", type=_positive, help="CPU threads per rank")
    train.add_argument("--sweep", type=Path, help="sweep file; the set at --index overrides the flags")
    train.add_argument(
        "--index", type=_count(sweep.MAX_SETS - 1), help="sweep set (default: env JOB_COMPLETION_INDEX)"
    )
    train.add_argument(
        "--on-complete",
        choices=("exit", "wait", "release"),
        default="exit",
        help="exit, wait for SIGTERM, or release (rank 0 scales its StatefulSet to 0, then waits)",
    )
    train.add_argument(
        "--fresh",
        action="store_true",
        help="start again at epoch 1, replacing the run folder's checkpoints and records",
    )
    train.add_argument("--ready-file", type=Path, help="readiness signal, written once this rank trains")
    train.add_argument(
        "--no-epoch-eval",
        dest="epoch_eval",
        action="store_false",
        help="evaluate only after the last epoch (speed runs; metrics lines then hold no test figures)",
    )
    train.add_argument("--compile", action="store_true", help="run the net through torch.compile")
    train.add_argument(
        "--metrics-port", type=_port, help="serve Prometheus metrics here (plus LOCAL_RANK); off when unset"
    )
    train.add_argument(
        "--metrics-linger",
        type=_positive,
        metavar="SECONDS",
        help="after the run, serve the metrics until scraped twice more, at most SECONDS (default: exit)",
    )

    launch = commands.add_parser(
        "launch", help="run `train ...` under torchrun as one node of a multi-pod job (one pod, one node)"
    )
    launch.add_argument(
        "--max-restarts", type=_count(MOST_RESTARTS), default=3, help="torchrun restarts of the worker group"
    )
    launch.add_argument("trainer_command", nargs=argparse.REMAINDER, help="-- train FLAGS...")

    probe = commands.add_parser(
        "probe", help="exit 0 iff the run is complete (--run) or this rank trains (--ready)"
    )
    target = probe.add_mutually_exclusive_group(required=True)
    target.add_argument("--run", type=Path, help="a run folder: ready when its status is complete")
    target.add_argument("--ready", type=Path, help="a rank's readiness signal (train --ready-file)")

    data = commands.add_parser("data", help="fetch or make the dataset").add_subparsers(
        dest="action", required=True
    )
    download = data.add_parser("download", help="torchvision download with MD5 check (idempotent)")
    download.add_argument("--dir", type=Path, required=True)
    synthetic = data.add_parser("synthetic", help="write a learnable dataset in CIFAR-10's pickle format")
    synthetic.add_argument("--dir", type=Path, required=True)
    synthetic.add_argument("--train", type=_positive, default=CIFAR10_TRAIN_IMAGES)
    synthetic.add_argument("--test", type=_positive, default=10000)
    synthetic.add_argument("--seed", type=int, default=0)

    sweeps = commands.add_parser("sweep", help="hyperparameter sweeps").add_subparsers(
        dest="action", required=True
    )
    generate = sweeps.add_parser("generate", help="expand a search space into a sweep file")
    generate.add_argument("--space", type=Path, required=True)
    generate.add_argument("--out", type=Path, required=True)
    report = sweeps.add_parser("report", help="leaderboard of a sweep's runs, best first")
    report.add_argument("--dir", type=Path, required=True, help="the sweep's folder (<runs>/<run-name>)")
    report.add_argument("--plot", type=Path, help="PNG of accuracy against each hyperparameter")
    return parser


def _train(args: argparse.Namespace) -> int:
    options = vars(args).copy()
    run_dir = args.runs / args.run_name
    if args.sweep is not None:
        index = _sweep_index(args.index)
        chosen = sweep.select(args.sweep, index)
        if "epochs" in chosen:
            options["steps"] = None  # the set's epochs are the budget, whichever the flags gave
        options.update(chosen)
        run_dir = run_dir / str(index)
    # torch loads only once the sweep checks have passed, so a bad sweep input fails at once.
    from trainer import data, distributed
    from trainer.config import resolve
    from trainer.pod import lifecycle, run_state

    place = distributed.topology(os.environ)
    distributed.apply_socket_interfaces(os.environ)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    published = args.require_cifar10
    splits = (data.load(args.data, True, published), data.load(args.data, False, published))
    trained_on = data.provenance(args.data, published)
    config = resolve(options, len(splits[0].labels), len(splits[1].labels), trained_on)
    where = run_state.RunOptions(
        run_dir=run_dir,
        backend=distributed.choose_backend(args.backend),
        timeout=distributed.timeout_seconds(args.timeout_seconds, os.environ),
        checkpoint_keep=args.checkpoint_keep,
        target_accuracy=args.target_accuracy,
        on_complete=args.on_complete,
        fresh=args.fresh,
        ready_file=args.ready_file,
        epoch_eval=args.epoch_eval,
        compile=args.compile,
        metrics_port=args.metrics_port,
        metrics_linger=args.metrics_linger or 0,
    )
    return lifecycle.main(config, where, place, splits, run_state.StopSignal())


def _sweep_index(flag: int | None) -> int:
    if flag is not None:
        return flag
    text = os.environ.get("JOB_COMPLETION_INDEX")
    if text is None:
        raise sweep.SweepError("--sweep needs --index I or the environment variable JOB_COMPLETION_INDEX")
    try:
        index = inputs.integer(text)
    except ValueError:
        index = -1
    if index < 0:
        raise sweep.SweepError(
            f"JOB_COMPLETION_INDEX is {inputs.excerpt(text)!r}, not a set's index (0, 1, 2, ...);"
            " set it to one, or pass --index I"
        )
    return index


def _launch(args: argparse.Namespace) -> int:
    command = args.trainer_command
    command = command[1:] if command[:1] == ["--"] else command
    if command[:1] != ["train"]:
        raise LaunchError("launch runs `train`: write `launch [--max-restarts N] -- train FLAGS...`")
    _parser().parse_args(command)  # a bad flag fails here, once, not in every restarted worker
    from trainer import launch

    launch.launch(command, args.max_restarts)
    return 0  # not reached: launch replaces this process with torchrun


def _probe(args: argparse.Namespace) -> int:
    from trainer.records.metrics import RunFolder

    if args.ready is not None:
        from trainer.pod import readiness

        problem = readiness.check(args.ready)
        print(problem or f"{args.ready}: training")
        return 0 if problem is None else 1

    status = RunFolder(args.run).status()
    state = status.get("state") if status else "absent"
    print(f"{args.run}: {state}")
    return 0 if state == "complete" else 1


def _data(args: argparse.Namespace) -> int:
    from trainer import data

    if args.action == "download":
        print(data.download(args.dir))
    else:
        folder = data.write_synthetic(args.dir, args.train, args.test, args.seed)
        print(f"synthetic CIFAR-10 ({args.train} training, {args.test} test images) written to {folder}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    if args.action == "generate":
        count = sweep.write_sweep_file(sweep.read_space(args.space), args.out)
        print(f"{count} hyperparameter sets written to {args.out}")
        return 0
    from trainer.records import report

    rows = report.collect(args.dir)
    parameters = report.varied(rows)
    print(report.table(rows, parameters))
    print(report.trained_on(rows))
    if args.plot:
        from trainer.records import plots

        plots.sweep(rows, parameters, args.plot, report.trained_on(rows))
        print(f"plot written to {args.plot}")
    return 0


class LaunchError(TrainerError):
    """`launch` was not given a `train` command."""


COMMANDS = {"train": _train, "launch": _launch, "probe": _probe, "data": _data, "sweep": _sweep}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        try:
            return COMMANDS[args.command](args)
        except OSError as err:
            # A full or read-only disk, a file where a folder must be: the machine's, one line.
            raise MachineError(machine_problem(err)) from None
    except TrainerError as err:
        code = report(err)
        if os.environ.get(ELASTIC_ERROR_FILE):
            # Under torchrun a failed rank's peers may already be gone, and tearing the process
            # group down at interpreter exit can then abort (SIGABRT), which torchrun's summary
            # would show instead of this exit code: the error is reported, so leave at once.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
