"""The user's own `pulumi` commands, run for real: the CLI, its Python language host and the
dynamic providers' launcher from the upstream tools' cache (lab/testbed/tools.py), on the lab's
own project, with a local file backend and a passphrase.

The project is a folder of its own holding the checkout's Pulumi.yaml, `__main__.py` and stack
files: `pulumi stack init` writes the passphrase's salt into the stack file, which must not change
the checkout. Its `.venv` is the checkout's, where the lab is installed, so the program and the
dynamic provider host import the lab under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """The lab's Pulumi project in `folder`, run with `env`."""

    folder: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --non-interactive`, its output kept (checked by the caller)."""
        process = subprocess.Popen(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
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

    def resources(self, stack: str) -> list[dict[str, Any]]:
        """The stack's state as the engine keeps it (`pulumi stack export`)."""
        state = json.loads(self.ok("stack", "export", "--stack", stack))
        return state["deployment"].get("resources") or []


def _without(folder: Path, path: str) -> list[str]:
    return [entry for entry in path.split(os.pathsep) if not Path(entry).is_relative_to(folder)]


@costly("the Pulumi CLI, its language host and the lab's program, run for real")
def pulumi_project(folder: Path) -> PulumiProject:
    """The lab's project in `folder` (made here), with every stack file of the checkout."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    (folder / "stacks").mkdir()
    for stack_file in tracked("stacks/Pulumi.*.yaml"):
        shutil.copy(stack_file, folder / "stacks" / stack_file.name)
    (folder / "__main__.py").symlink_to(ROOT / "__main__.py")
    (folder / ".venv").symlink_to(ROOT / ".venv")
    for name in ("backend", "home", "tmp"):
        (folder.parent / f"pulumi-{name}").mkdir()
    env = {
        **os.environ,
        # The tools first; not .venv/bin: the engine finds the project's virtualenv from Pulumi.yaml.
        "PATH": os.pathsep.join([str(tools.bin_dir()), *_without(ROOT / ".venv", os.environ["PATH"])]),
        "PULUMI_BACKEND_URL": f"file://{folder.parent / 'pulumi-backend'}",
        "PULUMI_HOME": str(folder.parent / "pulumi-home"),
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # The CLI and the provider leave temporary files: in a folder the test removes.
        "TMPDIR": str(folder.parent / "pulumi-tmp"),
    }
    return PulumiProject(folder, env)
