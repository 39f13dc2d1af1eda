"""`pulumi up --stack testbed` as a user runs it, on the two test machines: the real CLI, its Python
language host, and the dynamic providers' launcher starting the provider host that runs the
playbooks. The machines are compared with their inventory from before, as the bootstrap's own
tests compare them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab import testbed
from lab.bootstrap.resource import runner_dir
from tests.support import machine_state
from tests.support.machine_state import STACK
from tests.support.pulumi_cli import PulumiProject, pulumi_project

BOOTSTRAP_TYPE = "pulumi-python:dynamic/k8scifar:HostBootstrap"
# The testbed stack's export, and a trainer uid other than its default.
EXPORT = "/srv/k8scifar"
CHANGED_UID = 10002
# The owner of the second machine forbids a package the lab installs there (nfs-common, for the
# NFS client) with an apt pin: site.yml changes both machines, then stops on the second.
OWNER_PIN = "/etc/apt/preferences.d/owner-no-nfs"
PIN_NFS_COMMON = f"printf 'Package: nfs-common\\nPin: release *\\nPin-Priority: -1\\n' > {OWNER_PIN}"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[PulumiProject]:
    """The stack on a backend of its own; destroyed whatever the test left, so that the next test
    starts from the machines as they were."""
    found = pulumi_project(tmp_path)
    found.init(STACK)
    yield found
    found.ok("destroy", "--stack", STACK, "--yes")


def _inventories(machines: testbed.Testbed) -> dict[str, machine_state.Inventory]:
    return {m.name: machine_state.inventory(machines, m) for m in machines.layout.machines}


def _as_before(
    machines: testbed.Testbed,
    before: dict[str, machine_state.Inventory],
    which: list[testbed.Machine] | None = None,
) -> None:
    for machine in machines.layout.machines if which is None else which:
        after = machine_state.inventory(machines, machine)
        changes = before[machine.name].changes(after, ignore=machine_state.REWRITTEN_BY_RESET)
        assert changes == [], f"{machine.name}:\n" + "\n".join(changes)


def _bootstraps(project: PulumiProject) -> list[dict]:
    return [r for r in project.resources(STACK) if r["type"] == BOOTSTRAP_TYPE]


def _owner_of_runs(machines: testbed.Testbed) -> str:
    server = machines.layout.machine(1)
    return machine_state.root_shell(machines, server, f"stat -c %u {EXPORT}/runs").strip()


def _bootstrap_planned(project: PulumiProject) -> str:
    (step,) = [op for urn, op in project.planned(STACK).items() if f"{BOOTSTRAP_TYPE}::" in urn]
    return step


def test_up_a_change_a_node_taken_out_and_destroy_leave_the_machines_as_they_were(
    machines: testbed.Testbed, project: PulumiProject
) -> None:
    """The bootstrap's whole life through the engine: each step is the user's own command on the
    stack file, as they edit it."""
    before = _inventories(machines)
    project.ok("up", "--stack", STACK, "--yes", "--skip-preview")
    (bootstrap,) = _bootstraps(project)
    changed = bootstrap["outputs"]["changed"]
    assert set(changed) == {m.name for m in machines.layout.machines}
    assert all(count > 0 for count in changed.values()), changed
    # The trainer's uid reached Ansible as an integer: the export belongs to it, not to "10001.0".
    assert _owner_of_runs(machines) == "10001"

    # Nothing changed: the engine sees no difference, and no playbook runs.
    project.ok("up", "--stack", STACK, "--yes", "--expect-no-changes")

    # A value the bootstrap owns: an update in place (no replacement), which site.yml carries out.
    project.edit_stack(STACK, lambda values: values["trainer"].update(uid=CHANGED_UID))
    assert _bootstrap_planned(project) == "update"
    project.ok("up", "--stack", STACK, "--yes", "--skip-preview")
    assert _owner_of_runs(machines) == str(CHANGED_UID)

    # The second node taken out of the stack: reset alone, as it was; the first keeps the lab.
    def one_node(values: dict[str, Any]) -> None:
        values["nodes"] = values["nodes"][:1]
        values["trainer"]["replicas"] = 1

    project.edit_stack(STACK, one_node)
    assert _bootstrap_planned(project) == "update"
    project.ok("up", "--stack", STACK, "--yes", "--skip-preview")
    _as_before(machines, before, [machines.layout.machine(2)])
    assert _owner_of_runs(machines) == str(CHANGED_UID), "the node that stays lost the lab"

    project.ok("destroy", "--stack", STACK, "--yes")
    assert _bootstraps(project) == []
    _as_before(machines, before)


@pytest.fixture
def owner_pin(machines: testbed.Testbed) -> Iterator[None]:
    second = machines.layout.machine(2)
    # The pin bites only where nfs-common is not installed: an earlier test's owner package
    # (tests/integration/test_bootstrap.py) may have brought it, and reset leaves the owner's.
    leftover = f"{machine_state.OWNER_PACKAGE} {machine_state.OWNER_PACKAGE_NEEDS}"
    machine_state.root_shell(machines, second, f"dpkg --purge {leftover} && {PIN_NFS_COMMON}")
    try:
        yield
    finally:
        machine_state.root_shell(machines, second, f"rm -f {OWNER_PIN}")


def test_a_first_up_that_fails_half_way_is_undone_and_destroy_finds_nothing(
    machines: testbed.Testbed, project: PulumiProject, owner_pin: None
) -> None:
    before = _inventories(machines)
    failed = project.run("up", "--stack", STACK, "--yes", "--skip-preview")
    told = failed.stdout + failed.stderr
    assert failed.returncode != 0, told
    (failure,) = [line for line in told.splitlines() if "host lab-node2, task" in line]
    assert "nfs-common" in failure, failure
    # Both machines were changed before it stopped; both are as they were after.
    log = (runner_dir(STACK, project.lab_state) / "site.log").read_text()
    for machine in machines.layout.machines:
        assert re.search(rf"^ +changed +{machine.name}: ", log, re.M), (
            f"site.yml changed nothing on {machine.name}"
        )
    assert "reset.yml then undid what the run had changed on lab-node1, lab-node2" in told
    assert _bootstraps(project) == [], "a failed create is recorded by nobody"
    _as_before(machines, before)

    project.ok("destroy", "--stack", STACK, "--yes")
    _as_before(machines, before)
