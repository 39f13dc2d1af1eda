"""kubectl from the tools, run inside the control plane's namespace with its admin kubeconfig."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab.controlplane import netns
from lab.controlplane.layout import Layout
from lab.testbed import tools


def kubectl(
    layout: Layout,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = 120,
    kubeconfig: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `kubectl ARGS` as the admin, or as `kubeconfig` says; on failure (with `check`) raise
    RuntimeError quoting its stderr."""
    config = kubeconfig or layout.kubeconfig
    cmd = [*netns.inside(layout), str(tools.bin_dir() / "kubectl"), f"--kubeconfig={config}", *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc
