"""The rules every trainer hyperparameter must satisfy: one place, read by the trainer's flags,
its sweep files and the lab's stack configuration, so a value is refused the same way wherever
it is written.

Standard library only: the Pulumi program and `labctl` import it on machines without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainer import inputs
from trainer.contract import MODELS

# CIFAR-10's training split; a global batch cannot be larger than the data it is drawn from.
CIFAR10_TRAIN_IMAGES = 50000
# CIFAR-10 images are 32x32: a cut-out square cannot be larger than the image.
IMAGE_SIDE = 32


class HyperparameterError(ValueError):
    """A value outside its rule; the message says what the rule allows and what was given."""


@dataclass(frozen=True)
class Rule:
    """A numeric hyperparameter: its type, its interval and the unit it is counted in."""

    kind: type[int] | type[float]
    low: float
    high: float | None = None  # None: no upper bound
    low_open: bool = False  # True: the value must be above `low`, not equal to it
    high_open: bool = False
    unit: str = ""

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a finite number"
        if self.high is None:
            span = f"{'>' if self.low_open else '>='} {_number(self.low)}"
        else:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            span = f"in {left}{_number(self.low)}, {_number(self.high)}{right}"
        return f"{noun} {span}" + (f" ({self.unit})" if self.unit else "")

    def check(self, value: Any) -> int | float:
        """`value` as the rule's type; HyperparameterError when it is of another type or outside."""
        number = self._typed(value)
        too_low = number <= self.low if self.low_open else number < self.low
        too_high = self.high is not None and (number >= self.high if self.high_open else number > self.high)
        if too_low or too_high:
            raise HyperparameterError(f"must be {self.describe()}, got {value!r}")
        return number

    def parse(self, text: str) -> int | float:
        """A command-line value; argparse shows the HyperparameterError as the flag's error."""
        try:
            return self.check(text)
        except HyperparameterError:
            raise HyperparameterError(f"must be {self.describe()}, got {text}") from None

    def bounds(self) -> dict[str, Any]:
        """The interval as pydantic Field keywords, so the stack file's fields carry the same rule."""
        limits: dict[str, Any] = {"gt" if self.low_open else "ge": self.low}
        if self.high is not None:
            limits["lt" if self.high_open else "le"] = self.high
        if self.kind is float:
            limits["allow_inf_nan"] = False
        return limits

    def _typed(self, value: Any) -> int | float:
        if isinstance(value, bool):
            raise HyperparameterError(f"must be {self.describe()}, got the boolean {value!r}")
        if isinstance(value, str):
            try:
                value = inputs.integer(value) if self.kind is int else inputs.number(value)
            except ValueError:
                raise HyperparameterError(f"must be {self.describe()}, got {value!r}") from None
        if self.kind is int:
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if not isinstance(value, int):
                raise HyperparameterError(f"must be {self.describe()}, got {value!r}")
            return value
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise HyperparameterError(f"must be {self.describe()}, got {value!r}")
        return float(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# The most epochs a run may ask for; the loader's first flip stream lies beyond it.
MAX_EPOCHS = 1000

# BatchNorm's statistics at several ranks (trainer/batchnorm.py): over the global batch, or over
# each rank's own share. The trainer's own choice: no other layer passes it, so not in the contract.
GLOBAL_BATCHNORM = "global"
RANK_BATCHNORM = "rank"
BATCHNORMS = (GLOBAL_BATCHNORM, RANK_BATCHNORM)

# Keyed by the trainer's option names (its flags without `--`, dashes as underscores).
RULES: dict[str, Rule] = {
    "lr": Rule(float, 0, 100, low_open=True, unit="peak learning rate"),
    "batch_size": Rule(
        int, 1, CIFAR10_TRAIN_IMAGES, unit="images per step over all ranks, CIFAR-10's training set at most"
    ),
    "epochs": Rule(int, 1, MAX_EPOCHS),
    "steps": Rule(
        int,
        1,
        MAX_EPOCHS * CIFAR10_TRAIN_IMAGES,
        unit="optimizer steps in all; the last epoch may end partway",
    ),
    "weight_decay": Rule(float, 0, 1, high_open=True),
    "momentum": Rule(float, 0, 1, high_open=True),
    "label_smoothing": Rule(float, 0, 1, high_open=True),
    # The loader seeds torch.Generator with seed * 1_000_003 + epoch, which must stay within
    # manual_seed's 64-bit range (pytorch/pytorch: torch/random.py, manual_seed's docstring).
    "seed": Rule(int, 0, 2**32 - 1),
    "cutout": Rule(int, 0, IMAGE_SIDE, unit="pixels; 0: none"),
    "width": Rule(int, 1, 1024, unit="channels of the first block"),
    "accumulate": Rule(int, 1, unit="micro-batches per rank and step"),
    "target_accuracy": Rule(float, 0, 1, low_open=True),
    "checkpoint_keep": Rule(int, 1, 100),
}


def check(name: str, value: Any) -> int | float | str:
    """`value` checked against the rule of hyperparameter `name` (model names against MODELS)."""
    if name == "model":
        if value not in MODELS:
            raise HyperparameterError(f"must be one of {', '.join(MODELS)}, got {value!r}")
        return str(value)
    return RULES[name].check(value)


def nearest_batch(batch_size: int, ranks: int) -> int:
    """The global batch nearest `batch_size` that splits evenly over `ranks` (the lower on a tie),
    within the batch's rule: what a message offers when `batch_size` does not divide."""
    lower = max(batch_size // ranks * ranks, ranks)
    upper = -(-batch_size // ranks) * ranks
    if upper > CIFAR10_TRAIN_IMAGES or batch_size - lower <= upper - batch_size:
        return lower
    return upper
