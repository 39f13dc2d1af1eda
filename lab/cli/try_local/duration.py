"""How long `labctl try` takes, said before it starts: rough figures of each step on an idle
2-core machine, and the range a shared machine's runs fall in."""

from __future__ import annotations

import math

from lab.testbed.layout import CACHE_ROOT

# Rough figures on an idle 2-core machine (docs/benchmarks/try.md), for the estimate said up front.
SECONDS = {"machines": 20, "first base tree": 60, "bootstrap": 50, "validation": 15, "teardown": 10}
TRAINING_IMAGES_PER_S = 500  # two ranks of the narrow network together
TRAINING_START_S = 15
# Runs on the shared 2-core machine took 0.75 to 1.4 times the estimate (docs/benchmarks/try.md:
# its median and slowest run, and a run of 2 min 55 s under load), so the range said up front is
# the estimate times these.
ESTIMATE_SPREAD = (0.75, 1.5)
# The machines SECONDS were measured with; the machines and their bootstrap share the same 2
# cores, so those steps grow with the machines' count.
MEASURED_MACHINES = 2
PER_MACHINE = {"machines", "bootstrap", "validation"}


def estimate(data_images: int, epochs: int, machines: int) -> int:
    """The run's seconds on an idle machine."""
    seconds = sum(
        v * machines // MEASURED_MACHINES if k in PER_MACHINE else v
        for k, v in SECONDS.items()
        if k != "first base tree"
    )
    if not any(CACHE_ROOT.glob("base-*")):
        seconds += SECONDS["first base tree"]
    return seconds + TRAINING_START_S + data_images * epochs // TRAINING_IMAGES_PER_S


def minutes_range(data_images: int, epochs: int, machines: int) -> tuple[float, float]:
    """The run's minutes, fastest and slowest, to the half minute, as said before it starts."""
    low, high = (estimate(data_images, epochs, machines) * factor / 60 for factor in ESTIMATE_SPREAD)
    return max(0.5, math.floor(low * 2) / 2), math.ceil(high * 2) / 2
