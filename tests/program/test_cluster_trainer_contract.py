"""The trainer accepts what the cluster hands it: every command line parses with the trainer's own
parser, and every rank's environment, filled in the way the kubelet fills it, gives that rank
its place in the world."""

from __future__ import annotations

from typing import Any

import pytest

from lab.config import load_stack, read_stack_values, stack_file
from tests.program.harness import ProgramRun, cluster_stacks, env_of, pod_spec, run_program
from tests.program.test_cluster_consistency import component, recorded
from trainer import distributed
from trainer.cli import _parser

TRAINER_PREFIX = ["python", "-m", "trainer"]


def _downward(source: dict[str, Any], pod: str, ordinal: int, node: str) -> str | None:
    """What the kubelet puts in an environment variable taken from the downward API."""
    path = source["fieldRef"]["fieldPath"]
    values = {
        "metadata.name": pod,
        "spec.nodeName": node,
        "metadata.labels['apps.kubernetes.io/pod-index']": str(ordinal),
    }
    return values[path]


def rank_environment(run: ProgramRun, ordinal: int, node: str) -> dict[str, str]:
    (sts,) = component(run, "training")
    pod = f"{sts.inputs['metadata']['name']}-{ordinal}"
    env = env_of(pod_spec(sts)["containers"][0])
    return {k: v if isinstance(v, str) else _downward(v, pod, ordinal, node) for k, v in env.items()}


@pytest.mark.parametrize("stack", cluster_stacks())
def test_every_command_parses_with_the_trainers_parser(stack: str) -> None:
    run = recorded(stack)
    workloads = [w for name in ("training", "sweep", "dataset") for w in component(run, name)]
    assert workloads
    for workload in workloads:
        container = pod_spec(workload)["containers"][0]
        _parser().parse_args(container["args"])
        probe = container.get("readinessProbe", {}).get("exec", {}).get("command")
        if probe is not None:
            assert probe[:3] == TRAINER_PREFIX
            _parser().parse_args(probe[3:])


def test_a_command_the_trainer_does_not_know_is_refused() -> None:
    """The test above can fail: the parser rejects a flag the trainer lacks."""
    (sts,) = component(recorded("example-cpu"), "training")
    args = pod_spec(sts)["containers"][0]["args"]
    with pytest.raises(SystemExit):
        _parser().parse_args([*args, "--no-such-flag"])


@pytest.mark.parametrize("stack", cluster_stacks())
def test_each_rank_finds_its_place(stack: str) -> None:
    lab = load_stack(stack)
    run = recorded(stack)
    for ordinal in range(lab.replicas):
        node = lab.nodes[ordinal % len(lab.nodes)]
        env = rank_environment(run, ordinal, node.name)
        place = distributed.topology(env)
        assert (place.rank, place.world_size) == (ordinal, lab.replicas)
        assert (place.master_addr, place.master_port) == (
            f"trainer-0.trainer.{lab.namespace}.svc.cluster.local",
            lab.trainer.port,
        )
        interface = distributed.apply_socket_interfaces(env)
        expected = node.interface if lab.trainer.host_network else None
        assert interface == expected
        assert env.get("GLOO_SOCKET_IFNAME") == (expected or "eth0")


def test_ranks_on_clusters_without_the_pod_index_label_use_their_name() -> None:
    values = read_stack_values(stack_file("example-cpu"))
    run = run_program("example-cpu", {**values, "kubernetesVersion": "1.27.16"})
    env = rank_environment(run, 1, "cpu-b")
    assert "RANK" not in env
    assert distributed.topology(env).rank == 1
