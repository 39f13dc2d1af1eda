"""The cluster_leftovers role's iptables clean-up, run for real by Ansible on this machine with
stand-ins for iptables-save and iptables-restore: the rules kube-proxy and flannel leave go, the
rules another tool had in chains of the same shape before the lab came (a podman network's CNI
firewall chains) stay.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hosts.local_play import LOCAL, run_play, run_tasks

# A machine whose owner runs podman with the CNI firewall plugin (CNI-FORWARD, CNI-ADMIN).
OWNERS = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [10:600]
:OUTPUT ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
COMMIT
"""
# The same machine with the lab's cluster running: kube-proxy's and flannel's chains, new counters.
CLUSTER_CHAINS = ":FLANNEL-FWD - [0:0]\n:KUBE-FORWARD - [0:0]\n"
CLUSTER_RULES = """\
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A FLANNEL-FWD -s 10.42.0.0/16 -j ACCEPT
"""
WITH_THE_CLUSTER = (
    OWNERS.replace(":CNI-ADMIN - [0:0]", ":CNI-ADMIN - [3:180]")
    .replace(":CNI-FORWARD - [0:0]\n", ":CNI-FORWARD - [3:180]\n" + CLUSTER_CHAINS)
    .replace("COMMIT\n", CLUSTER_RULES + "COMMIT\n")
)
FAKES = {"iptables-save": 'cat "$LAB_TEST_RULES"', "iptables-restore": 'cat > "$LAB_TEST_RESTORED"'}

RESET_PLAY = """\
- name: Remove what the cluster left
  hosts: all
  tasks:
    - name: Include the role
      ansible.builtin.include_role:
        name: cluster_leftovers
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="gathering this machine's mounts needs root; CI runs as root")
def test_reset_keeps_the_rules_another_tool_had(tmp_path: Path) -> None:
    rules, restored = tmp_path / "rules", tmp_path / "restored"
    environment = {"LAB_TEST_RULES": str(rules), "LAB_TEST_RESTORED": str(restored)}
    variables = {
        "lab_state_dir": str(tmp_path / "state"),
        "cluster_leftovers_cni_entries": [],
        "cluster_leftovers_cni_cache": str(tmp_path / "cni-results"),
    }
    (tmp_path / "state").mkdir()
    rules.write_text(OWNERS)
    done = run_tasks("cluster_leftovers", "snapshot.yml", tmp_path / "install", variables, FAKES, environment)
    assert done.returncode == 0, done.stdout + done.stderr

    rules.write_text(WITH_THE_CLUSTER)
    inventory = {"all": {"hosts": {"node": LOCAL}}}
    done = run_play(
        tmp_path / "reset", RESET_PLAY, inventory, {"lab_stack": "test", **variables}, FAKES, environment
    )
    assert done.returncode == 0, done.stdout + done.stderr
    left = restored.read_text().splitlines()
    assert [line for line in left if "KUBE-" in line or "FLANNEL" in line] == []
    owners = [line for line in OWNERS.splitlines() if "CNI-" in line and not line.startswith(":")]
    assert set(owners) <= set(left), "the owner's podman rules were removed"
    assert ":CNI-ADMIN - [3:180]" in left and ":CNI-FORWARD - [3:180]" in left
    assert left[0] == "*filter" and left[-1] == "COMMIT"
