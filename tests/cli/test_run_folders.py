"""Run folders are hostile input: pods write them, and so may any NFS client. `labctl results`,
`status` and `wait` read a planted folder (links out of it, to private keys and /dev/zero, a FIFO,
a huge file, a hard link, terminal escapes and markup in its JSON, malformed JSON) in seconds,
print no control character, name each file they leave alone in one line, and `--fetch` copies
nothing from outside the folder: locally, through the reader the export runs (locally), and over
SSH against the test sshd."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.cli.common.runsource import ExportRuns
from tests.support.labctl import Result, labctl, loopback_values, write_stack
from tests.support.sshd import Sshd
from trainer.records import runfolders

SECRET = "PRIVATE-KEY-SECRET-MARKER"
ESC = "\x1b"
HUGE = 100 << 20  # beyond what a run's file may hold
FAKE = "synthetic\x1b[2K\rCIFAR-10 (verified)"


def _good(run: Path, trained_on: str = "a generated CIFAR-format set, NOT CIFAR-10") -> None:
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "complete", "epoch": 2, "epochs": 2}))
    summary = {"best_test_acc": 0.5, "final_test_acc": 0.4, "epochs": 2, "trained_on": trained_on}
    (run / "summary.json").write_text(json.dumps(summary | {"hyperparameters": {"lr": 0.1}}))
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    (run / "curves.png").write_bytes(b"\x89PNG good")


def plant(base: Path) -> Path:
    """A runs folder with one good run, one sweep and every hostile thing a writer can leave."""
    outside = base / "outside"
    outside.mkdir()
    (outside / "ssh_host_ed25519_key").write_text(SECRET)
    (outside / "ssh_host_ed25519_key").chmod(0o600)
    runs = base / "runs"
    _good(runs / "good")
    evil = runs / "evil"
    evil.mkdir()
    (evil / "status.json").symlink_to(outside / "ssh_host_ed25519_key")
    (evil / "summary.json").symlink_to("/dev/zero")
    os.mkfifo(evil / "metrics.jsonl")
    (evil / "curves.png").symlink_to("../../outside/ssh_host_ed25519_key")
    (evil / "etc").symlink_to(outside)
    os.link(outside / "ssh_host_ed25519_key", evil / "linked.png")
    for key in sorted(Path("/etc/ssh").glob("ssh_host_*_key")):
        (evil / f"host-{key.name}").symlink_to(key)
    with open(evil / "huge.png", "wb") as huge:
        huge.truncate(HUGE)  # sparse: no disk used
    (evil / "bad\x1b[2Jname.png").write_bytes(b"x")
    # A sweep whose members say what a writer wants shown.
    member = runs / "sweep" / "0"
    _good(member, trained_on="x\x1b]0;title\x07")
    status = {"state": FAKE, "epoch": "[/x]", "eta_seconds": 1e308, "updated": 1e300, "error": "[bold]x"}
    (member / "status.json").write_text(json.dumps(status))
    _good(runs / "sweep" / "1")
    (runs / "sweep" / "1" / "status.json").write_text('{"state": "runn')
    (runs / "sweep" / "1" / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    (runs / "sweep" / "1" / "metrics.jsonl").write_text('{"epoch": 1}\nnot json\n[1]\n{"epoch": 2}\n')
    _good(runs / "listed")
    (runs / "listed" / "summary.json").write_text('["not", "an", "object"]')
    (runs / "deep" / "0").mkdir(parents=True)
    (runs / "deep" / "0" / "status.json").symlink_to(outside / "ssh_host_ed25519_key")
    return runs


def _secrets() -> list[bytes]:
    found = [SECRET.encode()]
    for key in Path("/etc/ssh").glob("ssh_host_*_key"):
        with contextlib.suppress(OSError):
            found.append(key.read_bytes())
    return found


def assert_copied_only_the_folder(copy: Path) -> None:
    files = {p.relative_to(copy).as_posix(): p for p in copy.rglob("*")}
    assert not [p for p in files.values() if p.is_symlink()], "a link was copied"
    for path in files.values():
        if path.is_file():
            data = path.read_bytes()
            assert not any(secret in data for secret in _secrets()), f"{path} holds a file from outside"
    assert {"good/summary.json", "good/curves.png", "sweep/0/status.json"} <= set(files)
    assert not any(name.startswith("evil/") and files[name].is_file() for name in files), sorted(files)


def assert_nothing_steers_the_terminal(result: Result) -> None:
    assert ESC not in result.out + result.err and "\x07" not in result.out + result.err
    assert "Traceback" not in result.err
    for line in result.err.splitlines():
        assert line.startswith("labctl: "), line


def test_results_fetch_of_a_planted_folder_copies_nothing_from_outside(tmp_path: Path) -> None:
    runs = plant(tmp_path)
    started = time.monotonic()
    result = labctl("results", "--runs-dir", runs, "--fetch", tmp_path / "copy")
    assert time.monotonic() - started < 120, "a FIFO or /dev/zero held the command"
    assert result.code == 0, result.err
    assert_copied_only_the_folder(tmp_path / "copy")
    assert_nothing_steers_the_terminal(result)
    said = result.err
    for line in (
        "evil/metrics.jsonl: is a pipe; left alone",
        "evil/summary.json: is a symbolic link",
        "evil/etc: is a symbolic link",
        "evil/linked.png: has 2 hard links",
        f"evil/huge.png: holds {HUGE} bytes",
        r"evil/bad\x1b[2Jname.png: has a name with control characters",
        "sweep/1/status.json: is not valid JSON (line 1 column 11)",
        "sweep/1/summary.json: is not JSON this reader takes",
        "sweep/1/metrics.jsonl: line 2, 3 is not a JSON object; skipped",
        "listed/summary.json: is not a JSON object",
    ):
        assert [x for x in said.splitlines() if line in x], (line, said)
    # What the sweep's member says is shown, escapes visible, as no value the trainer writes.
    assert r"x\x1b]0;title\x07 (not a value the trainer writes)" in result.out
    assert "│ good " in result.out and "50.00%" in result.out


def test_status_and_wait_show_a_planted_status_as_text(tmp_path: Path) -> None:
    runs = plant(tmp_path)
    status = labctl("status", "--runs-dir", runs, "--run", "sweep/0")
    assert status.code == 0, status.err
    assert_nothing_steers_the_terminal(status)
    assert r"synthetic\x1b[2K\rCIFAR-10 (verified)" in status.out and "[/x]" in status.out
    waited = labctl("wait", "--runs-dir", runs, "--run", "sweep/0", "--timeout", "1", "--interval", "0.2")
    assert waited.code == 1 and "did not finish within 1 s" in waited.err, waited.err
    assert_nothing_steers_the_terminal(waited)


def _as_the_export_runs_it(*args: str) -> subprocess.CompletedProcess[bytes]:
    """The reader exactly as ExportRuns runs it on the NFS server: `python3 - ARGS`, the file on stdin."""
    source = Path(runfolders.__file__).read_bytes()
    return subprocess.run(
        [sys.executable, "-", *args], input=source, capture_output=True, timeout=120, check=False, cwd="/"
    )


def test_the_exports_reader_run_locally_copies_nothing_from_outside(tmp_path: Path) -> None:
    runs = plant(tmp_path)
    listed = _as_the_export_runs_it(str(runs))
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert {r["name"] for r in found["runs"]} == {"good", "listed"}
    assert [m["name"] for s in found["sweeps"] for m in s["members"]] == ["0", "1"]
    assert SECRET not in json.dumps(found)
    tarred = _as_the_export_runs_it("--tar", str(runs))
    assert tarred.returncode == 0, tarred.stderr
    problems = json.loads(tarred.stderr.decode().splitlines()[-1])["problems"]
    assert any("evil/metrics.jsonl: is a pipe" in p for p in problems)
    from lab.cli.common.runsource import _extract

    _extract(io.BytesIO(tarred.stdout), tmp_path / "copy", "the export")
    assert_copied_only_the_folder(tmp_path / "copy")


class _Recording:
    """A Remote that runs the command here and records it."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.node = SimpleNamespace(name="node-a")

    def run(
        self, command: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, check=False)

    def run_bytes(
        self, command: str, stdin: bytes | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[bytes]:
        self.commands.append(command)
        return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, check=False)


