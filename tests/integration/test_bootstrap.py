"""site.yml and reset.yml against two real machines, through the runner the Pulumi program uses.

The tests run in order and share one bootstrap: the machines' owner plants state of their own,
converge, converge again with nothing to change, validate with the testinfra suite, the owner
installs a package that needs one the lab installed, reset, validate that nothing is left, and
compare the machines with their inventory from before the lab came.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from lab import testbed
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import LabConfig
from lab.machine_settings import MACHINE_SETTINGS_FILE
from lab.validation.runner import Outcome, run_suite, write_inventory
from tests.support import machine_state
from tests.support.machine_state import STACK

# Host checks that apply to the test machines: each must have run and passed on the nodes it names.
MUST_PASS = {
    "test_os_and_kernel_are_supported": {"lab-node1", "lab-node2"},
    "test_kernel_settings_are_configured": {"lab-node1", "lab-node2"},
    "test_registry_mirror_is_configured": {"lab-node1", "lab-node2"},
    "test_nfs_export_folders_belong_to_the_trainer": {"lab-node1"},
}
# What reset.yml removes: these checks must fail once it ran, or they could not catch a broken lab.
GONE_AFTER_RESET = {"test_kernel_settings_are_configured", "test_registry_mirror_is_configured"}


@pytest.fixture(scope="module")
def provider() -> HostBootstrapProvider:
    return HostBootstrapProvider()


# Files that change with what reset.yml does (the inventory leaves out the export's data, which
# stays unless the stack sets nfs.purgeOnDestroy).
KEPT = machine_state.REWRITTEN_BY_RESET
# The machine's own settings file and its folder: its maker's, there before the lab and after it.
MACHINES_OWN = (f"{PurePosixPath(MACHINE_SETTINGS_FILE).parent}/ ", f"{MACHINE_SETTINGS_FILE} ")


@pytest.fixture(scope="module")
def before_the_lab(machines: testbed.Testbed) -> dict[str, machine_state.Inventory]:
    """The owner's own state planted on both machines, and their inventory before the lab came."""
    found = {}
    for machine in machines.layout.machines:
        machine_state.root_shell(machines, machine, machine_state.PLANT)
        found[machine.name] = machine_state.inventory(machines, machine)
    return found


@pytest.fixture(scope="module")
def converged(
    machines: testbed.Testbed,
    lab: LabConfig,
    provider: HostBootstrapProvider,
    before_the_lab: dict[str, machine_state.Inventory],
) -> dict[str, Any]:
    """site.yml's first run on fresh machines, as `pulumi up` creates the bootstrap resource."""
    return provider.create(bootstrap_inputs(lab, STACK)).outs


def _by_check(outcomes: list[Outcome], status: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for o in outcomes:
        if o.status == status:
            found.setdefault(o.check, set()).add(o.host)
    return found


def test_site_converges_on_both_machines(converged: dict[str, Any], lab: LabConfig) -> None:
    assert set(converged["changed"]) == {n.name for n in lab.nodes}
    assert all(count > 0 for count in converged["changed"].values()), converged["changed"]
    assert set(converged["nodes"]) == {n.name for n in lab.nodes}


def test_second_site_run_changes_nothing(
    converged: dict[str, Any], lab: LabConfig, provider: HostBootstrapProvider
) -> None:
    again = provider.update("hosts-testbed", converged, bootstrap_inputs(lab, STACK)).outs
    assert again["changed"] == {n.name: 0 for n in lab.nodes}


def test_host_checks_pass_on_both_machines(converged: dict[str, Any], lab: LabConfig) -> None:
    outcomes = run_suite(STACK, write_inventory(lab, STACK))
    failed = [str(o) for o in outcomes if o.status in {"failed", "error"}]
    assert not failed, "\n".join(failed)
    passed = _by_check(outcomes, "passed")
    for check, hosts in MUST_PASS.items():
        assert hosts <= passed.get(check, set()), (
            f"{check} did not pass on {hosts - passed.get(check, set())}"
        )
    assert all(o.detail for o in outcomes if o.status == "skipped"), "a skipped check gave no reason"


def test_reset_leaves_nothing_behind(
    converged: dict[str, Any], lab: LabConfig, provider: HostBootstrapProvider, machines: testbed.Testbed
) -> None:
    # While the lab runs, the owner of the second machine comes to need a package the lab installed.
    machine_state.root_shell(machines, machines.layout.machines[1], machine_state.INSTALL_OWNER_PACKAGE)
    provider.delete("hosts-testbed", converged)
    inventory = write_inventory(lab, STACK)
    leftovers = [str(o) for o in run_suite(STACK, inventory, after_reset=True) if o.status != "passed"]
    assert not leftovers, "\n".join(leftovers)
    failed = _by_check(run_suite(STACK, inventory), "failed")
    assert set(failed) >= GONE_AFTER_RESET, (
        f"checks still passing on a reset machine: {GONE_AFTER_RESET - set(failed)}"
    )


def test_reset_leaves_the_machines_as_they_were(
    converged: dict[str, Any], machines: testbed.Testbed, before_the_lab: dict[str, machine_state.Inventory]
) -> None:
    """The first machine is as it was, file for file in /etc and package for package; the second
    also keeps the owner's package and what it needs (nfs-common, which the lab had installed)."""
    first, second = machines.layout.machines
    changes = before_the_lab[first.name].changes(machine_state.inventory(machines, first), ignore=KEPT)
    assert changes == [], f"{first.name} after reset:\n" + "\n".join(changes)

    after = machine_state.inventory(machines, second)
    installed = {
        line.split()[0].split(":")[0] for line in after.sections["packages"] if line.endswith(" install")
    }
    assert {machine_state.OWNER_PACKAGE, machine_state.OWNER_PACKAGE_NEEDS} <= installed
    assert machine_state.OWNER_PACKAGE in after.sections["manual"]
    owners = {
        name: lines for name, lines in before_the_lab[second.name].sections.items() if name != "packages"
    }
    for name in ("cni", "sysctl files"):
        assert owners[name] == after.sections[name], f"{second.name}: {name} changed"
    lab_files = [
        line
        for line in after.sections["etc"]
        if ("k8scifar" in line or line.startswith("/etc/rancher")) and not line.startswith(MACHINES_OWN)
    ]
    assert lab_files == [], f"{second.name} keeps files of the lab: {lab_files}"
    assert after.sections.get("lab state", frozenset()) == frozenset(), (
        f"{second.name} keeps the lab's record"
    )
