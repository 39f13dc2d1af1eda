"""Runs a play for real on this machine (local connection) against the lab's Ansible tree.

The lab's roles, defaults, templates and filters are Ansible's own; only the programs the tasks
call may be replaced by recording stand-ins (a script per name in `fakes`, first on PATH), so
what the tasks decide can be watched without the daemons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from lab.paths import ANSIBLE_DIR
from tests.support.tiers import costly

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}

TASK_FILE_PLAY = """\
- name: Run one task file of a role
  hosts: all
  gather_facts: false
  tasks:
    - name: Include the task file
      ansible.builtin.include_role:
        name: {role}
        tasks_from: {tasks}
"""
# Appended to TASK_FILE_PLAY when a test wants to see the facts the task file set.
KEEP_FACTS = """\
    - name: Write the facts the task file set
      ansible.builtin.copy:
        content: "{{{{ {names} | to_json }}}}"
        dest: "{{{{ lab_test_facts }}}}"
        mode: "0600"
"""
FACTS_FILE = "facts.json"


@costly("a real ansible-playbook run on this machine")
def run_play(
    work: Path,
    play: str,
    inventory: dict[str, Any],
    variables: dict[str, Any],
    fakes: dict[str, str] | None = None,
    environment: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook running `play` on `inventory` with `variables` as extra variables (a 0600 file).

    `fakes`: program name -> shell script body; each is installed in work/bin, first on PATH.
    `environment`: more variables for ansible-playbook and so for the programs its tasks run.
    `prefix`: a command that runs ansible-playbook (its argv follows), e.g. in a mount namespace.
    """
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = work / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (fakes or {}).items():
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (work / "play.yml").write_text(play)
    secrets = work / "vars.json"
    secrets.touch(mode=0o600)
    secrets.write_text(json.dumps(variables))
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    inventory_file, play_file = work / "inventory.yml", work / "play.yml"
    return subprocess.run(
        [*(prefix or []), str(ANSIBLE_PLAYBOOK), "-i", str(inventory_file), "-e", f"@{secrets}",
         str(play_file)],
        env={"ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "PATH": path, "HOME": str(work),
             "ANSIBLE_LOCAL_TEMP": str(work / "tmp"), "ANSIBLE_NOCOLOR": "1", **(environment or {})},
        capture_output=True, text=True, cwd=ANSIBLE_DIR,
    )  # fmt: skip


@costly("a real ansible-playbook run on this machine")
def syntax_check(playbook: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    """ansible-playbook's syntax check of the lab's playbooks/`playbook` with `inventory`."""
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", str(inventory), f"playbooks/{playbook}"],
        cwd=ANSIBLE_DIR,
        env={"ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )


RENDER_PLAY = """\
- name: Render one template
  hosts: all
  gather_facts: false
  vars_files: {defaults}
  tasks:
    - name: Render the template
      ansible.builtin.template:
        src: {template}
        dest: "{{{{ lab_test_out }}}}"
        mode: "0600"
"""


def render_template(work: Path, template: Path, defaults: list[Path], variables: dict[str, Any]) -> str:
    """What Ansible's template module makes of `template` with roles' `defaults` and `variables`."""
    out = work / "rendered"
    play = RENDER_PLAY.format(defaults=json.dumps([str(d) for d in defaults]), template=template)
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    done = run_play(work, play, inventory, {"lab_stack": "test", "lab_test_out": str(out), **variables})
    if done.returncode != 0:
        raise RuntimeError(f"rendering {template.name} failed:\n{done.stdout[-3000:]}")
    return out.read_text()


def run_tasks(
    role: str,
    tasks: str,
    work: Path,
    variables: dict[str, Any],
    fakes: dict[str, str] | None = None,
    environment: dict[str, str] | None = None,
    keep: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`role`'s tasks/`tasks` on one local node, with `variables` overriding the role's defaults.

    `keep`: facts to write to work/facts.json once the task file is done (see `kept_facts`).
    """
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    play = TASK_FILE_PLAY.format(role=role, tasks=tasks)
    if keep:
        play += KEEP_FACTS.format(names="{" + ", ".join(f"'{name}': {name}" for name in keep) + "}")
        variables = {**variables, "lab_test_facts": str(work / FACTS_FILE)}
    return run_play(work, play, inventory, {"lab_stack": "test", **variables}, fakes, environment)


def kept_facts(work: Path) -> dict[str, Any]:
    """The facts a `run_tasks(..., keep=...)` run in `work` wrote; empty when the play stopped before."""
    found = work / FACTS_FILE
    return json.loads(found.read_text()) if found.exists() else {}
