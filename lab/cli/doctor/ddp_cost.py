"""What a measured link between the nodes means for DDP: gradient all-reduce time against compute.

Pure arithmetic so that the advice `labctl doctor` prints can be checked by hand (docs/scaling.md
walks through the same numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from lab.config import Compression, Model

# Bytes a rank all-reduces per parameter: GPU ranks train float16 weights, so their gradients
# are float16; CPU ranks float32 (trainer/precision.py; tests/cli/test_ddp_cost.py holds the two
# equal, this module stays free of torch so that labctl starts fast).
GRADIENT_BYTES = {True: 2, False: 4}  # by whether the ranks are GPUs
# Below this share of the compute time the all-reduce hides behind backward and barely costs anything.
CHEAP_RATIO = 0.25


@dataclass(frozen=True)
class ModelCost:
    parameters: int  # trained parameters at the default width: one gradient each
    cpu_images_per_second: float  # one rank on the 2-core development machines (docs/scaling.md)
    gpu_images_per_second: float  # one rank on a data-centre GPU


MODELS = {
    # The GPU figure is the trainer's own on an H200, the median of its side by side with
    # airbench94 (docs/benchmarks/trainer-gpu.md; tests/cli/test_ddp_cost.py holds the two equal).
    Model.AIRBENCH: ModelCost(parameters=1_971_352, cpu_images_per_second=260, gpu_images_per_second=223_999),
    # Not measured by this project on a GPU: cifar10-fast's 24 epochs of 50k images in 79 s on a V100.
    Model.RESNET9: ModelCost(parameters=6_573_120, cpu_images_per_second=90, gpu_images_per_second=15_000),
}


class Advice(StrEnum):
    SPREAD = "spread"  # the link keeps up: one rank per node
    COMPRESS = "compress"  # fp16/bf16 gradients (half of a CPU rank's bytes) make the link keep up
    PACK = "pack"  # the link cannot keep up, but one node holds every rank
    POWERSGD = Compression.POWERSGD.value  # the link cannot keep up and nothing packs: low-rank compression


def ring_allreduce_seconds(gradient_bytes: float, world_size: int, bits_per_second: float) -> float:
    """Time for a ring all-reduce: each rank sends and receives 2(n-1)/n of the gradient."""
    if world_size < 2:
        return 0.0
    moved = 2 * (world_size - 1) / world_size * gradient_bytes
    return moved * 8 / bits_per_second


@dataclass(frozen=True)
class DdpCost:
    gradient_bytes: int
    gpu: bool
    allreduce_seconds: float
    compute_seconds: float  # forward and backward of one rank's share of the global batch
    speedup: float  # n ranks against one, with no overlap of communication and compute
    advice: Advice

    @property
    def ratio(self) -> float:
        return self.allreduce_seconds / self.compute_seconds

    def explain(self) -> str:
        kind = "float16" if self.gpu else "float32"
        return (
            f"{self.gradient_bytes / 1e6:.1f} MB of {kind} gradients all-reduce in"
            f" {self.allreduce_seconds * 1e3:.1f} ms against {self.compute_seconds * 1e3:.1f} ms of compute"
            f" per step; expected speed-up over one rank x{self.speedup:.2f}"
        )


def ddp_cost(
    model: Model, world_size: int, global_batch: int, bits_per_second: float, gpu: bool, can_pack: bool
) -> DdpCost:
    """All-reduce against compute per step for `model` across `world_size` ranks on this link."""
    cost = MODELS[model]
    per_rank = cost.gpu_images_per_second if gpu else cost.cpu_images_per_second
    gradient_bytes = cost.parameters * GRADIENT_BYTES[gpu]
    allreduce = ring_allreduce_seconds(gradient_bytes, world_size, bits_per_second)
    compute = global_batch / world_size / per_rank
    speedup = (global_batch / per_rank) / (compute + allreduce)
    advice = _advice(allreduce / compute, can_pack, halvable=not gpu)
    return DdpCost(gradient_bytes, gpu, allreduce, compute, speedup, advice)


def _advice(ratio: float, can_pack: bool, halvable: bool) -> Advice:
    if ratio <= CHEAP_RATIO:
        return Advice.SPREAD
    if halvable and ratio / 2 <= CHEAP_RATIO:
        return Advice.COMPRESS
    return Advice.PACK if can_pack else Advice.POWERSGD


ADVICE_TEXT = {
    Advice.SPREAD: "placement: spread is right for this link",
    Advice.COMPRESS: "set trainer.compression: bf16 (or fp16) to halve the gradient bytes",
    Advice.PACK: "set trainer.placement: pack to keep every rank on one node",
    Advice.POWERSGD: "set trainer.compression: powersgd or use a faster link (two nodes may lose to one)",
}
