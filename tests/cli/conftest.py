"""Fixtures for the CLI tests: stack files that point at the test sshd (tests/support/sshd.py),
and `labctl` run as the operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.network import free_port
from tests.support.sshd import AGENT, SERVER, Sshd


def node(name: str, address: str, role: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "user": "root", "role": role, **extra}


def write_stack(stacks: Path, name: str, values: dict[str, Any]) -> Path:
    stacks.mkdir(parents=True, exist_ok=True)
    path = stacks / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {f"k8scifar:{k}": v for k, v in values.items()}}))
    return path


def loopback_values(sshd: Sshd, export: Path, **trainer: Any) -> dict[str, Any]:
    """A two-node stack whose nodes are the test sshd's two addresses."""
    return {
        "nodes": [node("node-a", SERVER, "server"), node("node-b", AGENT, "agent")],
        "ssh": {"keyPath": str(sshd.key), "port": sshd.port, "hostKeyPolicy": "off"},
        "nfs": {"exportPath": str(export)},
        "trainer": {"port": free_port(), **trainer},
    }


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def labctl(*args: str | Path, stdin: str = "") -> Result:
    """`labctl ARGS` in a fresh process, as the operator types it; output wide enough to read whole."""
    env = os.environ | {"COLUMNS": "250", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """Exit code 2, one line on stderr naming the problem, and no traceback."""
    assert result.code == 2, (result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labctl: "), result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _trainer(*args: str | Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainer", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# A narrow network on one thread: a run of a few epochs takes seconds on two cores.
TINY = ("--width", "8", "--batch-size", "128", "--tta", "0", "--threads", "1")


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder written by the real trainer: one run and a two-set learning-rate sweep.

    Synthetic CIFAR-format data and a narrow network keep it to seconds on two cores.
    """
    base = tmp_path_factory.mktemp("trainer")
    data, runs = base / "data", base / "runs"
    _trainer("data", "synthetic", "--dir", data, "--train", "512", "--test", "256")
    _trainer("train", "--data", data, "--runs", runs, "--run-name", "single", "--epochs", "2", *TINY)
    (base / "space.json").write_text('{"strategy": "grid", "parameters": {"lr": [0.02, 1.5]}}')
    _trainer("sweep", "generate", "--space", base / "space.json", "--out", base / "sweep.json")
    for index in ("0", "1"):
        sweep = ("--run-name", "lrsweep", "--sweep", base / "sweep.json", "--index", index)
        _trainer("train", "--data", data, "--runs", runs, *sweep, "--epochs", "2", *TINY)
    _trainer("sweep", "report", "--dir", runs / "lrsweep", "--plot", runs / "lrsweep" / "sweep.png")
    return runs
