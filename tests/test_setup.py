"""scripts/setup.sh as a newcomer runs it: on a root shell with no sudo (a fresh server, a
container), as a user who may sudo, and through sudo; it says what it does, step by step with
each step's time, and the packages it installs start no service and stay disabled.

apt-get, dpkg-query, systemctl, sudo and python3 are stand-ins that record how they were called
(a test cannot install Debian packages or enable services on the machine it runs on); everything
else is the real script, run by bash in a copy of the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.shipped import ROOT

NOBODY = 65534
# Real tools the script uses beside the stand-ins; PATH holds these and nothing else, so a
# `sudo` the script calls can only be the stand-in (and on the root shell, there is none).
TOOLS = (
    *("bash", "sh", "env", "grep", "xargs", "basename", "dirname", "id"),
    *("sleep", "chmod", "rm", "cat", "tr", "mkdir", "cut", "mktemp"),
)

STANDINS = {
    # Records who ran it (uid) and whether policy-rc.d forbade starting services meanwhile; an
    # install adds the packages to $INSTALLED's list, rpcbind with nfs-kernel-server (its
    # dependency through nfs-common, which enables rpcbind.service on install too).
    "apt-get": """#!/bin/sh
echo "apt-get uid=$(id -u) policy=$(cat "$POLICY_RC_D" 2>/dev/null | tr '\\n' ' ') $*" >> "$LOG"
[ "$1" = install ] || exit 0
for arg; do
  case "$arg" in -*|install) ;; nfs-kernel-server) echo "$arg"; echo rpcbind ;; *) echo "$arg" ;; esac
done >> "$INSTALLED"
""",
    # What is installed: the list in $INSTALLED. Each package's files: a unit and a template.
    "dpkg-query": """#!/bin/sh
units=/lib/systemd/system
if [ "$1" = -L ]; then echo "$units/$2.service"; echo "$units/$2@.service"; exit 0; fi
while read -r pkg; do printf 'install ok installed\\t%s\\n' "$pkg"; done < "$INSTALLED"
""",
    "systemctl": """#!/bin/sh
case "$1" in
  is-system-running) echo running ;;
  is-enabled) echo enabled ;;
  is-active) exit 0 ;;
  *) echo "systemctl uid=$(id -u) $*" >> "$LOG" ;;
esac
""",
    "sudo": """#!/bin/sh
echo "sudo uid=$(id -u) $*" >> "$LOG"
[ "$1" = -u ] && shift 3
exec "$@"
""",
    # `python3 -m venv .venv` makes a .venv whose pip and python record their calls; its python
    # fails, as it does where there is no tools folder: the set-up goes on.
    "python3": """#!/bin/sh
