"""The image build's AppArmor profile as the prereq role renders and loads it.

The profile is checked by Debian's own AppArmor parser (`apparmor_parser --skip-kernel-load`,
package `apparmor`, scripts/apt-packages.txt). That parser is AppArmor 3.0, which knows neither
ABI 4.0 nor the `userns` rule: the 4.0 rendering is held to be the 3.0 one plus exactly the ABI
line and the rule Ubuntu documents; parsing it is left to a real Ubuntu 24.04 node (docs/validation.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.config.facts import BUILD_PROFILE
from lab.paths import ANSIBLE_DIR
from tests.support.local_play import render_template, run_tasks
from tests.support.program import containers, run_program

TEMPLATE = ANSIBLE_DIR / "roles" / "prereq" / "templates" / "buildkit.apparmor.j2"


def _render(work: Path, abi: str) -> str:
    variables = {"lab_build_apparmor_profile": BUILD_PROFILE, "prereq_apparmor_abi": abi}
    return render_template(work / abi, TEMPLATE, [], variables)


def parser_problems(profile: Path) -> str:
    """What Debian's apparmor_parser says of `profile`, parsed and compiled but not loaded ('' if fine)."""
    parser = shutil.which("apparmor_parser") or "/usr/sbin/apparmor_parser"
    if not Path(parser).exists():
        pytest.skip("apparmor_parser is missing: install Debian's `apparmor` (scripts/apt-packages.txt)")
    done = subprocess.run([parser, "--skip-kernel-load", "--skip-cache", "--quiet", str(profile)],
                          capture_output=True, text=True)  # fmt: skip
    return "" if done.returncode == 0 else done.stderr.strip() or f"exit {done.returncode}"


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("apparmor")
    return {abi: _render(work, abi) for abi in ("3.0", "4.0")}


def test_the_profile_parses_with_debian_s_apparmor(profiles: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / BUILD_PROFILE
    profile.write_text(profiles["3.0"])
    assert parser_problems(profile) == ""


def test_the_parser_check_finds_a_broken_profile(profiles: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text(
        profiles["3.0"].replace("flags=(unconfined) {", "flags=(unconfined) {\n  capability sys_admin\n")
    )
    assert "syntax error" in parser_problems(broken)


def test_abi_4_adds_only_the_userns_rule(profiles: dict[str, str]) -> None:
    """Ubuntu's restriction lets a process create user namespaces when its profile has `userns,`
    (ubuntu.com/blog/ubuntu-23-10-restricted-unprivileged-user-namespaces; the rootlesskit profile
    of moby/moby#47480 is unconfined with that one rule, on ABI 4.0)."""
    old, new = profiles["3.0"].splitlines(), profiles["4.0"].splitlines()
    assert [line for line in new if line not in old] == ["abi <abi/4.0>,", "  userns,"]
    assert [line for line in old if line not in new] == ["abi <abi/3.0>,"]
    assert re.search(
        rf"^profile {BUILD_PROFILE} flags=\(unconfined\) {{$", profiles["4.0"], flags=re.MULTILINE
    )


def test_the_build_pod_names_the_profile_the_nodes_load(profiles: dict[str, str]) -> None:
    (name,) = re.findall(r"^profile (\S+) ", profiles["4.0"], flags=re.MULTILINE)
    build = next(r for r in run_program("example-cpu").of_kind("Job") if r.name == "trainer-build")
    buildkit = next(c for c in containers(build) if c["name"] == "buildkit")
    assert buildkit["securityContext"]["appArmorProfile"] == {
        "type": "Localhost",
        "localhostProfile": name,
    }


FAKE_PARSER = 'echo "$*" >> "$FAKE_DIR/calls"'


def _load(work: Path, loaded: str) -> list[str]:
    (work / "profiles").write_text(loaded)
    variables = {"lab_build_apparmor_profile": BUILD_PROFILE, "prereq_apparmor_abi": "4.0",
                 "prereq_apparmor_profile_file": str(work / BUILD_PROFILE),
                 "prereq_apparmor_loaded_list": str(work / "profiles"), "ansible_become": False}  # fmt: skip
    done = run_tasks("prereq", "apparmor.yml", work / "ansible", variables, {"apparmor_parser": FAKE_PARSER},
                     {"FAKE_DIR": str(work)})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    calls = work / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes the profile owned by root; CI runs as root")
def test_the_role_loads_the_profile_when_written_or_missing_from_the_kernel(tmp_path: Path) -> None:
    load = f"--replace {tmp_path / BUILD_PROFILE}"
    assert _load(tmp_path, "docker-default (enforce)\n") == [load]
    # Unchanged and loaded (the kernel lists it with its mode): nothing to do.
    assert _load(tmp_path, f"{BUILD_PROFILE} (unconfined)\n") == [load]
    # Unchanged but gone from the kernel (apparmor.service reloads /etc/apparmor.d at boot; a
    # manual removal does not): loaded again.
    assert _load(tmp_path, "") == [load, load]
