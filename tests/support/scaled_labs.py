"""Labs larger than two machines: the reference GPU stack grown to more nodes and GPUs, and the
program's run for each, recorded under the engine's mocks."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from lab.config import read_stack_values, stack_file
from tests.support.program import ProgramRun, run_program


def grown_lab(machines: int, gpus: int, **trainer: Any) -> dict[str, Any]:
    """The reference GPU stack grown to `machines` machines of `gpus` GPUs, replicas and batch left out."""
    values = copy.deepcopy(read_stack_values(stack_file("example-gpu")))
    values["nodes"] = [
        {
            "name": f"gpu-{i}",
            "address": f"192.168.50.{11 + i}",
            "user": "ubuntu",
            "role": "server" if i == 0 else "agent",
            "gpus": gpus,
        }
        for i in range(machines)
    ]
    left_out = ("replicas", "batchSize")
    values["trainer"] = {**{k: v for k, v in values["trainer"].items() if k not in left_out}, **trainer}
    return values


SHAPES = {
    # The recipe's 1024 does not split over six ranks: the lab trains them on 1026 (lab.config.batch).
    "3x2": grown_lab(3, 2),
    "4x8": grown_lab(4, 8),
    "4x8-pack": grown_lab(4, 8, placement="pack", replicas=16),
}


@cache
def scaled_run(shape: str) -> ProgramRun:
    return run_program("example-gpu", SHAPES[shape])
