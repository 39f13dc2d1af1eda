"""The request rank 0 makes to free a finished run's GPUs, held against a local HTTPS server.

Not exercised here (no API server exists on these machines): that Kubernetes accepts the patch,
that the Role allows exactly it, and that the StatefulSet controller then deletes the pods. The
Role is checked under the engine's mocks (tests/cluster); the request's method, path, body,
headers and TLS verification are checked here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apiserver import TOKEN, Recorder, recording_server, self_signed, service_account
from trainer.pod import handoff


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Recorder]:
    with recording_server(tmp_path) as recorder:
        yield recorder


def pod_env(server: Recorder, account: Path, pod: str = "trainer-0") -> dict[str, str]:
    return {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "LAB_SERVICE_ACCOUNT_DIR": str(account),
        "POD_NAME": pod,
    }


def test_rank_0_patches_its_statefulsets_scale_to_zero(server: Recorder, tmp_path: Path) -> None:
    account = service_account(tmp_path, server.ca_file)
    message = handoff.release(pod_env(server, account))
    assert message == "statefulset k8scifar/trainer scaled to 0: its GPUs are free"
    (request,) = server.requests
    assert request.method == "PATCH"
    # The scale subresource of the pod's own StatefulSet (apps/v1), under a field manager of its own.
    assert (
        request.path
        == "/apis/apps/v1/namespaces/k8scifar/statefulsets/trainer/scale?fieldManager=k8scifar-trainer"
    )
    assert json.loads(request.body) == {"spec": {"replicas": 0}}
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_refusal_is_one_line_without_the_token(server: Recorder, tmp_path: Path) -> None:
    server.status = 403
    account = service_account(tmp_path, server.ca_file)
    with pytest.raises(handoff.HandOffError) as caught:
        handoff.release(pod_env(server, account))
    assert (
        str(caught.value)
        == "the API server refused to scale statefulset k8scifar/trainer to 0: HTTP 403 Forbidden"
    )
    assert TOKEN not in str(caught.value)


def test_a_server_the_cluster_ca_did_not_sign_is_refused(server: Recorder, tmp_path: Path) -> None:
    account = service_account(tmp_path, server.ca_file)
    other = tmp_path / "other"
    other.mkdir()
    (account / "ca.crt").write_bytes(self_signed(other)[0].read_bytes())
    with pytest.raises(handoff.HandOffError, match="could not reach the API server"):
        handoff.release(pod_env(server, account))
    assert server.requests == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"POD_NAME": "trainer"}, "not a StatefulSet pod's name"),
        ({"KUBERNETES_SERVICE_HOST": ""}, "not running in a pod"),
        ({"LAB_SERVICE_ACCOUNT_DIR": "/nonexistent"}, "no service-account token under /nonexistent"),
    ],
)
def test_a_pod_that_cannot_ask_says_why(server: Recorder, tmp_path: Path, change: dict, message: str) -> None:
    env = pod_env(server, service_account(tmp_path, server.ca_file)) | change
    with pytest.raises(handoff.HandOffError, match=message):
        handoff.release(env)
