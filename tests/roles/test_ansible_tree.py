"""The Ansible tree itself: playbooks parse, every role default is documented, every skip says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lab.bootstrap.inventory import build_inventory
from lab.config import SkipStep, load_stack
from lab.paths import ANSIBLE_DIR
from tests.support.local_play import syntax_check
from tests.support.shipped import shipped_stacks

ROLES = sorted(p for p in (ANSIBLE_DIR / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("playbook", ["site.yml", "reset.yml", "remove_nodes.yml"])
def test_playbooks_pass_the_syntax_check(playbook: str, tmp_path: Path) -> None:
    for stack in shipped_stacks():
        inventory = tmp_path / f"{stack}.yml"
        inventory.write_text(yaml.safe_dump(build_inventory(load_stack(stack), tmp_path / "known_hosts")))
        done = syntax_check(playbook, inventory)
        assert done.returncode == 0, f"{stack}: {done.stderr}"


def undocumented_defaults(text: str) -> list[str]:
    """Top-level keys of a defaults file that no comment explains.

    A key counts as documented when a comment stands on its line or heads the block of
    consecutive lines it belongs to.
    """
    undocumented, block_has_comment = [], False
    for line in text.splitlines():
        if not line.strip():
            block_has_comment = False
        elif line.startswith("#"):
            block_has_comment = True
        elif (key := re.match(r"^([A-Za-z_][A-Za-z0-9_]*):", line)) and not block_has_comment:
            undocumented += [] if "#" in line else [key.group(1)]
    return undocumented


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_default_is_documented(role: Path) -> None:
    defaults = role / "defaults" / "main.yml"
    assert defaults.is_file(), f"{role.name}: every role keeps its settings in defaults/main.yml"
    assert undocumented_defaults(defaults.read_text()) == []
    assert all(key.startswith(f"{role.name}_") for key in yaml.safe_load(defaults.read_text()))


def test_the_documentation_check_finds_a_bare_default() -> None:
    text = "# Documented.\nrole_a: 1\nrole_b: 2\n\nrole_c: 3  # inline\nrole_d: 4\n\nrole_e: 5\n"
    assert undocumented_defaults(text) == ["role_d", "role_e"]


def unexplained_skips(task_file: str) -> list[str]:
    """Skip steps a task file guards on (`'X' not in lab_skip`) without printing `lab_skip.X`."""
    guarded = set(re.findall(r"'(\w+)' not in lab_skip", task_file))
    explained = set(re.findall(r"lab_skip\.(\w+)", task_file))
    return sorted(guarded - explained)


def _task_files() -> list[Path]:
    return sorted((ANSIBLE_DIR / "roles").glob("*/tasks/*.yml"))


def test_every_skipped_step_prints_its_reason() -> None:
    problems = {str(p.relative_to(ANSIBLE_DIR)): unexplained_skips(p.read_text()) for p in _task_files()}
    assert {path: steps for path, steps in problems.items() if steps} == {}


def test_every_skip_step_guards_something() -> None:
    text = "".join(p.read_text() for p in _task_files())
    assert {step.value for step in SkipStep} <= set(re.findall(r"'(\w+)' not in lab_skip", text))


def test_the_skip_check_finds_a_silent_skip() -> None:
    silent = "- name: Start\n  ansible.builtin.command: start\n  when: \"'nfsServerStart' not in lab_skip\"\n"
    assert unexplained_skips(silent) == ["nfsServerStart"]
    explained = silent + "- name: Why\n  ansible.builtin.debug:\n    msg: '{{ lab_skip.nfsServerStart }}'\n"
    assert unexplained_skips(explained) == []
