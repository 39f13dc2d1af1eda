"""`labctl` as the operator runs it, and stack files that point at the test sshd (tests/support/sshd.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.cli import build_parser
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


def commands() -> list[str]:
    """labctl's commands, as its parser knows them."""
    (subcommands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(subcommands.choices)
