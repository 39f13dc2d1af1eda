"""prereq's firewall tasks, run for real by Ansible (community.general.ufw) on this machine against
a stand-in ufw that keeps its rules in a file and, as ufw does, takes a rule that differs only in
its comment for the one it already has: reset closes the ports the lab opened and keeps the rule
the machine's owner had before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.bootstrap.inventory import cluster_network_vars
from lab.config import Distribution
from tests.support.local_play import run_tasks

# ufw's answers the module reads (`--version`, `status verbose`); a rule is kept as the words of
# the command that added it, without the comment.
UFW = r"""
rules="$LAB_TEST_UFW_RULES"
rule=$(echo "$*" | sed -e 's/^delete //' -e "s/ comment .*//")
case "$*" in
  --version) echo "ufw 0.36.2" ;;
  status*) echo "Status: active"; cat "$rules" ;;
  delete\ *) grep -vxF -- "$rule" "$rules" > "$rules.new" || true; mv "$rules.new" "$rules" ;;
  *) grep -qxF -- "$rule" "$rules" || echo "$rule" >> "$rules" ;;
esac
"""
# The Kubernetes API port, open on the owner's machine before the lab came (in the words the
# module's command has for it).
OWNERS_RULE = "allow from any to any port 6443 proto tcp"


def _firewall(tmp_path: Path, state: str, run: str, peers: list[str] | None = None) -> list[str]:
    """The rules after firewall.yml ran as `run`; `peers`: the other nodes' addresses (none: a
    lab of one node)."""
    variables = {
        "prereq_firewall_state": state,
        "lab_state_dir": str(tmp_path / "state"),
        "lab_distribution": "k3s",
        **cluster_network_vars(Distribution.K3S),
        "lab_registry_port": 30500,
        "lab_trainer_port": 29500,
        "lab_trainer_host_network": True,
        **({} if peers is None else {"prereq_firewall_peers": peers}),
    }
    environment = {"LAB_TEST_UFW_RULES": str(tmp_path / "rules")}
    done = run_tasks("prereq", "firewall.yml", tmp_path / run, variables, {"ufw": UFW}, environment)
    assert done.returncode == 0, done.stdout + done.stderr
    return (tmp_path / "rules").read_text().splitlines()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the role records the rules in a root-owned file; CI runs as root"
)
def test_reset_closes_only_the_ports_the_lab_opened(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "rules").write_text(OWNERS_RULE + "\n")
    opened = _firewall(tmp_path, "present", "site")
    assert opened.count(OWNERS_RULE) == 1 and len(opened) > 2, opened
    assert _firewall(tmp_path, "present", "site-again") == opened
    assert _firewall(tmp_path, "absent", "reset") == [OWNERS_RULE]


PEERS = ["10.9.0.2", "10.9.0.3", "10.9.0.4"]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the role records the rules in a root-owned file; CI runs as root"
)
def test_openings_follow_the_nodes_that_join_and_leave(tmp_path: Path) -> None:
    """A node that leaves has its openings closed on the nodes that stay; one that joins gets
    its own; and reset closes every opening the lab made, whichever nodes the lab had then."""
    (tmp_path / "state").mkdir()
    (tmp_path / "rules").write_text(OWNERS_RULE + "\n")
    second, third, fourth = PEERS

    def admitting(rules: list[str], peer: str) -> list[str]:
        return [rule for rule in rules if f"from {peer} " in rule]

    three = _firewall(tmp_path, "present", "three-nodes", peers=[second, third])
    assert admitting(three, second) and admitting(three, third), three
    two = _firewall(tmp_path, "present", "third-left", peers=[second])
    assert admitting(two, third) == [] and admitting(two, second) == admitting(three, second), two
    grown = _firewall(tmp_path, "present", "fourth-joined", peers=[second, fourth])
    assert len(admitting(grown, fourth)) == len(admitting(grown, second)) > 0, grown
    assert _firewall(tmp_path, "present", "again", peers=[second, fourth]) == grown
    # Reset reads the record: the peers of the inventory it runs with do not matter.
    assert _firewall(tmp_path, "absent", "reset", peers=[third]) == [OWNERS_RULE]
