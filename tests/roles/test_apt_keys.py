"""Apt sources are added only with the signing key their role pins (roles/apt_signed_source).

The fingerprint filter is checked against gpg's own fingerprints of keys gpg makes here; the
role is run for real on a local connection with a key that is not the pinned one, and stops
before any apt source is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.paths import ANSIBLE_DIR
from tests.support.gpg import Key
from tests.support.local_play import run_tasks
from tests.support.network import serving

sys.path.insert(0, str(ANSIBLE_DIR / "roles" / "apt_signed_source" / "filter_plugins"))
from openpgp import openpgp_fingerprints


def test_the_filter_reads_the_primary_keys_fingerprint_as_gpg_does(signing_key: Key) -> None:
    # The key has a subkey, which is not a signing identity here.
    assert openpgp_fingerprints(signing_key.armored) == [signing_key.fingerprint]


def test_a_key_that_is_not_the_pinned_one_stops_the_role_before_apt_is_touched(
    signing_key: Key, tmp_path: Path
) -> None:
    (tmp_path / "key.asc").write_text(signing_key.armored)
    with serving(tmp_path) as url:
        variables = {
            "apt_signed_source_name": "lab-test",
            "apt_signed_source_uris": "https://example.org/deb",
            "apt_signed_source_match": "example.org/deb",
            "apt_signed_source_key_url": f"{url}/key.asc",
            "apt_signed_source_fingerprint": "0" * 40,
        }
        done = run_tasks("apt_signed_source", "main.yml", tmp_path / "ansible", variables)
    assert done.returncode != 0
    assert f"has fingerprint {signing_key.fingerprint}, not the pinned {'0' * 40}" in done.stdout
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
