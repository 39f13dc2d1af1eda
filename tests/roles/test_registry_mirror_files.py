"""The registry mirror's files on a node, written by site.yml and taken back by reset.yml, run for
real by Ansible on this machine with the roles' directories moved under a temporary folder.

containerd reads /etc/containerd/certs.d/<registry>/hosts.toml; an owner may have that folder, or
that very file, before the lab came (a mirror of their own for the same address). Reset removes
exactly what the lab wrote and gives back what was the owner's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.local_play import LOCAL, run_play

ENDPOINT = "10.77.0.11:30500"
PLAY = """\
- name: Site, then reset, of the registry mirror
  hosts: all
  gather_facts: false
  tasks:
    - name: Point the container runtime at the in-cluster registry
      ansible.builtin.include_role:
        name: registry_mirror
      when: lab_test_step == 'site'

    - name: Remove the registry mirror files
      ansible.builtin.include_role:
        name: registry_mirror
        tasks_from: reset
      when: lab_test_step == 'reset'

    - name: Remove the paths the lab created and its record
      ansible.builtin.include_role:
        name: lab_state
        tasks_from: reset
      when: lab_test_step == 'reset'
"""


def _run(tmp_path: Path, step: str) -> None:
    variables = {
        "lab_stack": "test",
        "lab_test_step": step,
        "lab_distribution": "kubeadm",
        "lab_registry_endpoint": ENDPOINT,
        "lab_state_dir": str(tmp_path / "state"),
        "registry_mirror_certs_dir": str(tmp_path / "etc" / "containerd" / "certs.d"),
        "ansible_become": False,
    }
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    done = run_play(tmp_path / step, PLAY, inventory, variables)
    assert done.returncode == 0, done.stdout[-3000:]


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under root: its mode, and a file's content."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            found[str(path.relative_to(root))] = (
                path.stat().st_mode,
                path.read_text() if path.is_file() else "",
            )
    return found


OWNERS_HOSTS = f'server = "https://{ENDPOINT}"\n[host."https://{ENDPOINT}"]\n  ca = "/etc/ssl/owner.pem"\n'


@pytest.mark.parametrize(
    "owners",
    [
        {},
        {"certs.d": None},
        {f"certs.d/{ENDPOINT}": None, f"certs.d/{ENDPOINT}/ca.crt": "the owner's CA\n"},
        {f"certs.d/{ENDPOINT}": None, f"certs.d/{ENDPOINT}/hosts.toml": OWNERS_HOSTS},
    ],
    ids=["nothing", "certs.d", "endpoint-folder", "endpoint-hosts.toml"],
)
def test_reset_leaves_containerds_registry_folder_as_the_owner_had_it(
    tmp_path: Path, owners: dict[str, str | None]
) -> None:
    etc = tmp_path / "etc"
    containerd = etc / "containerd"
    etc.mkdir()
    (tmp_path / "state").mkdir()
    for name, content in owners.items():
        path = containerd / name
        if content is None:
            path.mkdir(parents=True, mode=0o750)
        else:
            path.write_text(content)
            path.chmod(0o640)
    before = _tree(etc)

    _run(tmp_path, "site")
    hosts = containerd / "certs.d" / ENDPOINT / "hosts.toml"
    assert f'server = "http://{ENDPOINT}"' in hosts.read_text()
    _run(tmp_path, "reset")
    assert _tree(etc) == before
