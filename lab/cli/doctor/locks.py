"""The lock files that pin every Python package of each role, and the pins a lock holds.

scripts/lock.sh writes them from pyproject.toml, each requirement as `name==version` followed by
`--hash=sha256:` lines for its files on PyPI, so `pip install --require-hashes -r LOCK` installs the
same bytes anywhere.
"""

from __future__ import annotations

import re

from lab.paths import ROOT

# `labctl` and the Pulumi program: what `pip install .` brings.
OPERATOR_LOCK = ROOT / "requirements" / "operator.lock"
# Everything: the operator's packages, the trainer's and the test tools (scripts/setup.sh).
DEV_LOCK = ROOT / "requirements" / "dev.lock"
# The trainer image's; it lives in the image's build context, which holds only images/trainer/ and trainer/.
TRAINER_LOCK = ROOT / "images" / "trainer" / "requirements.txt"

# A requirement starts its line; hash lines are indented and comments start with `#`.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): case and runs of `-_.` do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """The `name==version` requirements of a lock, by canonical name."""
    return {canonical(name): version for name, version in _PIN.findall(text)}
