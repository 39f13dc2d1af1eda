"""The Pulumi CLI from the tools, run as a user runs it on the lab's own project, offline: a local
file backend, a passphrase, no update check, no plugin download, and a folder of its own for its
home and its temporary files. It runs inside the control plane's network namespace, so the
program, the language host and the provider reach that API server and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.config import PROJECT
from lab.controlplane import netns
from lab.controlplane.layout import Layout
from lab.paths import ROOT, STATE_VARIABLE
from lab.testbed import tools
from tests.support.tiers import costly

PASSPHRASE = "k8scifar-tests"
VENV_BIN = ROOT / ".venv" / "bin"


@dataclass(frozen=True)
class PulumiCli:
    """Stack `stack` of the lab's project, its configuration in `folder`/stack.yaml."""

    layout: Layout
    folder: Path
    stack: str

    @property
    def config_file(self) -> Path:
        return self.folder / "stack.yaml"

    def env(self) -> dict[str, str]:
        for sub in ("state", "home", "tmp", "lab"):
            (self.folder / sub).mkdir(exist_ok=True)
        return {
            "PATH": os.pathsep.join(
                [str(tools.bin_dir()), str(VENV_BIN), "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            ),
            "HOME": str(self.folder / "home"),
            "PULUMI_HOME": str(self.folder / "home" / ".pulumi"),
            "PULUMI_BACKEND_URL": f"file://{self.folder / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            # The Python that runs dynamic providers (pulumi-resource-pulumi-python).
            "PULUMI_PYTHON_CMD": str(VENV_BIN / "python"),
            # The Automation API and the provider leave temporary files; they stay in this folder.
            "TMPDIR": str(self.folder / "tmp"),
            STATE_VARIABLE: str(self.folder / "lab"),
        }

    def write_config(self, values: dict[str, Any]) -> None:
        config = {"config": {f"{PROJECT}:{key}": value for key, value in values.items()}}
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def run(self, *args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [*netns.inside(self.layout), str(tools.bin_dir() / "pulumi"), *args, "--non-interactive"]
        return subprocess.run(cmd, cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout)

    def init(self) -> None:
        """Create the stack. `pulumi stack init` writes the stack file into the project's stack
        folder, so it runs in a project of the same name beside the state; the lab's own project
        then reads its configuration from this folder (`--config-file`)."""
        project = self.folder / "project"
        project.mkdir(exist_ok=True)
        (project / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
        done = self.run("stack", "init", self.stack, "--secrets-provider=passphrase", cwd=project)
        assert done.returncode == 0, done.stderr

    @costly("the lab's program through the real Pulumi CLI, language host and provider")
    def stack_command(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --stack STACK --config-file ...` in the lab's project."""
        return self.run(*args, f"--stack={self.stack}", f"--config-file={self.config_file}", timeout=timeout)

    def preview_steps(self) -> list[dict[str, Any]]:
        done = self.stack_command("preview", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        return list(json.loads(done.stdout).get("steps", []))
