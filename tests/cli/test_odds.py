"""What an operator meets around the commands: tables that keep their rows when piped, plurals,
the blocks `init` writes, doctor and validate agreeing on the clock, state kept out of the
checkout, and the operator's own stack files left alone by the tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lab.cli.console import plural
from lab.config import STACKS_DIR, all_stacks, load_stack
from lab.inventory import STATE_DIR
from tests.cli.conftest import SERVER, Sshd, loopback_values, write_stack
from tests.shipped import ROOT, shipped_stacks


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


def test_the_operators_own_stack_files_are_neither_loaded_nor_linted() -> None:
    own = STACKS_DIR / "Pulumi.zz-operators-own.yaml"
    own.write_text("config:\n  k8scifar:nodes: [ {broken\n")  # theirs, and not even YAML
    try:
        assert "zz-operators-own" in all_stacks() and "zz-operators-own" not in shipped_stacks()
        assert {"example-gpu", "testbed"} <= set(shipped_stacks())
        lint = subprocess.run(
            ["bash", "-c", "git ls-files -z -- '*.yml' '*.yaml' | xargs -0 yamllint --strict"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert lint.returncode == 0 and "zz-operators-own" not in lint.stdout, lint.stdout
        assert (
            "git ls-files -z -- '*.yml' '*.yaml' | xargs -0 yamllint --strict"
            in (ROOT / "scripts/test.sh").read_text()
        )
    finally:
        own.unlink()


def test_a_local_runs_folder_needs_no_stack_file(trained_runs: Path, tmp_path: Path) -> None:
    # What `labctl try` leaves: a runs folder, and possibly no stack file of the operator's yet.
    for command in ("status", "results"):
        done = _piped(command, "--runs-dir", trained_runs, "--stacks-dir", tmp_path)
        assert done.returncode == 0 and "lrsweep" in done.stdout, done.stderr
