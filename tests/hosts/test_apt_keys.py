"""Apt sources are added only with the signing key their role pins (roles/apt_signed_source).

The fingerprint filter is checked against gpg's own fingerprints of keys gpg makes here; the
role is run for real on a local connection with a key that is not the pinned one, and stops
before any apt source is written.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.playbook import ANSIBLE_DIR
from tests.hosts.local_play import run_tasks

sys.path.insert(0, str(ANSIBLE_DIR / "roles" / "apt_signed_source" / "filter_plugins"))
from openpgp import openpgp_fingerprints


def _gpg(home: Path, *args: str) -> str:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """An armored public key with a subkey, and gpg's fingerprint of its primary key."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    _gpg(
        home,
        "--passphrase",
        "",
        "--quick-generate-key",
        "Lab Test <lab@example.org>",
        "rsa2048",
        "default",
        "1d",
    )
    _gpg(home, "--passphrase", "", "--quick-add-key", _fingerprint(home), "rsa2048", "encr", "1d")
    return _gpg(home, "--armor", "--export"), _fingerprint(home)


def _fingerprint(home: Path) -> str:
    records = [line.split(":") for line in _gpg(home, "--with-colons", "--list-keys").splitlines()]
    return next(r[9] for r in records if r[0] == "fpr")


def test_the_filter_reads_the_primary_keys_fingerprint_as_gpg_does(key: tuple[str, str]) -> None:
    armored, fingerprint = key
    assert openpgp_fingerprints(armored) == [fingerprint]  # the subkey is not a signing identity here


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A local web server for `tmp_path` (the role fetches keys over HTTP); its base URL."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_a_key_that_is_not_the_pinned_one_stops_the_role_before_apt_is_touched(
    key: tuple[str, str], served: str, tmp_path: Path
) -> None:
    armored, fingerprint = key
    (tmp_path / "key.asc").write_text(armored)
    variables = {
        "apt_signed_source_name": "lab-test",
        "apt_signed_source_uris": "https://example.org/deb",
        "apt_signed_source_match": "example.org/deb",
        "apt_signed_source_key_url": f"{served}/key.asc",
        "apt_signed_source_fingerprint": "0" * 40,
    }
    done = run_tasks("apt_signed_source", "main.yml", tmp_path / "ansible", variables)
    assert done.returncode != 0
    assert f"has fingerprint {fingerprint}, not the pinned {'0' * 40}" in done.stdout
    assert "TASK [apt_signed_source : Add the lab's source" not in done.stdout
    assert not Path("/etc/apt/sources.list.d/k8scifar-lab-test.sources").exists()


def test_a_source_without_its_match_is_refused_before_any_source_is_read(tmp_path: Path) -> None:
    """An empty match would take every source of the machine for the repository's own."""
    variables = {
        "apt_signed_source_name": "lab-test",
        "apt_signed_source_uris": "https://example.org/deb",
        "apt_signed_source_key_url": "https://example.org/key.asc",
        "apt_signed_source_fingerprint": "0" * 40,
    }
    done = run_tasks("apt_signed_source", "main.yml", tmp_path / "ansible", variables)
    assert done.returncode != 0
    assert "needs its name, URIs, match, key URL and fingerprint set" in done.stdout
    assert "Look for a source" not in done.stdout
