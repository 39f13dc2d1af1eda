"""Fixtures shared across the suite's folders, declared once: tests/support/sshd.py says why for
the sshd; the rendered host and daemon files are read by tests in tests/roles and tests/seams
alike. Each is defined in its tests/support module, registered here as a plugin: no conftest is
imported as a module."""

pytest_plugins = [
    "tests.support.daemon_files",
    "tests.support.gpg",
    "tests.support.host_files",
    "tests.support.sshd",
]
