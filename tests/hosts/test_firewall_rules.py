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
from tests.hosts.local_play import run_tasks

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


def _firewall(tmp_path: Path, state: str, run: str) -> list[str]:
    variables = {
        "prereq_firewall_state": state,
        "lab_state_dir": str(tmp_path / "state"),
        "lab_distribution": "k3s",
        **cluster_network_vars(Distribution.K3S),
        "lab_registry_port": 30500,
        "lab_trainer_port": 29500,
        "lab_trainer_host_network": True,
    }
    environment = {"LAB_TEST_UFW_RULES": str(tmp_path / "rules")}
    done = run_tasks("prereq", "firewall.yml", tmp_path / run, variables, {"ufw": UFW}, environment)
    assert done.returncode == 0, done.stdout + done.stderr
    return (tmp_path / "rules").read_text().splitlines()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the role records the rules in a root-owned file; CI runs as root"
)
@pytest.mark.slow
def test_reset_closes_only_the_ports_the_lab_opened(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "rules").write_text(OWNERS_RULE + "\n")
    opened = _firewall(tmp_path, "present", "site")
    assert opened.count(OWNERS_RULE) == 1 and len(opened) > 2, opened
    assert _firewall(tmp_path, "present", "site-again") == opened
    assert _firewall(tmp_path, "absent", "reset") == [OWNERS_RULE]
