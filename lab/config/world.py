"""How a training run's ranks map onto pods and nodes: the world size, the ranks of each pod, the pods.

A GPU rank needs a whole GPU. A training pod takes `ranks_per_pod` GPUs and its torchrun agent
runs one worker per GPU, so the ranks of one pod reach each other over NVLink/PCIe and shared
memory (NCCL's host hash is the hostname and boot id: one pod is one host), and ranks of different
pods over the network. The pods are one StatefulSet, whose template gives every pod the same GPU
request, and so the same number of ranks: the largest number that divides the world size and
every GPU node's GPUs. Nodes with equal GPUs then get one pod each, holding all of their GPUs
(3 nodes x 2 GPUs: 3 pods of 2 ranks; 4 x 8: 4 pods of 8); unequal nodes (2 and 4 GPUs) get pods
of the common divisor, several on the larger nodes, and every GPU still trains. torchrun's agents
would accept pods with different worker counts (the elastic agent hands each agent a contiguous
block of global ranks as long as its own worker count, torch 2.14
torch/distributed/elastic/agent/server/api.py `_assign_worker_ranks`), but pods of different sizes
take two StatefulSets, two Kueue workloads, and with `waitForPodsReady.blockAdmission` Kueue admits
the second only once the first is Ready, which it never is without the second (docs/seams.md).

CPU labs keep one rank per pod: a CPU pod's worker count is not a device the scheduler hands out.

Placement (the pod affinities, lab.cluster.training):

- `spread`: the pods on different nodes; when there are more pods than nodes (unequal GPU
  counts), as evenly as the GPUs allow. The default world is every GPU of the lab.
- `pack`: the pods on as few nodes as hold them. With Kueue on a GPU lab, its topology-aware
  scheduling places them (lab.cluster.gang) and the world may be every GPU of the lab; otherwise
  one pod holds every rank, on one node, and the world is at most the largest node's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Ranks that `pack` puts on one CPU node: each is a process with its own threads on a node that
# is often a 2-core machine, where more ranks only share the same cores.
CPU_PACK_RANKS = 2


@dataclass(frozen=True)
class World:
    ranks: int  # the world size: GPUs on GPU labs, processes on CPU labs
    ranks_per_pod: int  # torchrun workers of each pod, and its GPUs on GPU labs

    @property
    def pods(self) -> int:
        return self.ranks // self.ranks_per_pod


def capacity(node_gpus: Sequence[int], pack: bool, by_topology: bool) -> int:
    """The most ranks the placement can hold on nodes with these GPUs (0 for a CPU node)."""
    gpus = [g for g in node_gpus if g]
    if not gpus:
        return CPU_PACK_RANKS if pack else len(node_gpus)
    if pack and not by_topology:
        return max(gpus)
    return sum(gpus)


def plan(node_gpus: Sequence[int], pack: bool, by_topology: bool, ranks: int | None) -> World:
    """The world for `ranks` ranks (None: as many as the placement holds) on nodes with these GPUs."""
    world = ranks or capacity(node_gpus, pack, by_topology)
    gpus = [g for g in node_gpus if g]
    if not gpus:
        return World(world, 1)
    if pack and not by_topology:
        return World(world, world)
    return World(world, math.gcd(world, *gpus))
