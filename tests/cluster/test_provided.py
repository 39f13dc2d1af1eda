"""`k8scifar:provides` under the engine's mocks: what the cluster already has is declared by the
lab no more (the device plugin and its RuntimeClass, the monitoring stack, the NFS volumes), and
what the lab still declares reaches the cluster's own (its Prometheus, its StorageClass, the folder
every node mounts). The bootstrap's inventory leaves the NFS plays nothing to run on."""

from __future__ import annotations

from typing import Any

from lab.bootstrap.inventory import NFS_SERVER_GROUP, build_inventory
from lab.cluster.gpu import APP as DEVICE_PLUGIN
from lab.cluster.storage import SHARES
from lab.config import parse_config, read_stack_values, stack_file
from tests.support.program import kubernetes_object, labels_of, name_of, run_program, validate_object

GPU = "example-gpu"


def _values(**provides: Any) -> dict[str, Any]:
    values = read_stack_values(stack_file(GPU)) | {"provides": provides}
    if "volume" in provides:
        del values["nfs"]  # the export the lab then does not make
    return values


def test_a_provided_device_plugin_leaves_only_the_gpu_node_labels() -> None:
    own = run_program(GPU, _values())
    provided = run_program(GPU, _values(devicePlugin=True))
    assert [name_of(r) for r in own.of_kind("RuntimeClass")] == ["nvidia"]
    assert [
        r for r in own.of_kind("DaemonSet") if labels_of(r).get("app.kubernetes.io/name") == DEVICE_PLUGIN
    ]
    assert provided.of_kind("RuntimeClass") == []
    assert [r for r in provided.of_kind("DaemonSet") if DEVICE_PLUGIN in name_of(r)] == []
    assert len(provided.of_kind("NodePatch")) == len(parse_config(_values()).gpu_nodes)


def test_provided_monitoring_installs_none_and_lets_the_clusters_prometheus_scrape() -> None:
    run = run_program(GPU, _values(monitoring={"namespace": "observe"}))
    assert run.helm_releases() == [r for r in run.helm_releases() if "kueue" in r.name]
    assert "dashboard" not in run.outputs
    (policy,) = [kubernetes_object(r) for r in run.of_kind("NetworkPolicy") if "trainer-metrics" in r.name]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observe"}}}
    ]


def test_a_shared_folder_is_each_shares_volume_on_every_node() -> None:
    run = run_program(GPU, _values(volume={"sharedFolder": "/mnt/shared"}))
    volumes = {name_of(r): kubernetes_object(r) for r in run.of_kind("PersistentVolume")}
    assert len(volumes) == len(SHARES)
    for volume in volumes.values():
        validate_object(volume, "1.34.4")
        spec = volume["spec"]
        assert "nfs" not in spec and "mountOptions" not in spec
        assert spec["hostPath"]["type"] == "Directory"
        assert spec["hostPath"]["path"] in {f"/mnt/shared/{s.directory}" for s in SHARES}
    assert str(run.outputs["results"]).startswith("/mnt/shared/runs on every node/")


def test_a_provided_storage_class_provisions_the_claims() -> None:
    run = run_program(GPU, _values(volume={"storageClass": "cephfs"}))
    assert run.of_kind("PersistentVolume") == []
    claims = [kubernetes_object(r) for r in run.of_kind("PersistentVolumeClaim")]
    assert len(claims) == len(SHARES)
    assert {c["spec"]["storageClassName"] for c in claims} == {"cephfs"}
    assert all("volumeName" not in c["spec"] for c in claims)


def test_a_provided_volume_empties_the_nfs_server_group() -> None:
    own = build_inventory(parse_config(_values()), None)["all"]["children"][NFS_SERVER_GROUP]
    shared = parse_config(_values(volume={"sharedFolder": "/mnt/shared"}))
    assert own["hosts"]
    assert build_inventory(shared, None)["all"]["children"][NFS_SERVER_GROUP] == {"hosts": {}}
