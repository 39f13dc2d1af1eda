"""An OpenPGP key made by gpg for the test, standing in for a repository's signing key.

gpg starts a gpg-agent for its home directory, a daemon that outlives gpg and every test: each
home made here has its agent ended with `gpgconf --kill all` (which ends the daemons of the
GNUPGHOME it is given, no other) when the key is made. tests/conftest.py registers this module
as a plugin: the fixture is declared once for the whole suite.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

USER_ID = "k8scifar test <test@invalid>"


@dataclass(frozen=True)
class Key:
    armored: str  # the public key block, as a repository publishes it
    fingerprint: str  # of the primary key, as gpg prints it


def gpg(home: Path, *args: str) -> str:
    """gpg's output for `args`, with no passphrase to ask for."""
    command = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout


@contextmanager
def gnupg_home(home: Path) -> Iterator[Path]:
    """A gpg home directory; its gpg-agent, if gpg started one, is ended on the way out."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        yield home
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(home)}, check=True)


def _fingerprint(home: Path) -> str:
    records = [line.split(":") for line in gpg(home, "--with-colons", "--list-keys").splitlines()]
    return next(r[9] for r in records if r[0] == "fpr")


def make_key(home: Path) -> Key:
    """A signing key with an encryption subkey (whose fingerprint is no signing identity)."""
    with gnupg_home(home):
        gpg(home, "--quick-generate-key", USER_ID, "ed25519", "sign", "1d")
        gpg(home, "--quick-add-key", _fingerprint(home), "cv25519", "encr", "1d")
        return Key(gpg(home, "--armor", "--export"), _fingerprint(home))


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> Key:
    return make_key(tmp_path_factory.mktemp("gnupg"))
