"""Running the host tools the testbed is built with, failing with the command and its output."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence


class TestbedError(RuntimeError):
    """A testbed step that failed; the message says which command and why."""

    __test__ = False  # not a pytest test class despite the name


REQUIRED_TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "apt-cacher-ng": "apt-cacher-ng",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}


def missing_tools() -> list[str]:
    """`tool (Debian package)` for every host tool that is not installed."""
    return [f"{tool} (package {pkg})" for tool, pkg in REQUIRED_TOOLS.items() if not shutil.which(tool)]


def run(cmd: Sequence[str], *, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; on failure raise TestbedError naming the command and quoting its stderr."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise TestbedError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {' / '.join(detail)}")
    return proc
