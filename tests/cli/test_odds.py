"""What an operator meets around the commands: tables that keep their rows when piped, plurals,
the blocks `init` writes, doctor and validate agreeing on the clock, state kept out of the
checkout, and the operator's own stack files left alone by the tests."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.cli import build_parser
from lab.cli.common.console import one_line, plural
from lab.cli.doctor.operator_checks import PULUMI_INSTALL
from lab.cli.try_local import EPOCHS
from lab.cli.try_local.dataset import GENERATED_IMAGES
from lab.cli.try_local.duration import MEASURED_MACHINES, minutes_range
from lab.config import STACKS_DIR, ConfigError, all_stacks, load_stack, parse_config
from lab.paths import STATE_DIR
from tests.support.labctl import loopback_values, node, write_stack
from tests.support.network import free_port
from tests.support.shipped import ROOT, shipped_stacks
from tests.support.sshd import AGENT, SERVER, Sshd


def _piped(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`labctl ARGS | cat`: no terminal, and no COLUMNS from one."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_doctor_piped_keeps_each_finding_on_one_row_and_counts_in_words(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "piped", loopback_values(sshd, tmp_path / "export"))
    done = _piped("doctor", "--stack", "piped", "--stacks-dir", tmp_path, "--nodes-only", "--no-bandwidth")
    ssh = [line for line in done.stdout.splitlines() if "│ SSH " in line]
    # Folded to 80 columns, "logged in as root@<address>" was cut over two or three rows.
    assert len(ssh) == 2 and f"logged in as root@{SERVER}" in ssh[0], done.stdout
    assert re.fullmatch(r"\d+ ok, \d+ warnings?, \d+ errors?", done.stdout.strip().splitlines()[-1])
    assert [plural(n, "warning") for n in (0, 1, 2)] == ["0 warnings", "1 warning", "2 warnings"]


def test_doctor_and_validate_agree_on_a_container_clock(sshd: Sshd, tmp_path: Path) -> None:
    write_stack(tmp_path, "clock", loopback_values(sshd, tmp_path / "export"))
    done = _piped("doctor", "--stack", "clock", "--stacks-dir", tmp_path, "--nodes-only", "--no-bandwidth")
    rows = [line for line in done.stdout.splitlines() if "│ time sync " in line]
    virt = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, check=False)
    if virt.returncode == 0:
        # The suite skips its time check on a container ("keeps its host's clock"): no NTP warning here.
        assert len(rows) == 2 and all("│ ok " in r and "a container, on its host's clock" in r for r in rows)
    else:
        assert len(rows) == 2 and not any("container" in r for r in rows), done.stdout


def test_init_writes_the_blocks_the_quickstart_sends_the_operator_to(sshd: Sshd, tmp_path: Path) -> None:
    flags = ["--key", str(sshd.key), "--ssh-port", str(sshd.port), "--host-key-policy", "off"]
    done = _piped(
        "init", "--stack", "blocks", "--stacks-dir", tmp_path, "--server", f"a=root@{SERVER}", *flags
    )
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "Pulumi.blocks.yaml").read_text()
    for line in ("k8scifar:trainer:", 'model: "airbench"', "batchSize: 1024", "placement:"):
        assert line in text, text
    # Left unset, epochs are the model's recipe: the key is not written as null.
    assert "epochs" not in text and "null" not in text, text
    assert "k8scifar:nfs:" in text and "purgeOnDestroy: false" in text
    cfg = load_stack("blocks", tmp_path)
    assert cfg.trainer.epochs is None and cfg.nfs.export_path == "/srv/k8scifar"


def test_commands_keep_their_state_out_of_the_checkout(tmp_path: Path) -> None:
    values = {"nodes": [{"name": "a", "address": "127.0.0.3", "user": "root", "role": "server"}]}
    key = tmp_path / "key"
    key.write_text("not a key\n")
    write_stack(tmp_path, "elsewhere", values | {"ssh": {"keyPath": str(key), "port": 2}})
    _piped("status", "--stack", "elsewhere", "--stacks-dir", tmp_path)
    assert not STATE_DIR.is_relative_to(ROOT)
    assert (STATE_DIR / "elsewhere" / "known_hosts").exists()
    assert not (ROOT / ".lab" / "elsewhere").exists()


def test_the_operators_own_stack_files_are_neither_loaded_nor_linted(tmp_path: Path) -> None:
    """In a checkout of its own: a stack file the repository ships, and the operator's beside it."""
    checkout = tmp_path / "checkout"
    stacks = checkout / STACKS_DIR.relative_to(ROOT)
    stacks.mkdir(parents=True)
    shutil.copy(ROOT / ".yamllint", checkout)
    shutil.copy(STACKS_DIR / "Pulumi.testbed.yaml", stacks)
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run(["git", "add", "."], cwd=checkout, check=True)
    own = stacks / "Pulumi.zz-operators-own.yaml"
    own.write_text("config:\n  k8scifar:nodes: [ {broken\n")  # theirs, and not even YAML
    assert "zz-operators-own" in all_stacks(stacks) and shipped_stacks(checkout) == ["testbed"]
    # The linting line of scripts/test.sh, as it stands.
    script = (ROOT / "scripts/test.sh").read_text().splitlines()
    (lint_command,) = [line for line in script if "yamllint " in line]
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for command, passes in ((lint_command, True), (f"yamllint --strict {own}", False)):
        lint = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True)
        assert (lint.returncode == 0) == passes, lint.stdout


