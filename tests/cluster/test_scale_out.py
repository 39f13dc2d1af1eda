"""Labs larger than two machines, rendered through the program under the engine's mocks: every GPU
of every node trains, a pod per node holds all of its GPUs, Kueue's quota is every GPU, and the
placement keeps its meaning. Each object still validates against the official schema, and the
cross-object checks of test_cluster_consistency hold."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from lab.config import ConfigError, LabConfig, parse_config
from tests.support.program import (
    ProgramRun,
    env_of,
    kubernetes_object,
    pod_spec,
    validate_object,
)
from tests.support.rules.cluster_rules import CHECKS, component
from tests.support.rules.kueue_rules import check_object
from tests.support.scaled_labs import SHAPES, grown_lab, scaled_run

GPU = "nvidia.com/gpu"


def _training(run: ProgramRun) -> tuple[dict[str, Any], dict[str, Any]]:
    (sts,) = component(run, "training")
    return sts.inputs["spec"], pod_spec(sts)["containers"][0]


def _quota(run: ProgramRun) -> dict[str, int]:
    (queue,) = [r for r in run.custom_objects() if r.kind == "ClusterQueue"]
    (flavor,) = queue.inputs["spec"]["resourceGroups"][0]["flavors"]
    return {r["name"]: int(r["nominalQuota"]) for r in flavor["resources"]}


@pytest.mark.parametrize(
    ("shape", "ranks", "pods", "gpus_per_pod"), [("3x2", 6, 3, 2), ("4x8", 32, 4, 8), ("4x8-pack", 16, 2, 8)]
)
def test_every_gpu_trains_with_a_pod_per_node(shape: str, ranks: int, pods: int, gpus_per_pod: int) -> None:
    run = scaled_run(shape)
    spec, container = _training(run)
    env = env_of(container)
    assert spec["replicas"] == pods
    assert container["resources"]["limits"][GPU] == gpus_per_pod
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == (str(ranks), str(gpus_per_pod))
    # Kueue hands out every GPU of the lab, and a pod slot for each.
    total = int(shape[2:].split("-")[0]) * int(shape[0])
    assert _quota(run) == {"pods": total, GPU: total}


@pytest.mark.parametrize("shape", ["3x2", "4x8"])
def test_spread_puts_one_pod_on_each_node(shape: str) -> None:
    spec, _ = _training(scaled_run(shape))
    affinity = spec["template"]["spec"]["affinity"]
    (term,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_pack_lets_kueue_put_the_pods_on_the_fewest_nodes() -> None:
    run = scaled_run("4x8-pack")
    spec, _ = _training(run)
    assert "affinity" not in spec["template"]["spec"]
    assert spec["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"
    }
    (topology,) = [r for r in run.custom_objects() if r.kind == "Topology"]
    (flavor,) = [r for r in run.custom_objects() if r.kind == "ResourceFlavor"]
    assert topology.inputs["spec"] == {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}
    assert flavor.inputs["spec"]["topologyName"] == topology.inputs["metadata"]["name"]
    assert [p for r in run.custom_objects() for p in check_object(kubernetes_object(r))] == []


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_object_validates_and_the_cross_checks_hold(shape: str) -> None:
    run, lab = scaled_run(shape), parse_config(SHAPES[shape])
    for resource in run.kubernetes_objects():
        try:
            validate_object(kubernetes_object(resource), lab.kubernetes_version)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{shape}: {resource.kind} {resource.name}: {err.message} at {err.path}")
    assert [p for check in CHECKS for p in check(run, lab)] == []


def _world(gpus: list[int], **trainer: Any) -> LabConfig:
    values = grown_lab(len(gpus), 0, **trainer)
    for node, count in zip(values["nodes"], gpus, strict=True):
        node["gpus"] = count
    return parse_config(values)


@pytest.mark.parametrize(
    ("gpus", "trainer", "ranks", "per_pod"),
    [
        ([2, 4], {"batchSize": 1020}, 6, 2),  # unequal nodes: pods of their common divisor, all GPUs
        ([8, 8, 8, 8], {"replicas": 3, "batchSize": 1020}, 3, 1),  # spread: three nodes, one GPU each
        (
            [2, 4],
            {"placement": "pack", "batchSize": 1020},
            6,
            2,
        ),  # pack with Kueue: every GPU, on the fewest nodes
        ([2, 4], {"placement": "pack", "replicas": 4}, 4, 2),
    ],
)
def test_the_world_holds_for_any_nodes(gpus: list[int], trainer: dict, ranks: int, per_pod: int) -> None:
    lab = _world(gpus, **trainer)
    assert (lab.world.ranks, lab.world.ranks_per_pod) == (ranks, per_pod)
    assert lab.world.pods * per_pod <= lab.total_gpus


def test_pack_without_kueue_is_one_pod_on_one_node() -> None:
    values = {**grown_lab(2, 4, placement="pack"), "scheduling": {"gang": "none"}}
    world = parse_config(values).world
    assert (world.ranks, world.pods) == (4, 1)
    with pytest.raises(ConfigError, match=r"scheduling\.gang: kueue"):
        parse_config({**values, "trainer": {**values["trainer"], "replicas": 8}})


@pytest.mark.parametrize(("batch", "nearest"), [(1000, 1002), (1024, 1026), (1021, 1020)])
def test_a_batch_that_does_not_divide_names_the_nearest_that_does(batch: int, nearest: int) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(grown_lab(3, 2, batchSize=batch))  # six ranks
    assert f"use {nearest}, the nearest multiple of 6" in str(caught.value)


def test_a_batch_left_out_is_the_nearest_that_splits_and_the_lab_says_so() -> None:
    lab = parse_config(grown_lab(3, 2))  # six ranks; the recipe's 1024 leaves a remainder of 4
    assert lab.batch_size == 1026
    assert lab.batch_note is not None
    assert "default 1024 does not split evenly over 6 ranks: the run trains with 1026" in lab.batch_note
    _, container = _training(scaled_run("3x2"))
    args = container["args"]
    assert args[args.index("--batch-size") + 1] == "1026"
    # Where the default splits, it is the batch, and nothing is said.
    splits = parse_config(grown_lab(4, 8))
    assert (splits.batch_size, splits.batch_note) == (1024, None)
    # A batch the stack sets is never moved: it is refused with the nearest (the test above).
    assert parse_config(grown_lab(3, 2, batchSize=1020)).batch_size == 1020
