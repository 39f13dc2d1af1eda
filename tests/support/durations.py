"""Where a run's time goes, by the part of the lab a test belongs to: beside pytest's `--durations`
(its slowest tests), a total per top-level test folder, so a CI log shows which folder grew.
Every phase counts (setup, call, teardown: a fixture's first use is often the largest part), as
pytest's own durations count them. Under pytest-xdist the totals are summed where the reports
arrive, so they are worker time, not wall time. tests/conftest.py registers this module as a
plugin."""

from __future__ import annotations

from collections import defaultdict

import pytest

HEADING = "total per test folder"


def folder_of(nodeid: str) -> str:
    """The top-level part of tests/ a test belongs to: `tests/roles/` for a test under it, the file
    itself for a test at the top (`tests/test_locks.py`)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) + ("/" if len(parts) > 2 else "")


class FolderDurations:
    """Sums each test report's duration by folder, and writes the totals at the end of the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[folder_of(report.nodeid)] += report.duration

    # After pytest's own slowest durations, so the log's last table before the summary is this one.
    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        terminalreporter.write_sep("=", HEADING)
        for folder, seconds in sorted(self.seconds.items(), key=lambda row: (-row[1], row[0])):
            terminalreporter.write_line(f"{seconds:10.2f}s  {folder}")
        terminalreporter.write_line(f"{sum(self.seconds.values()):10.2f}s  in all")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FolderDurations(), "k8scifar-folder-durations")