def test_the_export_is_read_without_sudo(tmp_path: Path) -> None:
    runs = plant(tmp_path)
    remote = _Recording()
    source = ExportRuns(remote, str(runs))  # type: ignore[arg-type]
    assert {r["name"] for r in source.collect()["runs"]} == {"good", "listed"}
    source.fetch(tmp_path / "copy")
    assert_copied_only_the_folder(tmp_path / "copy")
    assert remote.commands and not [c for c in remote.commands if "sudo" in c], remote.commands


def test_results_over_ssh_fetch_a_planted_export_without_anything_from_outside(
    sshd: Sshd, tmp_path: Path
) -> None:
    export = tmp_path / "export"
    export.mkdir()
    plant(export)
    stacks = tmp_path / "stacks"
    write_stack(stacks, "loop", loopback_values(sshd, export))
    result = labctl("results", "--stack", "loop", "--stacks-dir", stacks, "--fetch", tmp_path / "copy")
    assert result.code == 0, result.err
    assert_copied_only_the_folder(tmp_path / "copy")
    assert_nothing_steers_the_terminal(result)
    assert [x for x in result.err.splitlines() if "evil/metrics.jsonl: is a pipe; left alone" in x]


@pytest.mark.parametrize(
    "value",
    ["\x1b[31m", "\x9b31m", "\u202egnp.exe", "a\u2028b", "\x00", "\x7f", "tab\there", "\u200b"],
)
def test_every_character_that_steers_a_terminal_is_written_visibly(value: str) -> None:
    shown = runfolders.printable(value)
    assert shown.isprintable(), repr(shown)
    assert not any(c in shown for c in ("\x1b", "\x9b", "\u202e", "\u2028", "\x00", "\x7f", "\t", "\u200b"))
    assert runfolders.printable("CIFAR-10 ✓ naïve") == "CIFAR-10 ✓ naïve"


def test_results_list_only_what_fetch_copies(tmp_path: Path) -> None:
    # Names the trainer never gives a run or a plot: `results` listed them, `--fetch` left them out.
    runs = tmp_path / "runs"
    _good(runs / "..run")
    _good(runs / "good")
    (runs / "good" / "..png").write_bytes(b"\x89PNG hidden")
    found = runfolders.collect(str(runs))
    assert [run["name"] for run in found["runs"]] == ["good"]
    assert [plot for run in found["runs"] for plot in run["plots"]] == ["good/curves.png"]
    spool = io.BytesIO()
    runfolders.archive(str(runs), spool)
    spool.seek(0)
    with tarfile.open(fileobj=spool) as tar:
        copied = sorted(tar.getnames())
    assert copied == [
        "good",
        *(f"good/{name}" for name in sorted(os.listdir(runs / "good")) if name != "..png"),
    ]
