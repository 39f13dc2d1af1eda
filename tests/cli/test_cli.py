"""What every subcommand shares: `--help`, and a missing or broken stack file as one line with its fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.labctl import Labctl, assert_one_line_error, labctl, write_stack

COMMANDS = ("init", "doctor", "validate", "status", "results")


def test_setup_installs_the_labctl_command() -> None:
    # scripts/setup.sh installs the project into the venv, whose bin/ then holds the console script.
    script = Path(sys.executable).parent / "labctl"
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and all(command in done.stdout for command in COMMANDS)


@pytest.mark.parametrize("command", [*COMMANDS, "hosts", "render", "dashboard"])
def test_every_command_has_help(command: str, labctl_in_process: Labctl) -> None:
    result = labctl_in_process(command, "--help")
    assert result.code == 0 and f"usage: labctl {command}" in result.out and "--stack" in result.out


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "init"])
def test_a_missing_stack_file_is_one_line(command: str, tmp_path: Path, labctl_in_process: Labctl) -> None:
    write_stack(tmp_path, "other", {"nodes": []})
    result = labctl_in_process(command, "--stack", "absent", "--stacks-dir", tmp_path)
    assert_one_line_error(
        result, "Pulumi.absent.yaml: no such stack file", "existing stacks: other", "labctl init"
    )


def test_a_broken_stack_file_names_every_bad_key(tmp_path: Path, labctl_in_process: Labctl) -> None:
    values = {"nodes": [{"name": "A_1", "address": "10.0.0.1", "user": "u", "role": "boss"}]}
    write_stack(tmp_path, "broken", values)
    result = labctl_in_process("status", "--stack", "broken", "--stacks-dir", tmp_path)
    assert_one_line_error(result, "k8scifar:nodes[0].name", "k8scifar:nodes[0].role", "'boss'")


def test_an_unknown_command_is_argparse_usage(labctl_in_process: Labctl) -> None:
    result = labctl_in_process("deploy")
    assert result.code == 2 and "invalid choice: 'deploy'" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize(
    ("words", "usage"), [(["status", "--bogus"], "status"), (["hosts", "up", "-x"], "hosts")]
)
def test_an_unknown_flag_shows_that_commands_usage(words: list[str], usage: str) -> None:
    result = labctl(*words)
    assert result.code == 2 and f"usage: labctl {usage} " in result.err
    assert f"labctl {usage}: error: unrecognized arguments: {words[-1]}" in result.err


@pytest.mark.parametrize("verb", ["up", "destroy"])
def test_pulumis_verbs_point_to_pulumi(verb: str) -> None:
    assert_one_line_error(labctl(verb), f"labctl has no `{verb}`", f"pulumi {verb} --stack NAME")


def test_validate_stops_on_a_missing_key(tmp_path: Path) -> None:
    values = {"nodes": [{"name": "a", "address": "10.0.0.1", "user": "u", "role": "server"}]}
    write_stack(tmp_path, "nokey", values | {"ssh": {"keyPath": str(tmp_path / "absent_key")}})
    result = labctl("validate", "--stack", "nokey", "--stacks-dir", tmp_path)
    assert result.code == 2 and "absent_key does not exist" in result.out and "Traceback" not in result.err


def test_a_stack_name_that_climbs_out_of_the_state_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, stacks = tmp_path / ".lab", tmp_path / "stacks"
    monkeypatch.setenv("K8SCIFAR_STATE_DIR", str(state))
    # Where `Pulumi.<stack>.yaml` leads for `../x`: a stack file that would otherwise be read.
    values = {
        "nodes": [{"name": "a", "address": "127.0.0.1", "user": "u", "role": "server"}],
        "ssh": {"port": 1},
    }
    (stacks / "Pulumi...").mkdir(parents=True)
    (stacks / "Pulumi..." / "x.yaml").write_text(
        yaml.safe_dump({"config": {f"k8scifar:{k}": v for k, v in values.items()}})
    )
    result = labctl("hosts", "up", "--stack", "../x", "--stacks-dir", stacks)
    assert_one_line_error(result, "stack name: '../x' is not one", "other than . and ..")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stacks"], "something was written outside .lab/"
