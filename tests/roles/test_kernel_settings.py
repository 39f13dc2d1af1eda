"""prereq's reset, run for real by Ansible on this machine with stand-ins for sysctl and modprobe
that record how they are called: the kernel settings get back the values recorded before the lab
changed them, and only the modules the lab loaded are unloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.bootstrap.inventory import cluster_network_vars, image_requirement_vars
from lab.config import Distribution
from tests.support.local_play import run_tasks

RECORDING = 'echo "$(basename "$0") $*" >> "$LAB_TEST_CALLS"'


@pytest.mark.skipif(os.geteuid() != 0, reason="the role's files are root's; CI runs as root")
def test_reset_restores_settings_and_unloads_what_the_lab_loaded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    before = state / "sysctl-before.conf"
    before.write_text("net.ipv4.ip_forward = 0\n")
    (state / "modules-loaded").write_text("br_netfilter\n")  # overlay was loaded before the lab came
    variables = {
        "lab_state_dir": str(state),
        "lab_distribution": "k3s",
        **cluster_network_vars(Distribution.K3S),
        "lab_registry_port": 30500,
        "lab_trainer_port": 29500,
        "lab_trainer_host_network": False,
        **image_requirement_vars(),
        "prereq_sysctl_file": str(tmp_path / "90-k8scifar.conf"),
        "prereq_modules_file": str(tmp_path / "k8scifar-modules.conf"),
    }
    calls = tmp_path / "calls"
    fakes = {"sysctl": RECORDING, "modprobe": RECORDING}
    done = run_tasks(
        "prereq", "reset.yml", tmp_path / "reset", variables, fakes, {"LAB_TEST_CALLS": str(calls)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.read_text().splitlines() == [f"sysctl -e -p {before}", "modprobe -r br_netfilter"]
