"""Two trainer pods' lifecycle with real torchrun processes: the command line the program gives each
pod, run twice on this machine (two processes standing in for two pods), with the environment
each pod gets.

Shown here: `launch` forms one group of two torchrun nodes; a rank turns Ready only once the group
has formed and trained a step, stops being Ready when its worker dies and is Ready again after
torchrun has restarted it; when the run is complete rank 0 (and only rank 0) asks the API server,
here a local HTTPS server, to scale the StatefulSet to zero; the ranks then wait for SIGTERM.
Not shown (no cluster here): the kubelet running the probe, the API server acting on the patch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.cluster import training
from lab.cluster.pods import GRACE_PERIOD_SECONDS, REQUIRE_CIFAR10
from lab.config import load_stack
from tests.support.apiserver import TOKEN, Recorder, recording_server, service_account
from tests.support.network import free_port
from tests.support.processes import children
from tests.support.trainer_runs import SMALL, read_json, start, wait_for
from trainer.pod import readiness

RUN = "lifecycle"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Recorder]:
    with recording_server(tmp_path) as recorder:
        yield recorder


def pod_command(dataset: Path, runs: Path, ready: Path) -> list[str]:
    """The program's own arguments for a pod, with the pod's paths mapped onto this machine and the
    run made small (later flags win)."""
    args = training.launch_args(load_stack("example-cpu"), RUN)
    paths = {"/data": str(dataset), "/runs": str(runs), training.READY_FILE: str(ready)}
    # The one flag left out: the set here is synthetic, not CIFAR-10's published files.
    args = [paths.get(a, a) for a in args if a != REQUIRE_CIFAR10]
    # Each pod has a network of its own; here both share one, so each gets its own metrics port.
    own_port = ["--metrics-port", str(free_port())]
    return [sys.executable, "-m", "trainer", *args, *SMALL[:-1], "8", "--threads", "1", *own_port]


def pod_env(ordinal: int, port: int, server: Recorder, account: Path) -> dict[str, str]:
    return {
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "POD_NAME": f"trainer-{ordinal}",
        "RANK": str(ordinal),
        "LAB_LOCAL_ADDR": "127.0.0.1",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "LAB_SERVICE_ACCOUNT_DIR": str(account),
        "LAB_COLLECTIVE_TIMEOUT": "60",
    }


def listening(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) == 0


def probe(ready: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "probe", "--ready", str(ready)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    return done.returncode


def test_ranks_turn_ready_when_the_group_trains_and_rank_0_hands_the_gpus_back(
    dataset: Path, tmp_path: Path, server: Recorder, processes: list
) -> None:
    runs, port = tmp_path / "runs", free_port()
    account = service_account(tmp_path, server.ca_file)
    ready = [tmp_path / f"pod-{i}" / "training" for i in (0, 1)]
    logs = [tmp_path / f"pod-{i}.log" for i in (0, 1)]

    def launch(ordinal: int) -> subprocess.Popen[bytes]:
        command = pod_command(dataset, runs, ready[ordinal])
        process = start(command, logs[ordinal], **pod_env(ordinal, port, server, account))
        processes.append(process)
        return process

    pods = [launch(0)]
    # Pod 0 alone: its torchrun hosts the rendezvous store and waits for its peer; not Ready.
    wait_for(lambda: listening(port) or pods[0].poll() is not None, "pod 0's rendezvous store")
    time.sleep(2)
    assert pods[0].poll() is None, logs[0].read_text()[-3000:]
    assert probe(ready[0]) == 1 and not ready[0].exists()
    pods.append(launch(1))
    wait_for(lambda: all(readiness.check(r) is None for r in ready), "both ranks Ready", timeout=180)
    assert [probe(r) for r in ready] == [0, 0]
    signals = [json.loads(r.read_text()) for r in ready]
    assert [s["rank"] for s in signals] == [0, 1], "node ranks follow the pods' order"

    # A worker dies: its rank is not Ready until torchrun has restarted it and it trains again.
    (worker,) = children(pods[1].pid)
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: readiness.check(ready[1]) is not None, "rank 1 not Ready after its worker died")
    wait_for(lambda: readiness.check(ready[1]) is None, "rank 1 Ready again after the restart", 180)
    assert json.loads(ready[1].read_text())["pid"] != signals[1]["pid"]

    # Complete: rank 0 asks once for the StatefulSet's scale to be 0; both ranks wait, still Ready.
    status = runs / RUN / "status.json"
    wait_for(lambda: status.exists() and read_json(status)["state"] == "complete", "the run to complete", 240)
    wait_for(lambda: len(server.requests) >= 1, "rank 0's scale-down request")
    assert [p.poll() for p in pods] == [None, None]
    assert [probe(r) for r in ready] == [0, 0]
    (request,) = server.requests
    assert (request.method, request.path.split("?")[0]) == (
        "PATCH",
        "/apis/apps/v1/namespaces/k8scifar/statefulsets/trainer/scale",
    )
    assert json.loads(request.body) == {"spec": {"replicas": 0}}
    assert read_json(runs / RUN / "summary.json")["world_size"] == 2
    log = logs[0].read_text()
    assert "statefulset k8scifar/trainer scaled to 0" in log and TOKEN not in log + logs[1].read_text()

    # The pods' end: SIGTERM reaches torchrun (the pod's process), which stops its waiting worker
    # within the grace period (torchrun then exits with its own code for the signal).
    for process in pods:
        process.send_signal(signal.SIGTERM)
    for process in pods:
        process.wait(timeout=GRACE_PERIOD_SECONDS)
    assert [probe(r) for r in ready] == [1, 1]
