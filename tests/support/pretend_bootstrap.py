"""The host bootstrap tests' pretend node: a throw-away Ansible tree run for real on this machine.

The throw-away playbooks use `ansible_connection: local` and write only below a temporary
directory, so ansible-runner, the runner wrapper and the dynamic provider run for real without
touching the machine; the lab's own roles are run by the validation suite on test machines.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

# The task both pretend bootstraps start with: the secret lands on the pretend node.
WRITE_TOKEN = """\
    - name: Write the join token where only root may read it
      ansible.builtin.copy:
        content: "{{ lab_k3s_agent_token }}"
        dest: "{{ target }}/{{ inventory_hostname }}.token"
        mode: "0600"
      no_log: true
"""

SITE = (
    """\
- name: Bootstrap the pretend node
  hosts: all
  gather_facts: false
  tasks:
"""
    + WRITE_TOKEN
    + """\
    - name: Say why nothing is installed
      ansible.builtin.debug:
        msg: "skipping install: a pretend node"
    - name: Write the node's marker
      ansible.builtin.copy:
        content: "{{ lab_stack }} {{ node_address }}\\n"
        dest: "{{ target }}/{{ inventory_hostname }}"
        mode: "0644"
    - name: Read the kubeconfig the pretend server wrote
      ansible.builtin.slurp:
        src: "{{ target }}/k3s.yaml"
      register: raw_kubeconfig
      no_log: true
    - name: Return the kubeconfig
      ansible.builtin.set_stats:
        data:
          lab_kubeconfig: "{{ raw_kubeconfig.content | b64decode }}"
        per_host: false
        aggregate: false
      no_log: true
    - name: Return node facts
      ansible.builtin.set_stats:
        data:
          lab_nodes: "{{ {inventory_hostname: {'address': node_address}} }}"
"""
)

RESET = """\
- name: Undo the pretend bootstrap
  hosts: all
  gather_facts: false
  tasks:
    - name: Remove what site.yml wrote
      ansible.builtin.file:
        path: "{{ target }}/{{ item }}"
        state: absent
      loop: ["{{ inventory_hostname }}.token", "{{ inventory_hostname }}"]
"""

FAILING = """\
- name: Fail on purpose
  hosts: all
  gather_facts: false
  tasks:
    - name: A task that works
      ansible.builtin.command: "true"
      changed_when: false
    - name: Read a file that is not there
      ansible.builtin.slurp:
        src: "{{ target }}/missing-file"
"""

SLOW = (
    """\
- name: Hold the token while the run waits
  hosts: all
  gather_facts: false
  tasks:
"""
    + WRITE_TOKEN
    + """\
    - name: Say the run is under way
      ansible.builtin.copy:
        content: "started\\n"
        dest: "{{ target }}/started"
        mode: "0644"
    - name: Wait for a file that never comes
      ansible.builtin.wait_for:
        path: "{{ target }}/never"
        timeout: 60
"""
)

# Shaped like k3s's k3s.yaml; its key and CA carry markers a test searches the artifacts for.
KUBECONFIG = textwrap.dedent("""\
    apiVersion: v1
    kind: Config
    clusters:
    - cluster:
        certificate-authority-data: Q0EtU0VDUkVULU1BUktFUg==
        server: https://127.0.0.1:6443
      name: default
    contexts:
    - context:
        cluster: default
        user: default
      name: default
    current-context: default
    users:
    - name: default
      user:
        client-key-data: S2V5LVNFQ1JFVC1NQVJLRVI=
    """)


def local_inventory(target: Path, hosts: list[str], **group_vars: Any) -> dict[str, Any]:
    """Inventory whose hosts are this machine reached without SSH, writing below `target`."""
    return {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "target": str(target),
                **group_vars,
            },
            "hosts": {name: {"node_address": f"10.9.0.{i + 1}"} for i, name in enumerate(hosts)},
        }
    }


def make_ansible_dir(root: Path, **playbooks: str) -> Path:
    """An Ansible tree shaped like ansible/ (ansible.cfg, playbooks/NAME.yml)."""
    (root / "playbooks").mkdir(parents=True)
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    for name, text in playbooks.items():
        (root / "playbooks" / f"{name}.yml").write_text(text)
    return root
