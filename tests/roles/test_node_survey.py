"""The lab_state role's survey of a node, run by Ansible for real on this machine: what the
node's script reports (files/existing_cluster.sh) becomes the facts site.yml's guard and
reset.yml act on. reset.yml uninstalls a distribution only when the survey names it the lab's.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.local_play import kept_facts, run_tasks


def _survey(tmp_path: Path, distribution: str) -> dict[str, list]:
    done = run_tasks(
        "lab_state",
        "survey.yml",
        tmp_path / "run",
        {"lab_state_dir": str(tmp_path / "state"), "lab_distribution": distribution},
        keep=["lab_state_ours", "lab_state_foreign"],
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return kept_facts(tmp_path / "run")


def test_a_distribution_the_lab_marked_is_the_labs(tmp_path: Path) -> None:
    (tmp_path / "state" / "installed").mkdir(parents=True)
    (tmp_path / "state" / "installed" / "k3s").write_text("installed by the K8sCIFAR lab (stack test)\n")
    assert _survey(tmp_path, "k3s") == {"lab_state_ours": ["k3s"], "lab_state_foreign": []}


def test_a_node_without_a_cluster_has_nothing_to_report(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    assert _survey(tmp_path, "k3s") == {"lab_state_ours": [], "lab_state_foreign": []}
