"""The suite's tiers and its shared fixtures.

Tiers: tests/support/tiers.py decides which tests are slow (and which are integration) from their
folder and what they use; nothing is marked slow by hand. tests/support/durations.py ends each
run with its time per test folder. Fixtures shared across folders are
declared once: tests/support/sshd.py says why for the sshd; the rendered host and daemon files are
read by tests in tests/roles and tests/seams alike. Each is defined in its tests/support module,
registered here as a plugin: no conftest is imported as a module.
"""

from __future__ import annotations

import pytest

# The helpers' asserts explain a failure as the tests' own do.
pytest.register_assert_rewrite("tests.support")

pytest_plugins = [
    "tests.support.daemon_files",
    "tests.support.durations",
    "tests.support.gpg",
    "tests.support.host_files",
    "tests.support.labctl",
    "tests.support.monitoring",
    "tests.support.sshd",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tier before `-m` selects by marks."""
    from tests.support.tiers import apply_tiers

    # pytest-xdist sets `loadgroup` on a worker of a `--dist loadgroup` run, where tests are collected.
    apply_tiers(items, loadgroup=bool(config.getoption("loadgroup", False)))
