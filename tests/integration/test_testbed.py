"""The test machines themselves: reachable as the stack describes, and gone without a trace."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from lab import testbed
from lab.config import LabConfig
from lab.testbed import machines as machine_boot
from lab.testbed import rootfs
from lab.testbed.machines import login_command


def test_machines_answer_ssh_with_sudo_and_reach_each_other(
    machines: testbed.Testbed, lab: LabConfig
) -> None:
    first, second = machines.layout.machines
    assert testbed.ssh(machines, first, "sudo", "-n", "id", "-u").strip() == "0"
    assert testbed.ssh(machines, second, "hostname").strip() == second.name
    probe = f"exec 3<>/dev/tcp/{second.address}/22 && head -c 4 <&3"
    assert testbed.ssh(machines, first, "bash", "-c", f"'{probe}'") == "SSH-"
    assert [n.address for n in lab.nodes] == [first.address, second.address]


def test_the_login_a_person_is_given_checks_the_machines_own_keys_and_leaves_theirs_alone(
    machines: testbed.Testbed,
) -> None:
    """The command printed for a person (`labctl try --keep`, `python -m lab.testbed status`)
    checks each machine's host key strictly against the testbed's own file: the machines get new
    keys on every `up`, so a key kept in the user's ~/.ssh/known_hosts would make the next
    testbed's login fail as a changed host identification."""
    own = Path("~root/.ssh/known_hosts").expanduser()
    before = own.read_bytes() if own.exists() else None
    for machine in machines.layout.machines:
        *command, target = shlex.split(login_command(machines.layout, machine))
        assert command[0] == "ssh" and "StrictHostKeyChecking=yes" in command, command
        # No prompt: an unknown or changed host key fails the login instead of asking.
        done = subprocess.run(
            [*command, "-F", "/dev/null", "-o", "BatchMode=yes", target, "hostname"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stdout.strip() == machine.name, done.stderr
    assert (own.read_bytes() if own.exists() else None) == before, "the user's known_hosts changed"


def test_a_failed_up_leaves_nothing(machines: testbed.Testbed, monkeypatch: pytest.MonkeyPatch) -> None:
    """`up` fails after the bridge, the proxy and a booted machine exist; all of it must go.

    It runs beside the session's machines, while their lock keeps other test runs away.
    """
    layout = testbed.Layout("broken", 2, "10.77.5.0/24")
    install = rootfs.install

    def install_then_fail(lay: testbed.Layout, machine: testbed.Machine, *args: object) -> None:
        if machine.name.endswith("node2"):
            raise testbed.TestbedError("injected failure while installing the second machine")
        install(lay, machine, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(rootfs, "install", install_then_fail)
    booted = []
    boot = machine_boot.boot
    monkeypatch.setattr(machine_boot, "boot", lambda m, log: booted.append(m.name) or boot(m, log))
    with pytest.raises(testbed.TestbedError, match="injected failure"):
        testbed.up(layout)
    assert booted == ["broken-node1"]
    assert testbed.leftovers(layout) == []
