"""The training pods' lifecycle across the two test machines: each machine runs the program's own
pod command line in its network namespace, as a pod would on its node.

Shown here: the two torchrun nodes form one group over the machines' link; neither rank is Ready
while its peer is missing, both are once the group trains; when the run is complete, rank 0's
machine (and only it) sends the scale-down to a local HTTPS server on the bridge, which stands
in for the API server. Not shown (no cluster on these machines): the kubelet running the probe,
the API server authorizing and applying the patch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import testbed
from lab.cluster import training
from lab.cluster.pods import REQUIRE_CIFAR10
from lab.config import load_stack
from lab.testbed import ddp, network, processes
from tests.support.apiserver import Recorder, recording_server, service_account
from tests.support.trainer_runs import wait_for
from trainer.pod import readiness

RUN = "pods-cross-host"
PORT = 29531  # the rendezvous port, on the first machine's address


@pytest.fixture
def server(machines: testbed.Testbed, tmp_path: Path) -> Iterator[Recorder]:
    with recording_server(tmp_path, machines.layout.gateway) as recorder:
        yield recorder


def _pod(machines: testbed.Testbed, ordinal: int, folder: Path, server: Recorder) -> subprocess.Popen[str]:
    machine, first = machines.layout.machines[ordinal], machines.layout.machines[0]
    data, runs = folder / "data", folder / "runs"
    paths = {"/data": str(data), "/runs": str(runs), training.READY_FILE: str(folder / f"ready-{ordinal}")}
    # The one flag left out: the set here is synthetic, not CIFAR-10's published files.
    args = [paths.get(a, a) for a in training.launch_args(load_stack("testbed"), RUN) if a != REQUIRE_CIFAR10]
    small = ddp.small_run(data, runs, RUN, epochs=3)  # later flags win
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "PET_", "RANK", "WORLD_"))}
    env |= {
        "WORLD_SIZE": "2", "RANK": str(ordinal), "POD_NAME": f"trainer-{ordinal}",
        "MASTER_ADDR": first.address, "MASTER_PORT": str(PORT), "LAB_LOCAL_ADDR": machine.address,
        "GLOO_SOCKET_IFNAME": network.GUEST_LINK, "LAB_COLLECTIVE_TIMEOUT": "60",
        "KUBERNETES_SERVICE_HOST": machines.layout.gateway, "KUBERNETES_SERVICE_PORT": str(server.port),
        "LAB_SERVICE_ACCOUNT_DIR": str(folder / "serviceaccount"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    command = ["ip", "netns", "exec", machine.netns, sys.executable, "-m", "trainer", *args, *small]
    with open(folder / f"pod-{ordinal}.log", "w") as log:
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def test_pods_on_two_machines_turn_ready_together_and_rank_0_hands_the_gpus_back(
    machines: testbed.Testbed, server: Recorder, tmp_path: Path
) -> None:
    ddp.make_dataset(tmp_path / "data")
    service_account(tmp_path, server.ca_file)
    ready = [tmp_path / f"ready-{i}" for i in (0, 1)]
    pods = [_pod(machines, 0, tmp_path, server)]
    try:
        # Alone, pod 0 hosts the rendezvous store and waits for its peer: not Ready.
        alone_until = time.monotonic() + 10
        while time.monotonic() < alone_until:
            assert readiness.check(ready[0]) is not None and pods[0].poll() is None
            time.sleep(0.2)
        pods.append(_pod(machines, 1, tmp_path, server))
        wait_for(lambda: all(readiness.check(r) is None for r in ready), "both ranks Ready", 150)
        signals = [json.loads(r.read_text()) for r in ready]
        assert [s["rank"] for s in signals] == [0, 1]
        for machine, signal in zip(machines.layout.machines, signals, strict=True):
            assert (
                os.readlink(f"/proc/{signal['pid']}/ns/net") == f"net:[{os.stat(machine.netns_path).st_ino}]"
            )
        status = tmp_path / "runs" / RUN / "status.json"
        wait_for(
            lambda: status.exists() and json.loads(status.read_text())["state"] == "complete", "the run", 180
        )
        wait_for(lambda: bool(server.requests), "rank 0's scale-down request", 180)
        assert [p.poll() for p in pods] == [None, None]  # both wait for SIGTERM, still Ready
        assert all(readiness.check(r) is None for r in ready)
        (request,) = server.requests
        assert request.client == machines.layout.machines[0].address  # from rank 0's machine
        assert request.method == "PATCH" and json.loads(request.body) == {"spec": {"replicas": 0}}
        assert request.path.startswith("/apis/apps/v1/namespaces/k8scifar/statefulsets/trainer/scale?")
        assert json.loads((tmp_path / "runs" / RUN / "summary.json").read_text())["world_size"] == 2
    finally:
        for pod in pods:
            processes.kill_tree(pod.pid)
            pod.wait()
