"""The control plane comes up as the lab's program meets it, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import controlplane
from lab.cluster.gang import manager_config
from lab.cluster.pods import GPU_RESOURCE
from lab.config import LabConfig
from lab.config.machines import Node, Role
from lab.controlplane import kueue
from lab.controlplane.layout import HOST, Layout
from lab.controlplane.nodes import CONTROL_PLANE_LABEL, GPU_TAINT
from lab.paths import ROOT
from tests.support.tiers import costly


def _json(plane: controlplane.ControlPlane, *args: str) -> Any:
    return json.loads(controlplane.kubectl(plane.layout, *args, "-o", "json").stdout)


def _traces(layout: Layout) -> list[str]:
    """Processes, mounts, the namespace and files of `layout`'s control plane on this machine."""
    found = controlplane.leftovers(layout)
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(layout.state) in cmdline.read_bytes().decode(errors="replace"):
                found.append(f"process {cmdline.parent.name}")
        except OSError:
            continue
    found += [m for m in Path("/proc/self/mounts").read_text().splitlines() if layout.netns in m]
    return found


def test_the_api_server_is_ready_with_the_k3s_roles_pod_security(plane: controlplane.ControlPlane) -> None:
    assert controlplane.kubectl(plane.layout, "get", "--raw", "/readyz").stdout == "ok"
    # Baseline enforced by default, as the k3s role's admission configuration says: a privileged pod
    # in a namespace without its own level is refused.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "image": "example.invalid/x", "securityContext": {"privileged": True}}
            ]
        },
    }
    refused = controlplane.kubectl(
        plane.layout, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False
    )
    assert refused.returncode != 0
    assert 'violates PodSecurity "baseline:latest"' in refused.stderr


def test_the_stacks_machines_are_ready_nodes(plane: controlplane.ControlPlane, base_lab: LabConfig) -> None:
    nodes = {n["metadata"]["name"]: n for n in _json(plane, "get", "nodes")["items"]}
    assert sorted(nodes) == sorted(n.name for n in base_lab.nodes)
    for machine in base_lab.nodes:
        node = nodes[machine.name]
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", machine.name
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == machine.name
        assert (CONTROL_PLANE_LABEL in node["metadata"]["labels"]) == (machine.role is Role.SERVER)


def test_gpu_machines_carry_their_gpus_and_taint() -> None:
    gpu = Node(name="gpu-a", address="192.168.50.21", user="u", role=Role.AGENT, gpus=4)
    manifest = controlplane.nodes.manifest(gpu)
    assert manifest["status"]["capacity"][GPU_RESOURCE] == "4"
    assert manifest["spec"]["taints"] == [GPU_TAINT]


@costly("a control plane started in a child process, which is then killed")
def _killed_run(layout: Layout) -> None:
    """A run that starts control plane `layout.name`, then is SIGKILLed."""
    script = (
        "import sys\n"
        "from lab import controlplane\n"
        "from lab.config import load_stack\n"
        "stack = load_stack('example-cpu')\n"
        f"controlplane.up(controlplane.Layout({layout.name!r}), stack.nodes[:1], 'example-cpu', stack)\n"
        "print('up', flush=True)\n"
        "sys.stdin.read()\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert run.stdout is not None
        assert run.stdout.readline().strip() == "up"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()


def test_a_killed_runs_leftovers_are_removed_by_name(base_lab: LabConfig) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create the control plane's network namespace")
    layout = Layout("killed")
    _killed_run(layout)
    assert any(t.startswith("process") for t in _traces(layout)), "the components outlive the killed run"
    # Starting again under the same name first removes them; leaving stops and removes it all.
    with controlplane.running(layout.name, base_lab.nodes[:1], "example-cpu"):
        assert controlplane.kubectl(layout, "get", "--raw", "/readyz").stdout == "ok"
    assert _traces(layout) == []


def test_kueue_runs_with_the_labs_configuration_behind_url_webhooks(
    plane: controlplane.ControlPlane, base_lab: LabConfig
) -> None:
    config = kueue.configuration(base_lab, plane.layout)
    lab_config = manager_config(base_lab)
    for key in ("managedJobsNamespaceSelector", "waitForPodsReady", "integrations", "resources"):
        assert config[key] == lab_config[key], key
    hooks = [
        h
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for item in _json(plane, "get", kind)["items"]
        for h in item["webhooks"]
    ]
    assert {h["name"] for h in hooks} >= {"mpod.kb.io", "mstatefulset.kb.io", "mjob.kb.io"}
    for hook in hooks:
        assert hook["clientConfig"]["url"].startswith(f"https://{HOST}:{kueue.WEBHOOK_PORT}/")
        assert "service" not in hook["clientConfig"]
    served = controlplane.kubectl(plane.layout, "create", "--dry-run=server", "-f", "-", stdin=kueue.PROBE)
    assert served.returncode == 0, served.stderr
