"""The user's command, for real: `pulumi up --stack NAME` on the lab's own project, through the
Pulumi CLI, the Python language host and pulumi-resource-kubernetes from the tools, against the
real control plane; every assertion reads the live cluster.

The stack is the CPU example's, its machines the control plane's kwok nodes, naming the control
plane's kubeconfig instead of bootstrapping hosts, with no gang scheduler and no monitoring (their
Helm charts cannot be fetched here). The test plays one part of the cluster's: the build's digest
write (tests/support/build_play.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from lab import controlplane
from lab.cluster import training
from lab.cluster.labels import selector_labels
from lab.cluster.namespace import build_namespace
from lab.config import PROJECT, LabConfig, parse_config
from lab.config.loading import read_stack_values, stack_file
from tests.support.build_play import PLAYED_DIGEST, DigestWrite
from tests.support.pulumi_cli import PulumiCli

STACK = "example-cpu-live"
# Cluster-wide kinds the lab may declare: none may be left after destroy.
CLUSTER_KINDS = "persistentvolumes,priorityclasses,clusterroles,clusterrolebindings,runtimeclasses"


def _stack_values(plane: controlplane.ControlPlane, base: str) -> dict[str, Any]:
    """The example's configuration, pointed at the control plane, without what needs Helm."""
    values = read_stack_values(stack_file(base))
    values["kubeconfig"] = str(plane.layout.kubeconfig)
    values["scheduling"] = {"gang": "none"}
    values["observability"] = {"enabled": False}
    return values


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-2000:])
    return done


@pytest.fixture(scope="module")
def live(
    plane: controlplane.ControlPlane, base_stack: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PulumiCli, LabConfig, subprocess.CompletedProcess[str], DigestWrite]]:
    """The first `up`, with the build's digest write played while it waits for the build."""
    cli = PulumiCli(plane.layout, tmp_path_factory.mktemp("pulumi"), STACK)
    values = _stack_values(plane, base_stack)
    lab = parse_config(values)
    cli.write_config(values)
    cli.init()
    with DigestWrite(plane.layout, lab, cli.folder) as play:
        done = cli.stack_command("up", "--yes", "--skip-preview")
    yield cli, lab, done, play
    # Whatever a test left, the next module meets an empty cluster.
    cli.stack_command("destroy", "--yes", "--skip-preview")


def _json(plane: controlplane.ControlPlane, *args: str) -> Any:
    return json.loads(controlplane.kubectl(plane.layout, *args, "-o", "json").stdout)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_up_returns_with_every_rank_scheduled_and_ready(plane: controlplane.ControlPlane, live: Any) -> None:
    _cli, lab, done, play = live
    _ok(done)
    assert play.result == ["written"], "the build's ServiceAccount could not record the digest"
    selector = ",".join(
        f"{k}={v}" for k, v in selector_labels(lab.namespace, training.APP, training.COMPONENT).items()
    )
    pods = _json(plane, "get", "pods", "-n", lab.namespace, "-l", selector)["items"]
    assert len(pods) == lab.replicas
    for pod in pods:
        assert pod["spec"].get("nodeName") in {n.name for n in lab.nodes}, pod["metadata"]["name"]
        assert _ready(pod), pod["metadata"]["name"]
        assert all(c["image"].endswith(f"@{PLAYED_DIGEST}") for c in pod["spec"]["containers"])


def test_the_kubeconfig_stays_out_of_the_output_and_the_state(
    plane: controlplane.ControlPlane, live: Any
) -> None:
    cli, _lab, done, _play = live
    key = next(
        line.split(":", 1)[1].strip()
        for line in plane.layout.kubeconfig.read_text().splitlines()
        if line.strip().startswith("client-key-data:")
    )
    state = "".join(p.read_text() for p in (cli.folder / "state").rglob("*.json"))
    assert key not in done.stdout + done.stderr
    assert key not in state


def test_a_second_up_changes_nothing(live: Any) -> None:
    cli, _lab, _done, _play = live
    # The CLI fails the update when any step changed something (pulumi `--expect-no-changes`).
    _ok(cli.stack_command("up", "--yes", "--skip-preview", "--expect-no-changes"))


def test_destroy_leaves_no_object_and_no_namespace_terminating(
    plane: controlplane.ControlPlane, live: Any
) -> None:
    cli, lab, _done, _play = live
    _ok(cli.stack_command("destroy", "--yes", "--skip-preview"))
    namespaces = {n["metadata"]["name"] for n in _json(plane, "get", "namespaces")["items"]}
    assert namespaces.isdisjoint({lab.namespace, build_namespace(lab)})
    left = controlplane.kubectl(
        plane.layout, "get", CLUSTER_KINDS, "-l", f"app.kubernetes.io/part-of={PROJECT}", "-o", "name"
    )
    assert left.stdout.strip() == ""
