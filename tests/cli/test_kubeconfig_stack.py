"""`labctl doctor` and `labctl status` on a stack that names a cluster's kubeconfig: no host is
logged in to, a cluster that does not answer is one line, and each cluster check is held against
the API server's answer that makes it fail (tests/controlplane/test_labctl_cluster.py runs them
against the real control plane)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.cli.common import stackcluster
from lab.cli.common.console import CliError, Level, console
from lab.cli.doctor.cluster_checks import kueue_findings, node_findings, version_finding
from lab.cli.status.cluster import job_state, workloads
from lab.config import LabConfig, parse_config, read_stack_values, stack_file
from tests.support.labctl import Labctl, assert_one_line_error, labctl, write_stack
from tests.support.network import free_port

STACK = "given"
BACKOFF = "BackoffLimitExceeded"
# A cluster whose API server is on PORT of this machine.
GIVEN = """apiVersion: v1
kind: Config
clusters:
- {{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}
users: [{{name: u, user: {{token: not-a-secret}}}}]
contexts: [{{name: given, context: {{cluster: c, user: u}}}}]
"""


def _values(kubeconfig: Path) -> dict[str, Any]:
    return read_stack_values(stack_file("example-cpu")) | {"kubeconfig": str(kubeconfig)}


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    """A kubeconfig stack whose API server does not answer: nothing listens on its port."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(GIVEN.format(port=free_port()))
    write_stack(tmp_path / "stacks", STACK, _values(kubeconfig))
    return tmp_path / "stacks"


def test_doctor_skips_the_hosts_and_names_an_api_server_that_does_not_answer(
    stacks: Path, labctl_in_process: Labctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A terminal too narrow for the table: each finding is then one paragraph, read whole below.
    monkeypatch.setattr(console, "width", 60)
    result = labctl_in_process("doctor", "--stack", STACK, "--stacks-dir", stacks, "--nodes-only")
    assert result.code == 1, (result.out, result.err)
    out = " ".join(result.out.split())
    assert "not checked over SSH: the stack names the cluster's kubeconfig" in out
    assert "does not answer (NewConnectionError)" in out
    assert "SSH" not in out.replace("over SSH", ""), "no node is logged in to"


def test_status_on_a_cluster_that_does_not_answer_is_one_line(
    stacks: Path, labctl_in_process: Labctl
) -> None:
    result = labctl_in_process("status", "--stack", STACK, "--stacks-dir", stacks)
    assert_one_line_error(result, "the API server https://127.0.0.1:", "does not answer")


# validate prints its report to the process's stdout: run as the operator runs it.
def test_validate_on_a_cluster_that_does_not_answer_is_one_line(stacks: Path) -> None:
    result = labctl("validate", "--stack", STACK, "--stacks-dir", stacks)
    assert result.code == 2, (result.out, result.err)
    (line,) = [line for line in result.out.splitlines() if line.strip()]
    assert line.startswith("the API server https://127.0.0.1:") and "does not answer" in line


def test_validate_after_reset_has_no_host_to_check(stacks: Path) -> None:
    result = labctl("validate", "--stack", STACK, "--stacks-dir", stacks, "--after-reset")
    assert result.code == 2, (result.out, result.err)
    (line,) = [line for line in result.out.splitlines() if line.strip()]
    assert "names a cluster's kubeconfig, so `pulumi destroy` resets no host" in line


def test_validate_only_the_hosts_of_a_cluster_is_nothing_to_check(stacks: Path) -> None:
    result = labctl("validate", "--stack", STACK, "--stacks-dir", stacks, "--only", "hosts")
    assert result.code == 2, (result.out, result.err)
    (line,) = [line for line in result.out.splitlines() if line.strip()]
    assert line == (
        f"--only hosts: stack {STACK} names a cluster's kubeconfig, so no host is logged in to and"
        " nothing would be checked; name cluster or workload"
    )


def test_wait_names_why_it_cannot_read_the_runs_and_the_way_it_can(
    stacks: Path, labctl_in_process: Labctl
) -> None:
    result = labctl_in_process("wait", "--stack", STACK, "--stacks-dir", stacks)
    assert_one_line_error(
        result, "a cluster's machines are its owner's and labctl logs in to none", "pass --runs-dir DIR"
    )


def test_wait_asks_the_cluster_for_the_gpus_first(tmp_path: Path, labctl_in_process: Labctl) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(GIVEN.format(port=free_port()))
    values = read_stack_values(stack_file("example-gpu")) | {"kubeconfig": str(kubeconfig)}
    write_stack(tmp_path / "stacks", STACK, values)
    result = labctl_in_process("wait", "--stack", STACK, "--stacks-dir", tmp_path / "stacks")
    assert_one_line_error(result, "the API server https://127.0.0.1:", "does not answer")


def test_dashboard_asks_the_cluster_before_kubectl_starts(
    stacks: Path, labctl_in_process: Labctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    values = read_stack_values(stacks / f"Pulumi.{STACK}.yaml") | {"observability": {"enabled": True}}
    write_stack(stacks, STACK, values)
    result = labctl_in_process("dashboard", "--stack", STACK, "--stacks-dir", stacks)
    assert_one_line_error(result, "the API server https://127.0.0.1:", "does not answer")


def test_dashboard_on_provided_monitoring_names_the_clusters_own(
    stacks: Path, labctl_in_process: Labctl
) -> None:
    values = read_stack_values(stacks / f"Pulumi.{STACK}.yaml")
    write_stack(stacks, STACK, values | {"provides": {"monitoring": {"namespace": "observe"}}})
    result = labctl_in_process("dashboard", "--stack", STACK, "--stacks-dir", stacks, "--print")
    assert_one_line_error(result, "installs no Grafana", "namespace observe", "open its dashboards")


def test_init_from_a_kubeconfig_asks_the_cluster_and_no_machine(
    tmp_path: Path, labctl_in_process: Labctl
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(GIVEN.format(port=free_port()))
    init = ("init", "--stack", STACK, "--stacks-dir", tmp_path, "--kubeconfig", kubeconfig)
    assert_one_line_error(labctl_in_process(*init), "the API server https://127.0.0.1:", "does not answer")
    assert_one_line_error(
        labctl_in_process(*init, "--server", "ubuntu@192.168.50.11"), "leave out --server and --agent"
    )
    assert_one_line_error(
        labctl_in_process(*init, "--kubeconfig-context", "elsewhere"), "--kubeconfig: ", "elsewhere"
    )
    assert not (tmp_path / f"Pulumi.{STACK}.yaml").exists()


def test_a_kubeconfig_changed_since_the_stack_was_read_is_refused_as_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(GIVEN.format(port=free_port()))
    lab = _lab(kubeconfig=str(kubeconfig))
    kubeconfig.write_text("kind: Config\n")
    refused = r"^k8scifar:kubeconfig: .* names no context; name a kubeconfig with one$"
    with pytest.raises(CliError, match=refused):
        stackcluster.client(lab)


def _lab(**changes: Any) -> LabConfig:
    return parse_config(read_stack_values(stack_file("example-cpu")) | changes)


def _nodes(**gpus: int) -> dict[str, Any]:
    return {
        "items": [
            {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(count)}}}
            for name, count in gpus.items()
        ]
    }


def test_nodes_of_the_stack_that_the_cluster_lacks_are_errors() -> None:
    lab = _lab()
    found = node_findings(lab, _nodes(**{"cpu-a": 0, "other": 0}))
    assert [(f.where, f.level) for f in found] == [("cpu-a", Level.OK), ("cpu-b", Level.ERROR)]
    assert "not a node of the cluster (it has cpu-a, other)" in found[1].detail


def test_gpus_other_than_the_stacks_are_errors() -> None:
    lab = _lab()
    (_, gpus) = node_findings(lab, _nodes(**{"cpu-a": 0, "cpu-b": 2}))
    assert gpus.level is Level.ERROR
    assert "node cpu-b reports 2 allocatable nvidia.com/gpu, the stack gives it 0" in gpus.detail


def test_a_cluster_release_other_than_the_stacks_is_a_warning() -> None:
    lab = _lab(kubernetesVersion="1.33.5")
    same = version_finding(lab, "https://x", {"gitVersion": "v1.33.9", "minor": "33"})
    other = version_finding(lab, "https://x", {"gitVersion": "v1.34.4", "minor": "34+"})
    assert same.level is Level.OK
    assert other.level is Level.WARNING and '"1.34.4"' in other.fix


def test_kueue_as_the_stack_says() -> None:
    installed = _lab(scheduling={"gang": "kueue"}, provides={"kueue": True})
    own = _lab(scheduling={"gang": "kueue"})
    assert [f.level for f in kueue_findings(installed, True, True)] == [Level.OK]
    (missing,) = kueue_findings(installed, False, False)
    assert missing.level is Level.ERROR and "serves no kueue.x-k8s.io/v1beta2" in missing.detail
    (older,) = kueue_findings(installed, True, False)
    assert older.level is Level.ERROR and "an older Kueue" in older.detail
    (taken,) = kueue_findings(own, True, True)
    assert taken.level is Level.ERROR and "provides.kueue: true" in taken.fix
    assert [f.level for f in kueue_findings(own, False, False)] == [Level.OK]
    assert kueue_findings(_lab(scheduling={"gang": "none"}), True, True) == []


def test_workloads_say_how_far_each_is() -> None:
    sets = {"items": [{"metadata": {"name": "ddp"}, "spec": {"replicas": 2}, "status": {"readyReplicas": 1}}]}
    failed = {"type": "Failed", "status": "True", "reason": BACKOFF}
    by_name: dict[str, dict[str, Any]] = {
        "done": {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        "broke": {"status": {"conditions": [failed]}},
        "held": {"spec": {"suspend": True}},
        "busy": {"status": {"active": 1}},
    }
    jobs = {"items": [{"metadata": {"name": name}, **job} for name, job in by_name.items()]}
    assert [(w.kind, w.name, w.state) for w in workloads(sets, jobs)] == [
        ("StatefulSet", "ddp", "1/2 ready"),
        ("Job", "done", "complete"),
        ("Job", "broke", f"failed ({BACKOFF})"),
        ("Job", "held", "suspended (waiting for admission)"),
        ("Job", "busy", "1 active, 0 succeeded"),
    ]
    assert job_state({}) == "0 active, 0 succeeded"
