"""A machine taken out of a standing lab, on three real test machines: the bootstrap's update (what
`pulumi up` runs after the node is deleted from the stack file) resets that machine alone, and
the two that stay keep the lab.

The stack is the testbed stack on three machines (a server and two agents), so the drain is
skipped with the stack's reason (no Kubernetes on these machines), and so is the NFS export (no
NFS server in the kernel), whose list of clients the nodes' addresses make; the reset is the
real one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from lab import testbed
from lab.bootstrap.inventory import NODE_STATE_DIR
from lab.bootstrap.playbook import log_file
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs, runner_dir
from lab.cli.try_local import stack_values
from lab.config import parse_config
from lab.paths import STATE_DIR

STACK = "shrink"
LAYOUT = testbed.Layout(STACK, 3, "10.77.3.0/24")
RESOURCE_ID = f"hosts-{STACK}"


@pytest.fixture(scope="module")
def three(root: None) -> Iterator[testbed.Testbed]:
    with testbed.exclusive():
        if testbed.leftovers(LAYOUT):
            testbed.down(LAYOUT)
        try:
            yield testbed.up(LAYOUT)
        finally:
            testbed.down(LAYOUT)
            shutil.rmtree(STATE_DIR / STACK, ignore_errors=True)


def _has(machines: testbed.Testbed, index: int, path: str) -> bool:
    found = testbed.ssh(machines, LAYOUT.machines[index], f"sudo test -e {path} && echo yes || echo no")
    return found.strip() == "yes"


def _inputs(machines: int) -> dict:
    values = stack_values(LAYOUT)
    values["nodes"] = values["nodes"][:machines]
    # A rank per machine, the batch left to the lab (lab.config.batch), as a stack shrunk by hand has it.
    trainer = {key: value for key, value in values["trainer"].items() if key != "batchSize"}
    values["trainer"] = trainer | {"replicas": machines}
    return bootstrap_inputs(parse_config(values), STACK)


def test_a_node_taken_out_of_the_stack_is_reset_alone(three: testbed.Testbed) -> None:
    provider = HostBootstrapProvider()
    first, second, third = (m.name for m in LAYOUT.machines)
    grown = provider.create(_inputs(3)).outs
    assert set(grown["nodes"]) == {first, second, third}
    assert all(_has(three, index, NODE_STATE_DIR) for index in range(3))

    shrunk = provider.update(RESOURCE_ID, grown, _inputs(2)).outs

    # The machine that left: reset, its record (what the lab added) gone with the rest.
    assert not _has(three, 2, NODE_STATE_DIR)
    reset_log = log_file(runner_dir(STACK), "remove_nodes.yml").read_text()
    assert "skipping the drain: " in reset_log and third in reset_log
    assert first not in reset_log and second not in reset_log, reset_log
    # The machines that stay: still the lab's, and site.yml finds nothing to change on the agent.
    assert _has(three, 0, NODE_STATE_DIR) and _has(three, 1, NODE_STATE_DIR)
    assert set(shrunk["nodes"]) == {first, second}
    assert shrunk["changed"][second] == 0, shrunk["changed"]