mkdir -p .venv/bin
printf '#!/bin/sh\\necho "pip uid=$(id -u) $*" >> "$LOG"\\n' > .venv/bin/pip
printf '#!/bin/sh\\necho "python uid=$(id -u) $*" >> "$LOG"\\nexit 1\\n' > .venv/bin/python
chmod 755 .venv/bin/pip .venv/bin/python
""",
}


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder another user (NOBODY) may enter too, unlike pytest's own."""
    folder = Path(tempfile.mkdtemp(prefix="setup-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _checkout(tmp_path: Path, sudo: bool) -> tuple[Path, dict[str, str]]:
    """A copy of what setup.sh reads, stand-ins on PATH (sudo among them only if `sudo`)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "apt-packages.txt"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    for name, script in STANDINS.items():
        if name == "sudo" and not sudo:
            continue
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    for path in (tmp_path, repo, repo / "scripts"):
        path.chmod(path.stat().st_mode | stat.S_IWOTH | stat.S_IXOTH | stat.S_IROTH)
    log, installed = tmp_path / "calls.log", tmp_path / "installed"
    installed.write_text("iproute2\nopenssh-client\nsudo\n")  # what a fresh Debian has of the list
    for path in (log, installed):
        path.touch()
        path.chmod(0o666)
    env = {
        "PATH": str(bin_dir),
        "LOG": str(log),
        "POLICY_RC_D": str(tmp_path / "policy-rc.d"),
        "INSTALLED": str(installed),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
    }
    return repo, env


def _run(repo: Path, env: dict[str, str], user: int | None = None) -> subprocess.CompletedProcess[str]:
    prefix = (
        [shutil.which("setpriv") or "setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        if user
        else []
    )
    return subprocess.run(
        [*prefix, "/bin/bash", str(repo / "scripts" / "setup.sh")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("running setup.sh as root and as another user needs root (CI runs as root)")


def _calls(env: dict[str, str]) -> list[str]:
    return Path(env["LOG"]).read_text().splitlines()


def test_a_root_shell_without_sudo_gets_everything_step_by_step(tmp_path: Path) -> None:
    repo, env = _checkout(tmp_path, sudo=False)
    done = _run(repo, env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = _calls(env)
    assert not any(call.startswith("sudo") for call in calls), calls
    steps = re.findall(r"^setup: \[(\d)/(\d)\] (.*) \.\.\.$", done.stdout, re.M)
    timed = re.findall(r"^setup:   done in \d+ s$", done.stdout, re.M)
    assert [int(n) for n, _, _ in steps] == [1, 2, 3, 4, 5, 6] and len(timed) == 6, done.stdout
    assert all(total == "6" for _, total, _ in steps)
    # Only the packages that were not there are installed, while policy-rc.d says no to every start.
    (install,) = [call for call in calls if call.startswith("apt-get") and " install " in call]
    assert "policy=#!/bin/sh exit 101" in install and " openssh-server " in install + " "
    assert " iproute2" not in install and not Path(env["POLICY_RC_D"]).exists(), "its own policy-rc.d stays"
    # What their packages enabled is disabled again; templates and packages already there alone.
    disabled = [call.split()[-1] for call in calls if call.startswith("systemctl uid=0 disable --now")]
    assert {"apt-cacher-ng.service", "nfs-kernel-server.service", "rpcbind.service"} <= set(disabled)
    assert "sudo.service" not in disabled and not any("@" in unit for unit in disabled)
    assert "disabled apt-cacher-ng.service (apt-cacher-ng)" in done.stdout
    pip = [call for call in calls if call.startswith("pip")]
    assert len(pip) == 3 and all(call.startswith("pip uid=0 install") for call in pip)
    tools = [call for call in calls if call.startswith("python")]
    assert tools == ["python uid=0 -m lab.testbed.tools install"]


def test_a_user_who_may_sudo_is_asked_only_for_the_debian_packages(tmp_path: Path) -> None:
    repo, env = _checkout(tmp_path, sudo=True)
    done = _run(repo, env, user=NOBODY)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = _calls(env)
    apt = [call for call in calls if call.startswith("sudo") and "apt-get" in call]
    assert len(apt) == 2, calls  # update, install
    assert all(call.startswith(f"pip uid={NOBODY} ") for call in calls if call.startswith("pip")), calls
    assert not any(call.startswith("sudo") and "pip" in call for call in calls)


def test_run_through_sudo_the_venv_is_the_users(tmp_path: Path) -> None:
    repo, env = _checkout(tmp_path, sudo=True)
    done = _run(repo, env | {"SUDO_USER": "nobody"})
    assert done.returncode == 0, done.stdout + done.stderr
    calls = _calls(env)
    owned = [call for call in calls if call.startswith("sudo uid=0 -u nobody --")]
    assert any("python3 -m venv .venv" in call for call in owned), calls
    assert any(".venv/bin/pip install --quiet --require-hashes" in call for call in owned), calls


def test_the_readme_s_first_block_runs_on_a_root_shell_as_written() -> None:
    """Its commands, as typed: none needs sudo, which a fresh server or container may not have."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block is not None
    commands = [line.split("#")[0].split() for line in block.group(1).splitlines() if line.strip()]
    assert commands[0] == ["scripts/setup.sh"], commands
    assert not any(words[0] == "sudo" for words in commands), commands
