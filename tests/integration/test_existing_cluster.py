"""A k3s the lab did not install, on the second test machine: `labctl doctor` reports it as an
error, site.yml stops before it changes anything on either machine, and reset.yml leaves it be.

The k3s is a stand-in with the files k3s's installer leaves (its binary and its agent unit): no k3s
release can be downloaded here, and the checks look only at what is on disk.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab import testbed
from lab.bootstrap.inventory import NODE_STATE_DIR
from lab.bootstrap.playbook import PlaybookError
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs
from lab.config import LabConfig
from tests.support import machine_state
from tests.support.labctl import labctl
from tests.support.machine_state import STACK

OWNER_K3S = ["/usr/local/bin/k3s", "/etc/systemd/system/k3s-agent.service"]
PLANT_K3S = f"""
set -e
printf '#!/bin/sh\\necho k3s version v1.31.4+k3s1\\n' > {OWNER_K3S[0]}
chmod 0755 {OWNER_K3S[0]}
printf '[Unit]\\nDescription=Lightweight Kubernetes\\n' > {OWNER_K3S[1]}
"""


@pytest.fixture(scope="module")
def owners_k3s(machines: testbed.Testbed) -> Iterator[testbed.Machine]:
    """The second machine, with the owner's k3s; removed again for the tests after these."""
    second = machines.layout.machines[1]
    machine_state.root_shell(machines, second, PLANT_K3S)
    yield second
    machine_state.root_shell(machines, second, f"rm -f {' '.join(OWNER_K3S)}")


def test_doctor_reports_a_cluster_the_lab_did_not_install(
    owners_k3s: testbed.Machine, lab: LabConfig
) -> None:
    result = labctl("doctor", "--stack", STACK, "--nodes-only", "--no-bandwidth")
    rows = [line for line in result.out.splitlines() if "existing cluster" in line]
    assert result.code == 1 and len(rows) == 2, result.out
    mine, theirs = rows
    assert "│ ok " in mine
    assert "error" in theirs and "k3s not installed by this lab" in theirs, theirs
    assert OWNER_K3S[0] in theirs and "k3s-uninstall.sh" in theirs


def test_site_refuses_and_reset_leaves_it_be(
    owners_k3s: testbed.Machine, machines: testbed.Testbed, lab: LabConfig
) -> None:
    provider = HostBootstrapProvider()
    inputs = bootstrap_inputs(lab, STACK)
    with pytest.raises(PlaybookError) as refused:
        provider.create(inputs)
    (failure,) = refused.value.failures
    assert failure.host == owners_k3s.name
    assert f"{owners_k3s.name} already has k3s, which this lab did not install" in failure.message
    assert "Nothing was changed" in failure.message and "k3s-uninstall.sh" in failure.message
    for machine in machines.layout.machines:
        left = machine_state.root_shell(
            machines, machine, f"ls -d {NODE_STATE_DIR} /etc/sysctl.d/*k8scifar* 2>/dev/null; true"
        )
        assert left.strip() == "", f"site.yml changed {machine.name} before it refused: {left}"

    provider.delete("hosts-testbed", inputs)
    there = machine_state.root_shell(machines, owners_k3s, f"ls {' '.join(OWNER_K3S)}")
    assert sorted(there.split()) == sorted(OWNER_K3S), "reset.yml removed the owner's k3s"
