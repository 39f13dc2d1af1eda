"""A run's resolved hyperparameters and the hashes that tell whether two runs are the same."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.errors import TrainerError
from trainer.hyperparameters import MAX_EPOCHS, value


class ConfigurationError(TrainerError, ValueError):
    """Options that cannot train together; the message names them and the fix."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that changes the numbers a run produces (not where or on how many ranks it runs)."""

    model: str
    width: int
    epochs: int  # epochs the run reaches, the last perhaps partway: ceil(steps / steps an epoch)
    steps: int  # the budget: optimizer steps in all
    batch_size: int
    lr: float
    weight_decay: float
    momentum: float
    label_smoothing: float
    seed: int
    cutout: int
    tta: int
    accumulate: int
    compression: str
    batchnorm: str  # trainer.batchnorm: statistics over the global batch, or each rank's share
    train_images: int
    test_images: int
    trained_on: str  # contract.CIFAR10 or contract.GENERATED

    def hyperparameters(self) -> dict[str, Any]:
        return asdict(self)

    def hash(self) -> str:
        text = json.dumps(self.hyperparameters(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def budget(options: dict[str, Any], batch_size: int, train_images: int) -> tuple[int, int]:
    """(epochs, steps) of a run: `steps` as given, or whole `epochs`, or else the recipe's epochs,
    whose fraction ends partway through the last as airbench94 counts it (ceil(steps an epoch x
    epochs)); the epochs are those the steps reach."""
    epochs, steps = options.get("epochs"), options.get("steps")
    if epochs is not None and steps is not None:
        raise ConfigurationError(f"--epochs {epochs} and --steps {steps} both set the budget: give one")
    # The loader refuses a batch larger than the data; one step an epoch keeps this arithmetic whole.
    per_epoch = max(train_images // batch_size, 1)
    if steps is None:
        recipe = value("epochs", options["model"])
        steps = per_epoch * epochs if epochs is not None else math.ceil(per_epoch * recipe)
    reached = -(-int(steps) // per_epoch)
    if reached > MAX_EPOCHS:
        raise ConfigurationError(
            f"--steps {steps} is {reached} epochs of {per_epoch} steps, more than the {MAX_EPOCHS} a run may"
            f" take: give at most {MAX_EPOCHS * per_epoch}"
        )
    return reached, int(steps)


def resolve(options: dict[str, Any], train_images: int, test_images: int, trained_on: str) -> TrainConfig:
    """Fill the options left unset (None or absent) from trainer/hyperparameters.py's table: the
    model's recipe where the recipes differ."""
    model = options["model"]

    def pick(name: str) -> Any:
        given = options.get(name)
        return value(name, model) if given is None else given

    batch_size = int(pick("batch_size"))
    epochs, steps = budget(options, batch_size, train_images)
    return TrainConfig(
        model=model,
        width=pick("width"),
        epochs=epochs,
        steps=steps,
        batch_size=batch_size,
        lr=float(pick("lr")),
        weight_decay=float(pick("weight_decay")),
        momentum=float(pick("momentum")),
        label_smoothing=float(pick("label_smoothing")),
        seed=pick("seed"),
        cutout=pick("cutout"),
        tta=pick("tta"),
        accumulate=pick("accumulate"),
        compression=pick("compression"),
        batchnorm=pick("batchnorm"),
        train_images=train_images,
        test_images=test_images,
        trained_on=trained_on,
    )


def code_hash() -> str:
    """Hash of the trainer's source files, its sub-packages' too: which code produced a result."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
