"""Fixtures of tests/support, declared once for the whole suite: tests/support/sshd.py says why."""

from tests.support.gpg import signing_key  # noqa: F401
from tests.support.sshd import _sshd_daemon, sshd  # noqa: F401
