"""site.yml and reset.yml against two real machines, through the runner the Pulumi program uses.

The tests run in order and share one bootstrap: converge, converge again with nothing to change,
validate with the testinfra suite, reset, and validate that nothing is left.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab import testbed
from lab.config import LabConfig
from lab.hosts import HostBootstrapProvider, bootstrap_inputs
from lab.validate import Outcome, run_suite, write_inventory
from tests.integration.conftest import STACK

# Host checks that apply to the test machines: each must have run and passed on the nodes it names.
MUST_PASS = {
    "test_os_and_kernel_are_supported": {"lab-node1", "lab-node2"},
    "test_kernel_settings_are_configured": {"lab-node1", "lab-node2"},
    "test_registry_mirror_is_configured": {"lab-node1", "lab-node2"},
    "test_nfs_export_directory_belongs_to_the_trainer": {"lab-node1"},
}
# What reset.yml removes: these checks must fail once it ran, or they could not catch a broken lab.
GONE_AFTER_RESET = {"test_kernel_settings_are_configured", "test_registry_mirror_is_configured"}


@pytest.fixture(scope="module")
def provider() -> HostBootstrapProvider:
    return HostBootstrapProvider()


@pytest.fixture(scope="module")
def converged(machines: testbed.Testbed, lab: LabConfig, provider: HostBootstrapProvider) -> dict[str, Any]:
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
    converged: dict[str, Any], lab: LabConfig, provider: HostBootstrapProvider
) -> None:
    provider.delete("hosts-testbed", converged)
    inventory = write_inventory(lab, STACK)
    leftovers = [str(o) for o in run_suite(STACK, inventory, after_reset=True) if o.status != "passed"]
    assert not leftovers, "\n".join(leftovers)
    failed = _by_check(run_suite(STACK, inventory), "failed")
    assert set(failed) >= GONE_AFTER_RESET, (
        f"checks still passing on a reset machine: {GONE_AFTER_RESET - set(failed)}"
    )
