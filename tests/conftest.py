"""Collection rules for the test tree.

tests/cluster is the validation suite users run against a lab (`python -m lab.validate`); it
needs hosts from an inventory, so the default run leaves it out. The integration tests run it
against the local test machines.
"""

# Fixtures of tests/support, declared once for the whole suite: tests/support/sshd.py says why.
from tests.support.gpg import signing_key  # noqa: F401
from tests.support.sshd import _sshd_daemon, sshd  # noqa: F401

collect_ignore = ["cluster"]
