"""`labctl try`'s training flags against the trainer's rule for steps an epoch.

The trainer warns that fewer than MIN_STEPS_PER_EPOCH steps an epoch cannot learn (the warm-up,
the lookahead every 5 steps and BatchNorm's running statistics need steps: trainer/loader.py). A
try on its generated set, on any number of machines it allows, must not train in that regime:
at 8 steps an epoch, 2 epochs on three machines ended at chance on the test set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli.try_local.dataset import GENERATED_IMAGES
from lab.testbed import ddp
from lab.testbed.layout import MAX_MACHINES
from trainer.loader import few_steps_warning


@pytest.mark.parametrize("machines", range(2, MAX_MACHINES + 1))
def test_a_try_on_the_generated_set_trains_enough_steps_an_epoch(machines: int) -> None:
    flags = ddp.small_run(Path("data"), Path("runs"), "try", 4, machines)
    batch = int(flags[flags.index("--batch-size") + 1])
    assert batch % machines == 0
    assert few_steps_warning(GENERATED_IMAGES[0], batch) is None
