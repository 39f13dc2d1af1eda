"""The trainer accepts what the cluster hands it: every command line parses with the trainer's own
parser, and every rank's environment, filled in the way the kubelet fills it, gives that rank
its place in the world."""

from __future__ import annotations

import pytest

from lab.config import load_stack, read_stack_values, stack_file
from tests.support.pod_commands import rank_environment, trainer_command
from tests.support.program import cluster_stacks, pod_spec, recorded, run_program
from tests.support.rules.cluster_rules import component
from trainer import launch
from trainer.cli import _parser

TRAINER_PREFIX = ["python", "-m", "trainer"]


@pytest.mark.parametrize("stack", cluster_stacks())
def test_every_command_parses_with_the_trainers_parser(stack: str) -> None:
    run = recorded(stack)
    workloads = [w for name in ("training", "sweep", "dataset") for w in component(run, name)]
    assert workloads
    for workload in workloads:
        container = pod_spec(workload)["containers"][0]
        assert trainer_command(container["args"])[0] in {"train", "data"}
        probe = container.get("readinessProbe", {}).get("exec", {}).get("command")
        if probe is not None:
            assert probe[:3] == TRAINER_PREFIX
            _parser().parse_args(probe[3:])


def test_a_command_the_trainer_does_not_know_is_refused() -> None:
    """The test above can fail: the parser rejects a flag the trainer lacks."""
    (sts,) = component(recorded("example-cpu"), "training")
    args = pod_spec(sts)["containers"][0]["args"]
    with pytest.raises(SystemExit):
        trainer_command([*args, "--no-such-flag"])


@pytest.mark.parametrize("stack", cluster_stacks())
def test_each_rank_finds_its_place(stack: str) -> None:
    from trainer import distributed  # imports torch: here, so collecting tests/cluster does not

    lab = load_stack(stack)
    run = recorded(stack)
    for ordinal in range(lab.world.pods):
        node = lab.nodes[ordinal % len(lab.nodes)]
        env = rank_environment(run, ordinal, node.name)
        place = distributed.topology(env)
        # Before torchrun, RANK is the pod's index; torchrun gives each worker its own.
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
    from trainer import distributed  # imports torch: here, so collecting tests/cluster does not

    values = read_stack_values(stack_file("example-cpu"))
    run = run_program("example-cpu", {**values, "kubernetesVersion": "1.27.16"})
    env = rank_environment(run, 1, "cpu-b")
    assert "RANK" not in env
    assert distributed.topology(env).rank == 1


@pytest.mark.parametrize("stack", cluster_stacks())
def test_each_pod_is_one_torchrun_node_of_the_run(stack: str) -> None:
    """What `launch` makes of each pod's environment: one node per pod with a worker per rank of the
    pod, the rendezvous store on pod 0 (and only there), reached through the headless Service, each
    pod at its own DNS name."""
    lab = load_stack(stack)
    run = recorded(stack)
    (sts,) = component(run, "training")
    args = trainer_command(pod_spec(sts)["containers"][0]["args"])
    master = f"trainer-0.trainer.{lab.namespace}.svc.cluster.local:{lab.trainer.port}"
    for ordinal in range(lab.world.pods):
        env = rank_environment(run, ordinal, lab.nodes[ordinal % len(lab.nodes)].name)
        command = launch.torchrun_command(env, args, max_restarts=3)
        flags = command[command.index("torch.distributed.run") + 1 : command.index("-m", 3)]
        assert flags == [
            f"--nnodes={lab.world.pods}", f"--nproc-per-node={lab.world.ranks_per_pod}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={master}", f"--rdzv-id={run.outputs['run']}",
            f"--rdzv-conf=is_host={int(ordinal == 0)}", "--max-restarts=3",
            f"--local-addr=trainer-{ordinal}.trainer.{lab.namespace}.svc.cluster.local",
        ]  # fmt: skip
        assert command[-len(args) - 2 :] == ["-m", "trainer", *args]
