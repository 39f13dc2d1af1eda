"""Seam: torchrun's agents against the GPUs their pods hold.

Each training pod runs one torchrun agent (`python -m trainer launch`) whose workers are the
pod's ranks. torchrun hands the agents their global ranks in node-rank order, each a contiguous
block as long as its own worker count, so agents may run different numbers of workers (torch
2.14, torch/distributed/elastic/agent/server/api.py `_assign_worker_ranks`, its default path, run
here itself over an in-process store), and each worker takes the GPU of its local rank among
those the container sees (trainer/distributed.py `device_for`). So the workers of a pod must be
exactly its GPUs (fewer leave GPUs idle, more put two ranks on one GPU), and the blocks of all
agents must be the run's world: every rank from 0 to WORLD_SIZE - 1 once, rank 0 in pod 0, whose
agent hosts the rendezvous store.
"""

from __future__ import annotations

import copy
import threading
import types
from datetime import timedelta

import pytest
import torch.distributed as dist
from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

from lab.config import LabConfig, load_stack, parse_config
from tests.support.pod_commands import rank_environment, trainer_command
from tests.support.program import ProgramRun, pod_spec, recorded
from tests.support.rules.cluster_rules import component
from tests.support.scaled_labs import SHAPES, scaled_run
from tests.support.shipped import shipped_stacks
from trainer import launch

GPU = "nvidia.com/gpu"


def rank_blocks(workers: list[int]) -> list[list[int]]:
    """The global ranks torchrun gives each agent, agent i running workers[i] workers: its own
    rank assignment, each agent in a thread as each pod's agent would run it, over one store."""
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=30))
    blocks: list[list[int]] = [[] for _ in workers]

    def agent(node_rank: int) -> None:
        spec = types.SimpleNamespace(role="trainer", local_world_size=workers[node_rank])
        assigned = SimpleElasticAgent._assign_worker_ranks(None, store, node_rank, len(workers), spec)
        blocks[node_rank] = [w.global_rank for w in assigned]

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return blocks


def _flag(command: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in command if arg.startswith(f"--{name}=")]
    return value


def mismatches(run: ProgramRun, lab: LabConfig) -> list[str]:
    (sts,) = component(run, "training")
    container = pod_spec(sts)["containers"][0]
    args = trainer_command(container["args"])
    # Numbers come back from the engine's mocks as floats.
    pods = int(sts.inputs["spec"]["replicas"])
    gpus = container["resources"]["limits"].get(GPU)
    gpus = None if gpus is None else int(gpus)
    problems, workers = [], []
    for ordinal in range(pods):
        env = rank_environment(run, ordinal, lab.nodes[ordinal % len(lab.nodes)].name)
        command = launch.torchrun_command(env, args, max_restarts=3)
        workers.append(int(_flag(command, "nproc-per-node")))
        if int(_flag(command, "nnodes")) != pods:
            problems.append(
                f"pod {ordinal}: torchrun waits for {_flag(command, 'nnodes')} agents, {pods} pods run"
            )
        if gpus is not None and workers[-1] != gpus:
            problems.append(f"pod {ordinal}: {workers[-1]} workers on {gpus} GPUs")
        world = int(env["WORLD_SIZE"])
    ranks = [rank for block in rank_blocks(workers) for rank in block]
    if ranks != list(range(world)) or world != lab.replicas:
        problems.append(f"the agents' ranks {ranks[:3]}..{ranks[-1:]} are not the world of {lab.replicas}")
    return problems


@pytest.mark.parametrize("stack", [s for s in shipped_stacks() if load_stack(s).installs_kubernetes])
def test_each_pods_workers_are_its_gpus_on_every_stack(stack: str) -> None:
    assert mismatches(recorded(stack), load_stack(stack)) == []


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_pods_workers_are_its_gpus_on_larger_labs(shape: str) -> None:
    assert mismatches(scaled_run(shape), parse_config(SHAPES[shape])) == []


def test_a_pod_with_fewer_gpus_than_workers_is_caught() -> None:
    run = copy.deepcopy(scaled_run("3x2"))
    (sts,) = component(run, "training")
    pod_spec(sts)["containers"][0]["resources"]["limits"][GPU] = 1  # one GPU per pod, as before
    assert mismatches(run, parse_config(SHAPES["3x2"])) == [f"pod {i}: 2 workers on 1 GPUs" for i in range(3)]


def test_torchruns_rank_blocks_follow_each_agents_workers() -> None:
    """Agents of different sizes get blocks of their own size, in node-rank order."""
    assert rank_blocks([2, 4, 2]) == [[0, 1], [2, 3, 4, 5], [6, 7]]
