"""`k8scifar:provides`: what the cluster already has. Each bad value is refused in one line that
names the key and the fix, before anything runs, and the facts the rest of the lab reads follow it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.config import ConfigError, parse_config

GPU: dict[str, Any] = {
    "nodes": [
        {"name": "gpu-a", "address": "192.168.50.11", "user": "ubuntu", "role": "server", "gpus": 1},
        {"name": "gpu-b", "address": "192.168.50.12", "user": "ubuntu", "role": "agent", "gpus": 1},
    ]
}
CPU: dict[str, Any] = {"nodes": [{**n, "gpus": 0} for n in GPU["nodes"]]}


def _with(base: dict[str, Any], **keys: Any) -> dict[str, Any]:
    return copy.deepcopy(base) | keys


def _problem(values: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(values)
    (problem,) = info.value.problems
    assert "\n" not in problem
    return problem


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (
            _with(GPU, scheduling={"gang": "kueue", "kueueInstalled": True}),
            "k8scifar:scheduling.kueueInstalled: moved to k8scifar:provides.kueue, which says the same;"
            " write it there and remove this key",
        ),
        (
            _with(GPU, scheduling={"gang": "none"}, provides={"kueue": True}),
            "k8scifar:provides.kueue: the lab's gang scheduler is none, so it uses no Kueue;"
            " remove provides.kueue or set scheduling.gang: kueue",
        ),
        (
            _with(CPU, provides={"devicePlugin": True}),
            "k8scifar:provides.devicePlugin: no node of the stack has gpus, so the lab uses no device"
            " plugin; remove provides.devicePlugin or give the GPU nodes their gpus",
        ),
        (
            _with(
                GPU, observability={"enabled": False}, provides={"monitoring": {"namespace": "monitoring"}}
            ),
            "k8scifar:provides.monitoring: observability.enabled is false, so the ranks serve no metrics"
            " for it to scrape; remove provides.monitoring or set observability.enabled: true",
        ),
        (
            _with(GPU, provides={"monitoring": {}}),
            "k8scifar:provides.monitoring.namespace: required key is missing",
        ),
        (
            _with(GPU, provides={"volume": {}}),
            "k8scifar:provides.volume: names the volume by exactly one of storageClass (the cluster"
            " provisions it) and sharedFolder (every node mounts it); keep one",
        ),
        (
            _with(GPU, provides={"volume": {"storageClass": "nfs", "sharedFolder": "/mnt/shared"}}),
            "k8scifar:provides.volume: names the volume by exactly one of storageClass",
        ),
        (
            _with(GPU, provides={"volume": {"sharedFolder": "shared"}}),
            "k8scifar:provides.volume.sharedFolder: 'shared' is not an absolute folder below /",
        ),
        (
            _with(GPU, provides={"volume": {"sharedFolder": "/mnt/../etc"}}),
            "k8scifar:provides.volume.sharedFolder: '/mnt/../etc' is not an absolute folder below /",
        ),
        (
            _with(GPU, provides={"volume": {"storageClass": "Fast_NFS"}}),
            "k8scifar:provides.volume.storageClass: 'Fast_NFS' is not a Kubernetes object name",
        ),
        (
            _with(GPU, nfs={"exportPath": "/srv/lab"}, provides={"volume": {"storageClass": "nfs"}}),
            "k8scifar:provides.volume: the lab exports no NFS folder where the cluster provides the"
            " volume, and the stack sets nfs.exportPath; remove the nfs section or provides.volume",
        ),
        (
            _with(GPU, provides={"grafana": True}),
            "k8scifar:provides.grafana: unknown key",
        ),
    ],
    ids=[
        "old-kueue-key",
        "kueue-without-kueue",
        "device-plugin-without-gpus",
        "monitoring-without-metrics",
        "monitoring-without-namespace",
        "volume-of-neither-kind",
        "volume-of-both-kinds",
        "relative-folder",
        "folder-that-climbs",
        "storage-class-no-name",
        "volume-and-nfs",
        "unknown-part",
    ],
)
def test_each_bad_provides_value_is_one_line_with_its_fix(values: dict[str, Any], said: str) -> None:
    assert _problem(values).startswith(said)


def test_a_provided_volume_moves_the_runs_folder_and_ends_the_export() -> None:
    own = parse_config(GPU)
    assert own.exports_nfs
    assert own.runs_folder is not None and own.runs_folder[1] == "/srv/k8scifar/runs"
    shared = parse_config(_with(GPU, provides={"volume": {"sharedFolder": "/mnt/shared/"}}))
    assert not shared.exports_nfs
    assert shared.runs_folder == (shared.server, "/mnt/shared/runs")
    provisioned = parse_config(_with(GPU, provides={"volume": {"storageClass": "cephfs"}}))
    assert not provisioned.exports_nfs and provisioned.runs_folder is None


def test_provided_monitoring_leaves_the_ranks_metrics_on() -> None:
    lab = parse_config(_with(GPU, provides={"monitoring": {"namespace": "monitoring"}}))
    assert lab.observability.enabled and not lab.installs_monitoring
    assert parse_config(GPU).installs_monitoring
