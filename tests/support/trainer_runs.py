"""Real trainer processes on CPU: a small synthetic dataset, a narrow net, torchrun with gloo."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tests.support.network import free_port
from tests.support.tiers import costly
from trainer.records import checkpoint

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")
# Small and fast: 1536 images in 12 steps of 128 per epoch, an 8-channel net, no test-time augmentation.
SMALL = ["--width", "8", "--batch-size", "128", "--tta", "0", "--epochs", "3"]


def env(**extra: str) -> dict[str, str]:
    """The environment of a trainer process: one thread each, no inherited rank variables."""
    base = {
        k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    }
    return {**base, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


def trainer(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "trainer", *map(str, args)]


def torchrun(nproc: int, *args: str | Path, restarts: int = 0) -> list[str]:
    return [
        str(TORCHRUN),
        f"--nproc-per-node={nproc}",
        f"--max-restarts={restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--module",
        "trainer",
        *map(str, args),
    ]


@costly("a trainer process (torch on CPU)")
def run(command: list[str], timeout: float = 240, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env(**extra), capture_output=True, text=True, timeout=timeout, check=False
    )


@costly("a trainer process (torch on CPU)")
def start(command: list[str], log: Path, **extra: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        # A session of its own, so a failed test can end torchrun and its workers together.
        return subprocess.Popen(
            command, env=env(**extra), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 300) -> None:
    """Poll until `predicate` holds; the bound only catches a hang, so it allows for a busy machine."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def epochs_logged(run_dir: Path) -> int:
    try:
        return len((run_dir / "metrics.jsonl").read_text().splitlines())
    except FileNotFoundError:
        return 0


def _refuse(token: str) -> Any:
    raise ValueError(f"{token} is not JSON (RFC 8259 has no NaN or Infinity)")


def strict_json(text: str) -> Any:
    """Parse as a strict JSON reader would: Python's json accepts NaN and Infinity, others do not."""
    return json.loads(text, parse_constant=_refuse)


def read_json(path: Path) -> Any:
    return strict_json(path.read_text())


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@costly("a trainer process (torch on CPU)")
def trainer_ok(*args: str | Path) -> None:
    """`python -m trainer ARGS`, which must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "trainer", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# A narrow network on one thread: a run of a few epochs takes seconds on two cores.
TINY_NET = ("--width", "8", "--batch-size", "128", "--tta", "0", "--threads", "1")


def diverge_after_first_epoch(run_dir: Path) -> None:
    """Make a finished two-epoch run one that resumes after epoch 1 into weights that are NaN: a
    run that diverged (no learning rate the flags accept makes these small nets blow up at will)."""
    folder = run_dir / "checkpoints"
    first, *later = sorted(folder.glob("ckpt-*.pt"))
    state = torch.load(first, weights_only=True)
    for tensor in state["model"].values():
        if tensor.is_floating_point():
            tensor.fill_(math.nan)
    for path in later:
        path.unlink()
        path.with_name(path.name + ".sha256").unlink()
    checkpoint.save(folder, state["progress"]["step"], state, keep=3)
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    (run_dir / "summary.json").unlink()
