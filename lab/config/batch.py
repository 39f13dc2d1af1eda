"""The training run's global batch, for any world size.

A batch the stack sets must split evenly over the ranks (the loader refuses it otherwise and names
the nearest that does). Left out, the trainer's default (trainer/hyperparameters.py) is used when
it splits, and otherwise the lab trains with the nearest batch that does and says so: a lab of 3
nodes with 2 GPUs each trains its 6 ranks on 1026, not airbench94's 1024, without the stack having
to name a batch.
"""

from __future__ import annotations

from trainer.hyperparameters import nearest_batch


def global_batch(batch_size: int, set_by_stack: bool, ranks: int) -> int:
    """The batch the run trains with: the stack's as it is, else `batch_size` (the default) or the
    nearest batch that splits evenly over `ranks`."""
    if set_by_stack or batch_size % ranks == 0:
        return batch_size
    return nearest_batch(batch_size, ranks)


def chosen_note(batch_size: int, set_by_stack: bool, ranks: int) -> str | None:
    """What the operator is told when the lab chose the batch; None when it is the stack's or the default."""
    chosen = global_batch(batch_size, set_by_stack, ranks)
    if chosen == batch_size:
        return None
    return (
        f"k8scifar:trainer.batchSize is not set and the default {batch_size} does not split evenly"
        f" over {ranks} ranks: the run trains with {chosen}, the nearest batch that does (the"
        " learning rate follows the recipe for it); set batchSize to choose another"
    )
