"""Project-wide pytest policy: in CI (CI=true) a skipped test is a failure; state in a temporary folder.

Tests skip only where what they check cannot apply on the machine at hand; CI runs as root on
the reference machine, where everything applies, so a skip there hides a broken set-up.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# The orchestrator's state (known_hosts, runner work folders, inventories) goes to a temporary
# folder for the tests' session, never to the checkout's .lab/ (lab/bootstrap/inventory.py reads it).
# Parallel workers (pytest-xdist) inherit the session's folder and each take a folder of their own
# in it, so that two tests of one stack name never share a state folder.
STATE_VARIABLE = "K8SCIFAR_STATE_DIR"
SESSION_STATE_VARIABLE = "K8SCIFAR_TEST_SESSION_STATE_DIR"
_OWN_STATE = None
if not os.environ.get(STATE_VARIABLE):
    _OWN_STATE = os.environ[STATE_VARIABLE] = tempfile.mkdtemp(prefix="k8scifar-state-")
    os.environ[SESSION_STATE_VARIABLE] = _OWN_STATE
elif (worker := os.environ.get("PYTEST_XDIST_WORKER")) and (
    os.environ[STATE_VARIABLE] == os.environ.get(SESSION_STATE_VARIABLE)
):
    os.environ[STATE_VARIABLE] = os.path.join(os.environ[STATE_VARIABLE], worker)
    os.makedirs(os.environ[STATE_VARIABLE], exist_ok=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_STATE is not None:
        shutil.rmtree(_OWN_STATE, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; in CI every test must run:", red=True)
        for report in skipped:
            reporter.write_line(f"  {report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
