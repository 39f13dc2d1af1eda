"""Fixtures of the validation suite: the lab's configuration and, per testinfra host, its node.

Run through `python -m lab.validation.runner --stack NAME`, which generates the inventory and passes
`--hosts=ansible://all --ansible-inventory=... --lab-stack=NAME`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab.config import STACKS_DIR, LabConfig, Node, SkipStep, load_stack

# The kubectl that talks to the cluster from the server node, per distribution.
KUBECTL = {"k3s": "k3s kubectl", "kubeadm": "kubectl --kubeconfig /etc/kubernetes/admin.conf"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lab-stack", required=True, help="stack whose lab the suite validates")
    parser.addoption("--lab-stacks-dir", default=str(STACKS_DIR), help="folder of the stack files")
    parser.addoption(
        "--lab-after-reset",
        action="store_true",
        help="check that reset.yml left the machines clean instead of checking the lab",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_reset: checks that reset.yml left nothing behind")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A lab and a reset machine are opposite states: run only the checks of the one asked for.
    The runner names the modules of either; this keeps a run of the whole folder right too."""
    after_reset = config.getoption("--lab-after-reset")
    keep = [i for i in items if (i.get_closest_marker("after_reset") is not None) == after_reset]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest) -> LabConfig:
    option = request.config.getoption
    return load_stack(option("--lab-stack"), Path(option("--lab-stacks-dir")))


@pytest.fixture
def node(host: Any, lab: LabConfig) -> Node:
    """The configured node testinfra's `host` is (the inventory names hosts after nodes)."""
    name = host.backend.host
    return next(n for n in lab.nodes if n.name == name)


def skip_if_step_skipped(lab: LabConfig, step: SkipStep) -> None:
    """Skip a check of a step the stack deliberately leaves out, giving the stack's reason."""
    if step in lab.skip:
        pytest.skip(f"{step.value} is skipped in this stack: {lab.skip[step]}")


@pytest.fixture
def installed(lab: LabConfig) -> LabConfig:
    """The lab, for checks that need Kubernetes installed on the nodes."""
    skip_if_step_skipped(lab, SkipStep.KUBERNETES_INSTALL)
    return lab


class Kubectl:
    """kubectl on the server node, which holds the cluster's admin credentials."""

    def __init__(self, host: Any, lab: LabConfig) -> None:
        self.host = host
        self.command = KUBECTL[lab.distribution.value]

    def run(self, args: str) -> Any:
        """The command's result (rc, stdout, stderr), whatever its exit status."""
        return self.host.run(f"{self.command} {args}")

    def get(self, *args: str) -> Any:
        """`kubectl get ARGS -o json`, parsed."""
        return json.loads(self.host.check_output(f"{self.command} get {' '.join(args)} -o json"))


@pytest.fixture
def kubectl(host: Any, node: Node, installed: LabConfig) -> Kubectl:
    if node.role.value != "server":
        pytest.skip(f"checks in the cluster run once, through kubectl on the server {installed.server.name}")
    return Kubectl(host, installed)
