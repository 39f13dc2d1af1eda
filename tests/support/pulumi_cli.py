"""The user's own `pulumi` commands, run for real: the CLI, its Python language host, the dynamic
providers' launcher and pulumi-resource-kubernetes from the upstream tools' cache
(lab/testbed/tools.py), on the lab's own project, offline: a local file backend, a passphrase, no
update check, no plugin download.

The project is a folder of its own holding the checkout's Pulumi.yaml, `__main__.py` and stack
files: `pulumi stack init` writes the passphrase's salt into the stack file, and a test's stack
file is its own, neither of which may change the checkout. Its `.venv` is the checkout's, where
the lab is installed, so the program and the dynamic provider host import the lab under test.
Beside the project: the backend, the CLI's home, its temporary files and the lab's state folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.config import PROJECT, STACKS_DIR
from lab.paths import STATE_VARIABLE
from lab.testbed import tools
from lab.testbed.processes import kill_tree
from tests.support.shipped import ROOT, tracked
from tests.support.tiers import costly

# Not a secret of anyone's: the test stacks' own passphrase. It must reach no output.
PASSPHRASE = "Pulumi-Passphrase-MARKER"
# Long enough for a first site.yml on two test machines, with room for a loaded machine.
COMMAND_TIMEOUT_S = 900


@dataclass(frozen=True)
class PulumiProject:
    """The lab's Pulumi project in `scratch`/project, run with `env`, each command behind `prefix`
    (the control plane's network namespace, or nothing)."""

    scratch: Path
    env: dict[str, str]
    prefix: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return self.scratch / "project"

    @property
    def backend(self) -> Path:
        """The file backend: the stacks' state, as the engine writes it."""
        return self.scratch / "backend"

    @property
    def lab_state(self) -> Path:
        """The lab's state folder of the program and its provider host (STATE_VARIABLE)."""
        return self.scratch / "lab"

    def run(
        self, *args: str, timeout: float = COMMAND_TIMEOUT_S, interrupt: threading.Event | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --non-interactive`, its output kept (checked by the caller); Ctrl-C, as an
        operator presses it, once `interrupt` is set."""
        process = subprocess.Popen(
            [*self.prefix, str(tools.bin_dir() / "pulumi"), *args, "--non-interactive"],
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if interrupt is not None:
            threading.Thread(target=_interrupt_when_set, args=(process, interrupt), daemon=True).start()
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The plugins run in process groups of their own (the provider host goes on running
            # playbooks): everything below the CLI goes with it.
            kill_tree(process.pid)
            process.communicate()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def ok(self, *args: str) -> str:
        """`pulumi ARGS`, which must succeed; its standard output."""
        done = self.run(*args)
        assert done.returncode == 0, f"pulumi {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        assert PASSPHRASE not in done.stdout + done.stderr
        return done.stdout

    def stack_file(self, stack: str) -> Path:
        return self.folder / STACKS_DIR.name / f"Pulumi.{stack}.yaml"

    def write_stack(self, stack: str, values: dict[str, Any]) -> None:
        """A stack file of the test's own, as an operator writes one; `init` then adds its salt."""
        config = {"config": {f"{PROJECT}:{key}": value for key, value in values.items()}}
        self.stack_file(stack).write_text(yaml.safe_dump(config, sort_keys=False))

    def edit_stack(self, stack: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Edit the stack's values (keys without the project's prefix) as an operator edits the
        file; the rest of it, the salt `init` wrote among them, is kept."""
        stack_file = self.stack_file(stack)
        document = yaml.safe_load(stack_file.read_text())
        prefix = f"{PROJECT}:"
        values = {key.removeprefix(prefix): value for key, value in document["config"].items()}
        change(values)
        document["config"] = {f"{prefix}{key}": value for key, value in values.items()}
        stack_file.write_text(yaml.safe_dump(document, sort_keys=False))

    def planned(self, stack: str) -> dict[str, str]:
        """What `pulumi preview` plans for each resource of the stack, by URN: `same`, `update`,
        `replace`, ..."""
        steps = json.loads(self.ok("preview", "--stack", stack, "--json")).get("steps", [])
        return {step["urn"]: step["op"] for step in steps}

    def init(self, stack: str) -> None:
        self.ok("stack", "init", stack, "--secrets-provider=passphrase")

    def resources(self, stack: str) -> list[dict[str, Any]]:
        """The stack's state as the engine keeps it (`pulumi stack export`)."""
        state = json.loads(self.ok("stack", "export", "--stack", stack))
        return state["deployment"].get("resources") or []


def _interrupt_when_set(process: subprocess.Popen[str], interrupt: threading.Event) -> None:
    # The prefix (`ip netns exec`) execs the CLI, so the signal reaches the CLI itself, which
    # cancels its providers' operations and records where they stood.
    while process.poll() is None:
        if interrupt.wait(timeout=0.2):
            process.send_signal(signal.SIGINT)
            return


def _without(folder: Path, path: str) -> list[str]:
    return [entry for entry in path.split(os.pathsep) if not Path(entry).is_relative_to(folder)]


@costly("the Pulumi CLI, its language host and the lab's program, run for real")
def pulumi_project(scratch: Path, prefix: Sequence[str] = ()) -> PulumiProject:
    """The lab's project under `scratch` (made here), with every stack file of the checkout."""
    folder = scratch / "project"
    (folder / STACKS_DIR.name).mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    for stack_file in tracked(f"{STACKS_DIR.name}/Pulumi.*.yaml"):
        shutil.copy(stack_file, folder / STACKS_DIR.name / stack_file.name)
    (folder / "__main__.py").symlink_to(ROOT / "__main__.py")
    (folder / ".venv").symlink_to(ROOT / ".venv")
    for name in ("backend", "home", "tmp", "lab"):
        (scratch / name).mkdir()
    env = {
        **os.environ,
        # The tools first; not .venv/bin: the engine finds the project's virtualenv from Pulumi.yaml.
        "PATH": os.pathsep.join([str(tools.bin_dir()), *_without(ROOT / ".venv", os.environ["PATH"])]),
        "PULUMI_BACKEND_URL": f"file://{scratch / 'backend'}",
        "PULUMI_HOME": str(scratch / "home"),
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # The CLI and the provider leave temporary files: in a folder the test removes. Its path
        # is deep, as a CI runner's often is: the bootstrap's ssh sockets must still fit.
        "TMPDIR": str(scratch / "tmp"),
        # The lab's own records (the bootstrap's runs, kubeconfigs): not in the checkout's .lab.
        STATE_VARIABLE: str(scratch / "lab"),  # PulumiProject.lab_state
    }
    env.pop("KUBECONFIG", None)
    return PulumiProject(scratch, env, tuple(prefix))
