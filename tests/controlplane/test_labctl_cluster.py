"""`labctl doctor` on a stack that names the real control plane's kubeconfig, run as the operator
runs it: the cluster checked through its API, no node logged in to; a stack that disagrees with
the cluster gets an error or warning line for each disagreement, with its fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab import controlplane
from lab.controlplane import kubeconfig, netns
from tests.support.labctl import Result, labctl, write_stack
from tests.support.live_stack import derived_values

KUEUE = {"gang": "kueue"}
PROVIDED = {"kueue": True}


def _doctor(plane: controlplane.ControlPlane, stacks: Path, values: dict[str, Any]) -> Result:
    write_stack(stacks, "given", values)
    # --nodes-only: the operator's machine (Pulumi CLI, packages) is doctor's other tests' part.
    args = ("doctor", "--stack", "given", "--stacks-dir", stacks, "--nodes-only")
    # A terminal too narrow for the table: each finding is then one paragraph, read whole below.
    done = labctl(*args, prefix=netns.inside(plane.layout), columns=60)
    return Result(done.code, " ".join(done.out.split()), done.err)


@pytest.fixture(scope="module")
def release(plane: controlplane.ControlPlane) -> str:
    """The control plane's Kubernetes release, as its API server says."""
    said = json.loads(controlplane.kubectl(plane.layout, "version", "-o", "json").stdout)
    return str(said["serverVersion"]["gitVersion"]).removeprefix("v")


@pytest.fixture
def values(plane: controlplane.ControlPlane, base_stack: str, release: str) -> dict[str, Any]:
    """A stack's values that agree with the cluster: its nodes, its release, its Kueue provided."""
    return derived_values(plane, base_stack, KUEUE, PROVIDED) | {"kubernetesVersion": release}


def test_a_stack_that_matches_the_cluster_is_all_ok(
    plane: controlplane.ControlPlane, values: dict[str, Any], release: str, tmp_path: Path
) -> None:
    result = _doctor(plane, tmp_path, values)
    assert result.code == 0, (result.out, result.err)
    assert "not checked over SSH: the stack names the cluster's kubeconfig" in result.out
    assert f"answers: Kubernetes v{release}" in result.out
    assert "serves kueue.x-k8s.io/v1beta2, as provides.kueue says" in result.out
    assert "0 warnings, 0 errors" in result.out


def test_each_disagreement_with_the_cluster_is_a_line_with_its_fix(
    plane: controlplane.ControlPlane, base_stack: str, release: str, tmp_path: Path
) -> None:
    values = derived_values(plane, base_stack, {"gang": "kueue"})  # Kueue runs there already
    first, second = values["nodes"]
    values["nodes"] = [first | {"gpus": 1}, second | {"name": "elsewhere", "gpus": 1}]
    values["kubernetesVersion"] = "1.33.5"
    assert not release.startswith("1.33."), "the release below must differ from the cluster's"
    result = _doctor(plane, tmp_path, values)
    assert result.code == 1, (result.out, result.err)
    out = " ".join(result.out.split())
    assert (
        "the stack says 1.33.5" in out and f'kubernetesVersion to the cluster\'s release ("{release}")' in out
    )
    assert (
        f"node {first['name']} reports 0 allocatable nvidia.com/gpu" in out or "reports no allocatable" in out
    )
    assert f"not a node of the cluster (it has {first['name']}, {second['name']})" in out
    assert "the cluster already runs Kueue" in out and "provides.kueue: true" in out
    assert "1 warning, 3 errors" in out


def _token(plane: controlplane.ControlPlane, which: str) -> str:
    """A token the API server refuses, or one of a ServiceAccount that may read nothing (the
    default one of namespace default, which no binding names)."""
    if which == "refused":
        return "not-a-token-of-this-cluster"
    return controlplane.kubectl(plane.layout, "create", "token", "default", "-n", "default").stdout.strip()


@pytest.mark.parametrize(
    ("which", "said"),
    [
        ("refused", "answered 401 Unauthorized to GET /version; renew the kubeconfig's credentials"),
        ("unprivileged", "answered 403 Forbidden to GET /api/v1/nodes; give the kubeconfig's user read"),
    ],
    ids=["refused", "unprivileged"],
)
def test_credentials_the_cluster_refuses_are_one_finding_with_its_fix(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path, which: str, said: str
) -> None:
    given = tmp_path / "kubeconfig"
    given.write_text(kubeconfig.for_token(plane.layout, which, _token(plane, which)))
    values["kubeconfig"] = str(given)
    result = _doctor(plane, tmp_path / "stacks", values)
    assert result.code == 1, (result.out, result.err)
    assert said in result.out
    assert "1 error" in result.out


def _stack(plane: controlplane.ControlPlane, stacks: Path, values: dict[str, Any]) -> tuple[str, ...]:
    write_stack(stacks, "given", values)
    return ("--stack", "given", "--stacks-dir", str(stacks))