def test_a_local_runs_folder_needs_no_stack_file(trained_runs: Path, tmp_path: Path) -> None:
    # What `labctl try` leaves: a runs folder, and possibly no stack file of the operator's yet.
    for command in ("status", "results"):
        done = _piped(command, "--runs-dir", trained_runs, "--stacks-dir", tmp_path)
        assert done.returncode == 0 and "lrsweep" in done.stdout, done.stderr


def test_every_labctl_option_says_what_it_does() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    silent = [
        f"labctl {name} {'/'.join(action.option_strings) or action.dest}"
        for name, command in commands.choices.items()
        for action in command._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert silent == []


def test_the_results_labctl_try_writes_into_the_checkout_are_not_for_git() -> None:
    out = build_parser().parse_args(["try"]).out
    assert not out.is_absolute(), "the default is relative: the results land where it runs"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", str(out / "try-20260101-000000" / "summary.json")],
        cwd=ROOT,
        check=False,
    )
    assert ignored.returncode == 0, f"{out}/ is not ignored by git"


def test_doctor_on_an_80_column_terminal_cuts_no_word(tmp_path: Path) -> None:
    """A table folded to 80 columns cut URLs, addresses and paths in the middle, so they could be
    neither read nor copied: each finding's words stay whole."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    port = free_port()  # nothing listens: the SSH finding is an error with the long hint
    nodes = [node("node-a", SERVER, "server"), node("node-b", AGENT, "agent")]
    write_stack(tmp_path, "narrow", {"nodes": nodes, "ssh": {"keyPath": str(key), "port": port}})
    env = os.environ | {"COLUMNS": "80", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", "doctor", "--stack", "narrow", "--stacks-dir", tmp_path],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = done.stdout.splitlines()
    # Only a word longer than a line may pass the edge, whole, on a line of its own.
    assert done.returncode == 1, done.stderr
    assert all(len(line.rstrip()) <= 80 or len(line.split()) == 1 for line in lines), done.stdout
    words = [f"{key}.pub", "~root/.ssh/authorized_keys", f"root@{SERVER},", f"root@{AGENT},"]
    if "`pulumi` is not on PATH" in done.stdout:
        words.append(PULUMI_INSTALL)
    for word in words:
        assert any(word in line for line in lines), f"{word!r} is cut:\n{done.stdout}"


def test_troubleshooting_quotes_the_messages_the_configuration_gives() -> None:
    """Each stack-file message docs/troubleshooting.md quotes is what that value gets today (its
    refused Kubernetes release was released and accepted since)."""
    quoted = re.findall(
        r"`(?:labctl: [^`:]+: )?k8scifar:([\w.]+): '([^'`]*)' ([^`]*?)(?:; \.\.\.)?`",
        (ROOT / "docs" / "troubleshooting.md").read_text(),
    )
    assert len(quoted) >= 2, "the examples moved; update this test's pattern"
    for key, value, said in quoted:
        values = {"nodes": [node("node-a", "192.168.50.11", "server")]}
        *parents, last = key.split(".")
        target = values
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
        with pytest.raises(ConfigError) as caught:
            parse_config(values)
        assert f"k8scifar:{key}: '{value}' {' '.join(said.split())}" in one_line(caught.value)


def test_the_time_said_up_front_holds_the_measured_runs() -> None:
    """The plan gives a range that holds every `labctl try --generated` the benchmark measured."""
    report = (ROOT / "docs" / "benchmarks" / "try.md").read_text()
    (total,) = re.findall(r"command to prompt \| ([\d.]+) s(?: \(min ([\d.]+), max ([\d.]+))?", report)
    low, high = minutes_range(GENERATED_IMAGES[0], EPOCHS["generated"], MEASURED_MACHINES)
    measured = [float(figure) / 60 for figure in total if figure]
    assert low < high and all(low <= minutes <= high for minutes in measured), (low, high, measured)
