"""`labctl` as the operator runs it, in a fresh process or in this one, and stack files that point at
the test sshd (tests/support/sshd.py). tests/conftest.py registers this module as a plugin for its
`labctl_in_process` fixture."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.cli import build_parser, main
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


def labctl(*args: str | Path, stdin: str = "", prefix: Sequence[str] = (), columns: int = 250) -> Result:
    """`labctl ARGS` in a fresh process, as the operator types it, behind `prefix` (such as the
    control plane's network namespace); output wide enough to read whole, unless `columns` makes
    doctor print its findings as a list (lab.cli.common.console.print_findings)."""
    env = os.environ | {"COLUMNS": str(columns), "TERM": "dumb"}
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "lab.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


# `labctl_in_process`: called as `labctl()` is.
Labctl = Callable[..., Result]


@pytest.fixture
def labctl_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Labctl:
    """`labctl ARGS` run by the console script's own `main` in this process, for a test that checks
    only its exit status and what it prints: no interpreter to start (a second or more each on two
    cores). Output as wide as `labctl()` gives it; `stdin` is what the command reads."""
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("TERM", "dumb")

    def run(*args: str | Path, stdin: str = "") -> Result:
        capsys.readouterr()  # whatever the test printed before
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as exit:  # argparse: --help, an unknown command or flag
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


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
