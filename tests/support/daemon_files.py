"""Renders what the k3s, kubeadm, registry_mirror and nfs_server roles hand to node daemons, for one stack.

A real ansible-playbook run on a local connection, with the inventory the bootstrap generates
from the stack file and the roles' own defaults, templates and tasks: each node's files land
below an output directory instead of /etc. The server's k3s CA hash is computed by the k3s role's
own task (tasks/ca_hash.yml) from a self-signed CA made with openssl, so agents' join tokens
carry the hash the role really computes.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.bootstrap.inventory import build_inventory
from lab.bootstrap.tokens import new_tokens, playbook_secrets
from lab.config import LabConfig, load_stack
from lab.paths import ANSIBLE_DIR
from tests.support.local_play import LOCAL, run_play
from tests.support.shipped import shipped_stacks

ROLES = ANSIBLE_DIR / "roles"
# The kubeadm CA hash stands in for the openssl pipeline's result (that needs the cluster's CA).
KUBEADM_CA_HASH = "ab" * 32

# Per distribution: (role, template, the name the rendered file gets).
TEMPLATES = {
    "k3s": [
        ("k3s", "config.yaml.j2", "config.yaml"),
        ("k3s", "k3s.service.j2", "k3s.service"),
        ("registry_mirror", "registries.yaml.j2", "registries.yaml"),
        ("nfs_server", "k8scifar.exports.j2", "k8scifar.exports"),
    ],
    "kubeadm": [
        ("kubeadm", "kubeadm.yaml.j2", "kubeadm.yaml"),
        ("registry_mirror", "hosts.toml.j2", "hosts.toml"),
        ("nfs_server", "k8scifar.exports.j2", "k8scifar.exports"),
    ],
}
# Role variables that are command lines, dumped as JSON for the tests.
COMMANDS = ["kubeadm_flannel_iface_argv", "kubeadm_token_list_argv"]

PLAY = """\
- name: Render the files the roles write for the node daemons
  hosts: all
  gather_facts: false
  vars_files: {defaults}
  tasks:
    - name: Hash the server CA the way the k3s role does
      ansible.builtin.include_role:
        name: k3s
        tasks_from: ca_hash.yml
      vars:
        k3s_server_ca: "{{{{ lab_test_ca }}}}"
      when: node_role == 'server' and lab_distribution == 'k3s'

    - name: Read each machine's settings as the kubeadm role does, none here and so the defaults
      ansible.builtin.include_role:
        name: machine_settings
      when: lab_distribution == 'kubeadm'

    - name: Make each node's output directory
      ansible.builtin.file:
        path: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}"
        state: directory
        mode: "0700"

    - name: Render the templates
      ansible.builtin.template:
        src: "{{{{ item.src }}}}"
        dest: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/{{{{ item.name }}}}"
        mode: "0600"
      loop: {templates}

    - name: Write the command lines the roles run
      ansible.builtin.copy:
        content: "{{{{ {commands} | to_json }}}}"
        dest: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/commands.json"
        mode: "0600"
"""


@dataclass
class Rendered:
    """One stack's rendered files, node by node, with the secrets and CA they were made with."""

    stack: str
    lab: LabConfig
    tokens: dict[str, str]
    ca_pem: bytes
    out: Path

    def file(self, node: str, name: str) -> str:
        return (self.out / node / name).read_text()

    def commands(self, node: str) -> dict[str, list[str]]:
        return json.loads(self.file(node, "commands.json"))


def make_ca(directory: Path) -> Path:
    """A self-signed CA certificate in PEM, like the one k3s writes to server/tls/server-ca.crt."""
    key, cert = directory / "ca.key", directory / "server-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=k3s-server-ca"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert


def render(stack: str, work: Path) -> Rendered:
    """Run the render play for `stack`; raises with Ansible's output when the play fails."""
    lab = load_stack(stack)
    work.mkdir(parents=True)
    ca = make_ca(work)
    inventory = build_inventory(lab, work / "known_hosts")
    inventory["all"]["vars"].update(LOCAL)
    inventory["all"]["hosts"][lab.server.name]["kubeadm_ca_hash"] = KUBEADM_CA_HASH
    templates = [
        {"src": str(ROLES / role / "templates" / src), "name": name}
        for role, src, name in TEMPLATES[lab.distribution.value]
    ]
    defaults = [
        str(ROLES / role / "defaults" / "main.yml")
        for role in ("k3s", "kubeadm", "registry_mirror", "nfs_server")
    ]
    commands = "{" + ", ".join(f"'{name}': {name}" for name in COMMANDS) + "}"
    play = PLAY.format(defaults=json.dumps(defaults), templates=json.dumps(templates), commands=commands)
    tokens = new_tokens()
    variables = {
        **playbook_secrets(tokens),
        "lab_stack": stack,
        "lab_test_ca": str(ca),
        "lab_test_out": str(work / "out"),
        "ansible_become": False,
    }
    done = run_play(work, play, inventory, variables)
    if done.returncode != 0:
        raise RuntimeError(f"rendering {stack} failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return Rendered(stack, lab, tokens, ca.read_bytes(), work / "out")


@pytest.fixture(scope="session")
def daemon_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    """Every shipped stack's daemon files, rendered once for the session: the daemon files', the
    hardening and the k3s seam tests read the same files, and a play per stack costs seconds."""
    stacks = shipped_stacks()
    base = tmp_path_factory.mktemp("render")
    with ThreadPoolExecutor(max_workers=len(stacks)) as pool:
        return dict(zip(stacks, pool.map(lambda s: render(s, base / s), stacks), strict=True))