def test_validate_checks_the_lab_in_the_cluster_through_its_api(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    """No lab is declared in the cluster here: its nodes pass, its objects are missing, each a line."""
    done = labctl("validate", *_stack(plane, tmp_path, values), prefix=netns.inside(plane.layout))
    assert done.code == 1, (done.out, done.err)
    assert "PASS  configured nodes are ready: cluster" in done.out
    # A control plane with kwok's nodes runs no CoreDNS: no Service name would resolve in a pod.
    no_dns = "no cluster DNS: no pod labelled k8s-app=kube-dns"
    assert f"FAIL  system pods run: cluster\n      {no_dns}" in done.out
    assert "FAIL  claims are bound: cluster" in done.out
    assert "the lab's namespace has no PersistentVolumeClaims" in done.out
    assert "FAIL  training ranks run: cluster" in done.out
    assert "the stack names the cluster's kubeconfig, so its machines are its owner's" in done.out
    assert "SSH" not in done.out + done.err


def test_validate_only_the_cluster_asks_nothing_of_the_workload(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    args = ("validate", *_stack(plane, tmp_path, values), "--only", "cluster")
    done = labctl(*args, prefix=netns.inside(plane.layout))
    assert done.code == 1, (done.out, done.err)
    assert done.out.startswith("validating the cluster of stack 'given' in the cluster its kubeconfig")
    checked = [line.split(":")[0] for line in done.out.splitlines() if line[:4] in {"PASS", "FAIL", "SKIP"}]
    assert checked == ["FAIL  system pods run", "PASS  configured nodes are ready"]


def test_validate_on_credentials_that_read_only_nodes_fails_each_other_check_alone(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    """A user of someone else's cluster may read the nodes and nothing else: each check that needs
    another read fails with the fix, and the node check still runs."""

    def kubectl(*args: str) -> str:
        return controlplane.kubectl(plane.layout, *args).stdout

    kubectl("create", "serviceaccount", "reads-nodes", "-n", "default")
    kubectl("create", "clusterrole", "reads-nodes", "--verb=get,list", "--resource=nodes")
    kubectl("create", "clusterrolebinding", "reads-nodes", "--clusterrole=reads-nodes",
            "--serviceaccount=default:reads-nodes")  # fmt: skip
    try:
        given = tmp_path / "kubeconfig"
        token = kubectl("create", "token", "reads-nodes", "-n", "default").strip()
        given.write_text(kubeconfig.for_token(plane.layout, "reads-nodes", token))
        values["kubeconfig"] = str(given)
        done = labctl("validate", *_stack(plane, tmp_path, values), prefix=netns.inside(plane.layout))
    finally:
        kubectl("delete", "clusterrolebinding,clusterrole", "reads-nodes")
        kubectl("delete", "serviceaccount", "reads-nodes", "-n", "default")
    assert done.code == 1, (done.out, done.err)
    assert "PASS  configured nodes are ready: cluster" in done.out
    fix = "give the kubeconfig's user read access there (get and list)"
    claims = f"/api/v1/namespaces/{values.get('namespace', 'k8scifar')}/persistentvolumeclaims"
    for check, path in [
        ("system pods run", "/api/v1/namespaces/kube-system/pods"),
        ("claims are bound", claims),
    ]:
        said = f"FAIL  {check}: cluster\n      the API server https://"
        assert said in done.out and f"answered 403 Forbidden to GET {path}; {fix}" in done.out, done.out


def test_wait_finds_the_gpus_the_cluster_lacks_through_its_api(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    first, second = values["nodes"]
    values["nodes"] = [first | {"gpus": 1}, second | {"gpus": 1}]
    done = labctl("wait", *_stack(plane, tmp_path, values), prefix=netns.inside(plane.layout))
    assert done.code == 1, (done.out, done.err)
    assert f"GPU node {first['name']} reports no allocatable nvidia.com/gpu" in " ".join(done.err.split())


def test_wait_on_a_cpu_lab_names_the_way_to_its_runs(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    done = labctl("wait", *_stack(plane, tmp_path, values), prefix=netns.inside(plane.layout))
    assert done.code == 2, (done.out, done.err)
    assert "logs in to none of them; copy the runs folder and pass --runs-dir DIR" in " ".join(
        done.err.split()
    )


def test_dashboard_asks_the_cluster_for_grafana_before_kubectl(
    plane: controlplane.ControlPlane, values: dict[str, Any], tmp_path: Path
) -> None:
    values["observability"] = {"enabled": True}
    done = labctl("dashboard", *_stack(plane, tmp_path, values), prefix=netns.inside(plane.layout))
    assert done.code == 2, (done.out, done.err)
    said = " ".join(done.err.split())
    assert "no Service grafana in namespace k8scifar-monitoring of the cluster yet" in said, said
