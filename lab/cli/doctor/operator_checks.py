"""The checks `labctl doctor` runs on the operator's machine: the Pulumi CLI, and the Python
packages `pulumi up` and the validation suite import, as the operator's lock pins them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from lab.cli.common.console import Finding, Level
from lab.cli.doctor.locks import OPERATOR_LOCK, pins

PULUMI_INSTALL = "https://www.pulumi.com/docs/install/"
OPERATOR = "operator"
# What `pulumi up` and the validation suite import on the operator's machine; the trainer runs
# in its image, so torch is not among them.
RUNTIME_MODULES = ("pulumi", "pulumi_kubernetes", "ansible_runner", "testinfra")


def pulumi_cli() -> Finding:
    exe = shutil.which("pulumi")
    if exe is None:
        return Finding(
            OPERATOR,
            "Pulumi CLI",
            Level.ERROR,
            "`pulumi` is not on PATH",
            f"install it ({PULUMI_INSTALL}), then `pulumi login --local`",
        )
    done = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=30, check=False)
    version = done.stdout.strip()
    if done.returncode != 0 or not re.fullmatch(r"v?3\.[0-9]+\.[0-9]+.*", version):
        return Finding(
            OPERATOR,
            "Pulumi CLI",
            Level.ERROR,
            f"{exe} did not report a 3.x version ({version or done.stderr.strip()})",
            f"reinstall it from {PULUMI_INSTALL}",
        )
    return Finding(OPERATOR, "Pulumi CLI", Level.OK, f"{version} at {exe}")


def python_dependencies(lock: Path = OPERATOR_LOCK) -> Finding:
    """Every package of the operator's lock installed at its pinned version in this Python."""
    wrong = []
    pinned = pins(lock.read_text())
    for name, want in pinned.items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} missing")
            continue
        # As pip reads `==`: a local build label (torch 2.14.1+cpu) still matches 2.14.1.
        if have.split("+")[0] != want:
            wrong.append(f"{name} {have} (pinned {want})")
    if wrong:
        return Finding(
            OPERATOR,
            "Python dependencies",
            Level.ERROR,
            f"{len(wrong)} of {len(pinned)} differ from {lock.name}: {', '.join(wrong[:5])}",
            "run scripts/setup.sh, then use .venv/bin/labctl",
        )
    return Finding(
        OPERATOR, "Python dependencies", Level.OK, f"{len(pinned)} packages as pinned in {lock.name}"
    )


def python_imports(modules: tuple[str, ...] = RUNTIME_MODULES) -> Finding:
    """The lab's packages import, in a fresh interpreter: a package built against another version
    of its dependency installs cleanly and fails only here."""
    script = "; ".join(f"import {m}" for m in modules)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        return Finding(
            OPERATOR, "Python imports", Level.ERROR, reason, "run scripts/setup.sh, then use .venv/bin/labctl"
        )
    return Finding(OPERATOR, "Python imports", Level.OK, f"{', '.join(modules)} import")
