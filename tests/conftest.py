"""Fixtures shared across the suite's folders, declared once: tests/support/sshd.py says why for
the sshd; the rendered stacks are read by tests in tests/hosts and tests/seams alike."""

from tests.hosts.host_files import host_files  # noqa: F401
from tests.hosts.render import daemon_files  # noqa: F401
from tests.support.gpg import signing_key  # noqa: F401
from tests.support.sshd import _sshd_daemon, sshd  # noqa: F401
