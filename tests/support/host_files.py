"""The hosts' files as the roles write them, for every shipped stack: one real ansible-playbook run
per stack on a local connection, with the inventory the bootstrap generates and the roles' own
tasks. The prereq role's firewall tasks run against a recording `ufw` stand-in, the nfs_server
role's exports template is rendered, and the nvidia role's toolkit settings are applied to a
config.toml shaped like the package's.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.bootstrap.inventory import build_inventory
from lab.config import LabConfig, load_stack
from lab.paths import ANSIBLE_DIR
from tests.support.local_play import LOCAL, run_play
from tests.support.shipped import shipped_stacks

ROLES = ANSIBLE_DIR / "roles"
# ufw as the role sees it: active, a version that takes comments; every other call is recorded.
# It logs each rule command and keeps the rules, so that `status` changes as ufw's does and the
# module reports a change (which the role records, and reset reads back).
FAKE_UFW = """\
rules="$FAKE_LOG.rules"
touch "$rules"
rule=$(echo "$*" | sed -e 's/^delete //' -e "s/ comment .*//")
case "$1" in
  --version) echo "ufw 0.36.2" ;;
  status) echo "Status: active"; cat "$rules" ;;
  delete) echo "$*" >> "$FAKE_LOG"; grep -vxF -- "$rule" "$rules" > "$rules.new" || true
    mv "$rules.new" "$rules" ;;
  *) echo "$*" >> "$FAKE_LOG"; grep -qxF -- "$rule" "$rules" || echo "$rule" >> "$rules" ;;
esac
"""
# The shape of the toolkit package's config.toml: commented defaults at the top, then tables.
TOOLKIT_CONFIG = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
log-level = "info"
"""

PLAY = """\
- name: Render what the roles open and write on each node
  hosts: all
  gather_facts: false
  vars_files: {defaults}
  environment:
    FAKE_LOG: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/ufw"
  tasks:
    - name: Make each node's output directory
      ansible.builtin.file:
        path: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}"
        state: directory
        mode: "0700"

    - name: Open the firewall the way the prereq role does
      ansible.builtin.include_role:
        name: prereq
        tasks_from: firewall.yml
      vars:
        prereq_firewall_state: "{state}"

    - name: Render the kernel settings
      ansible.builtin.template:
        src: {roles}/prereq/templates/sysctl.conf.j2
        dest: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/sysctl.conf"
        mode: "0600"

    - name: Render the API server's Pod Security configuration
      ansible.builtin.template:
        src: {roles}/k3s/templates/pod-security.yaml.j2
        dest: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/pod-security.yaml"
        mode: "0600"
      when: node_role == 'server' and lab_distribution == 'k3s'

    - name: Render the exports file
      ansible.builtin.include_role:
        name: nfs_server
        tasks_from: render_exports.yml
      vars:
        nfs_server_exports_file: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/exports"
      when: inventory_hostname in groups['nfs_server']

    - name: Apply the toolkit settings to a copy of the package's configuration
      when: inventory_hostname in groups['gpu']
      block:
        - name: Copy the package's configuration
          ansible.builtin.copy:
            content: {toolkit}
            dest: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/config.toml"
            mode: "0644"
        - name: Apply the nvidia role's settings
          ansible.builtin.include_role:
            name: nvidia
            tasks_from: toolkit_config.yml
          vars:
            nvidia_toolkit_config: "{{{{ lab_test_out }}}}/{{{{ inventory_hostname }}}}/config.toml"
"""


@dataclass
class HostFiles:
    lab: LabConfig
    out: Path

    def ufw(self, node: str) -> list[str]:
        log = self.out / node / "ufw"
        return log.read_text().splitlines() if log.exists() else []

    def file(self, node: str, name: str) -> str:
        return (self.out / node / name).read_text()


def render_host_files(
    stack: str, work: Path, state: str = "present", record: Path | None = None
) -> HostFiles:
    """The roles' host files for `stack`; `record`: the lab's record of an earlier run on the same
    nodes (reset closes only the rules that record names), else a new one in `work`."""
    lab = load_stack(stack)
    work.mkdir(parents=True)
    inventory = build_inventory(lab, work / "known_hosts")
    inventory["all"]["vars"].update(LOCAL)
    defaults = [str(ROLES / role / "defaults" / "main.yml") for role in ("prereq", "k3s")]
    play = PLAY.format(
        state=state, toolkit=json.dumps(TOOLKIT_CONFIG), defaults=json.dumps(defaults), roles=ROLES
    )
    # The lab's record of what it added lives under lab_state_dir, root's /var/lib/k8scifar on a node.
    if record is None:
        record = work / "state"
        for node in lab.nodes:  # one record per node, as each node keeps its own
            (record / node.name).mkdir(parents=True)
    variables = {
        "lab_stack": stack,
        "lab_test_out": str(work / "out"),
        "lab_state_dir": f"{record}/{{{{ inventory_hostname }}}}",
        "ansible_become": False,
    }
    # exportfs: the handler that re-exports after the exports file changes.
    done = run_play(work, play, inventory, variables, fakes={"ufw": FAKE_UFW, "exportfs": "exit 0"})
    if done.returncode != 0:
        raise RuntimeError(f"rendering {stack} failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return HostFiles(lab, work / "out")


@pytest.fixture(scope="session")
def host_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostFiles]:
    """Every shipped stack's host files, rendered once for the session: the hardening and the GPU
    seam tests read the same files, and a play per stack costs seconds."""
    stacks = shipped_stacks()
    base = tmp_path_factory.mktemp("host-files")
    with ThreadPoolExecutor(max_workers=len(stacks)) as pool:
        return dict(zip(stacks, pool.map(lambda s: render_host_files(s, base / s), stacks), strict=True))
