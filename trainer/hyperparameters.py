"""The recipe: every hyperparameter of a run in one table, with its value (one, or one a model),
its unit, the rule a given value is held to, and what it sets. The trainer's flags and sweep files,
its networks (trainer/model.py) and the lab's stack configuration (lab/config/workload.py) all
read it, so a value is written once and refused the same way wherever it is given.

Standard library only: the Pulumi program and `labctl` import it on machines without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainer import inputs
from trainer.contract import AIRBENCH, COMPRESSIONS, MODELS, NO_COMPRESSION, RESNET9

# CIFAR-10's training split; a global batch cannot be larger than the data it is drawn from.
CIFAR10_TRAIN_IMAGES = 50000
# CIFAR-10 images are 32x32: a cut-out square cannot be larger than the image.
IMAGE_SIDE = 32
# The most epochs a run may ask for; the loader's first flip stream lies beyond it.
MAX_EPOCHS = 1000

# BatchNorm's statistics at several ranks (trainer/batchnorm.py): over the global batch, or over
# each rank's own share. The trainer's own choice: no other layer passes it, so not in the contract.
GLOBAL_BATCHNORM = "global"
RANK_BATCHNORM = "rank"
BATCHNORMS = (GLOBAL_BATCHNORM, RANK_BATCHNORM)


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
            raise HyperparameterError(f"must be {self.describe()}, got {inputs.excerpt(text)}") from None

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


@dataclass(frozen=True)
class Choice:
    """A hyperparameter a flag sets to one of a few names."""

    options: tuple[str, ...]

    def describe(self) -> str:
        return f"one of {', '.join(self.options)}"

    def check(self, value: Any) -> str:
        if value not in self.options:
            raise HyperparameterError(f"must be {self.describe()}, got {value!r}")
        return str(value)


@dataclass(frozen=True)
class Fixed:
    """A value of the recipe that no flag sets: only its unit to say."""

    unit: str = ""


Value = int | float | str | bool | tuple[float, float, float] | None


@dataclass(frozen=True)
class Hyperparameter:
    """A row of the table: the value a run takes unless one is given (a mapping from model to value
    where the recipes differ; None: no value unless given), the rule a given one is held to with its
    unit, and what it sets, in words that serve a flag's help and a stack key's description."""

    value: Value | dict[str, Value]
    rule: Rule | Choice | Fixed
    about: str

    def for_model(self, model: str) -> Value:
        return self.value[model] if isinstance(self.value, dict) else self.value

    @property
    def common(self) -> Value:
        """The value whatever the model, which a flag and a stack key default to; None where the
        recipes differ, for the run to take its model's."""
        return None if isinstance(self.value, dict) else self.value

    @property
    def unit(self) -> str:
        return "" if isinstance(self.rule, Choice) else self.rule.unit

    def default(self) -> str:
        """The value as a reader is told it."""
        if isinstance(self.value, dict):
            each = ", ".join(f"{model} {value}" for model, value in self.value.items())
            return f"the model's recipe ({each})"
        return str(self.value)

    def help(self) -> str:
        """The flag's help: what it sets, in which unit, and its default where it has one."""
        unit = f" ({self.unit})" if self.unit else ""
        default = "" if self.value is None else f"; default: {self.default()}"
        return f"{self.about}{unit}{default}"

    def description(self) -> str:
        """The stack key's description, where the generated reference's columns give the type, the
        interval and a default shared by the models; the recipes' own values are said here."""
        unit = f" ({self.unit})" if self.unit else ""
        recipes = f"; left out: {self.default()}" if isinstance(self.value, dict) else ""
        return f"{self.about[0].upper()}{self.about[1:]}{unit}{recipes}."


# Every hyperparameter, keyed by the trainer's option name (its flag without `--`, dashes as
# underscores): the value, the rule with its unit, what it sets. Both networks follow one
# convention: SGD with Nesterov momentum on the loss averaged over the global batch, the weight
# decay coupled as in torch.optim.SGD. ResNet-9's values are cifar10-fast's, already in it.
HYPERPARAMETERS: dict[str, Hyperparameter] = {
    # What trains, and how long: whole epochs or optimizer steps, one of the two.
    "model": Hyperparameter(
        AIRBENCH, Choice(MODELS), "the network; its recipe is in trainer/hyperparameters.py"
    ),
    "width": Hyperparameter(64, Rule(int, 1, 1024, unit="channels"), "width of the first block"),
    # A flag gives whole epochs; a recipe's fraction ends partway through the last, as airbench94
    # counts its 9.9 (`train_epochs`): ceil(steps an epoch x 9.9), 476 steps of 1024 on 50,000 images.
    "epochs": Hyperparameter(
        {AIRBENCH: 9.9, RESNET9: 24}, Rule(int, 1, MAX_EPOCHS), "whole passes over the training split"
    ),
    "steps": Hyperparameter(
        None,
        Rule(int, 1, MAX_EPOCHS * CIFAR10_TRAIN_IMAGES),
        "optimizer steps in all, instead of epochs; the last epoch may end partway",
    ),
    "batch_size": Hyperparameter(
        1024, Rule(int, 1, CIFAR10_TRAIN_IMAGES, unit="images a step"), "global batch, whatever the ranks"
    ),
    "accumulate": Hyperparameter(1, Rule(int, 1), "micro-batches a rank's share of a step splits into"),
    # The loader seeds torch.Generator with seed * 1_000_003 + epoch, which must stay within
    # manual_seed's 64-bit range (pytorch/pytorch: torch/random.py, manual_seed's docstring).
    "seed": Hyperparameter(0, Rule(int, 0, 2**32 - 1), "seed of the data order, augmentation and init"),
    # airbench's rate and decay are airbench94's (11.5 and 0.0153 per 1024 examples, at momentum
    # 0.85 and its batch of 1024) through from_airbench94, to three significant figures.
    "lr": Hyperparameter(
        {AIRBENCH: 1.5, RESNET9: 0.4},
        Rule(float, 0, 100, low_open=True, unit="per step"),
        "peak rate of SGD on the batch-mean loss",
    ),
    "momentum": Hyperparameter(
        {AIRBENCH: 0.85, RESNET9: 0.9}, Rule(float, 0, 1, high_open=True), "Nesterov momentum of SGD"
    ),
    "weight_decay": Hyperparameter(
        {AIRBENCH: 1.33e-3, RESNET9: 5e-4},
        Rule(float, 0, 1, high_open=True),
        "SGD's coupled decay: each step shrinks the weights by lr x weight_decay",
    ),
    "label_smoothing": Hyperparameter(
        0.2, Rule(float, 0, 1, high_open=True), "probability mass spread over the other classes"
    ),
    "bias_scale": Hyperparameter(
        {AIRBENCH: 64.0, RESNET9: 1.0},
        Fixed(),
        "rate multiplier of the biases (BatchNorm's and the whitening's); their decay is divided by it",
    ),
    "schedule": Hyperparameter(
        {AIRBENCH: (0.2, 0.23, 0.07), RESNET9: (0.0, 5 / 24, 0.0)},
        Fixed("x lr, fraction of the steps, x lr"),
        "rate multiplier at the start, where it peaks at 1, at the end",
    ),
    "lookahead": Hyperparameter(
        {AIRBENCH: True, RESNET9: False}, Fixed(), "average the weights every few steps (numerics.Lookahead)"
    ),
    "lookahead_every": Hyperparameter(5, Fixed("steps"), "how often the lookahead averages"),
    "lookahead_decay": Hyperparameter(
        0.95, Fixed(), "decay of the lookahead average a step, raised to lookahead_every"
    ),
    # What the images go through, in training and in evaluation.
    "translate": Hyperparameter(
        2,
        Fixed("pixels"),
        "how far an image moves each way at most (reflection padding), in training and TTA",
    ),
    "cutout": Hyperparameter(
        0, Rule(int, 0, IMAGE_SIDE, unit="pixels"), "side of the cut-out square, 0 for none"
    ),
    "tta": Hyperparameter(
        2,
        Rule(int, 0, 2),
        "test-time augmentation of the final evaluation: 0 none, 1 mirror, 2 mirror and one-pixel shifts",
    ),
    "eval_batch": Hyperparameter(
        1000, Fixed("test images"), "images an evaluation forward takes: memory, not the figures"
    ),
    # The networks' own layers.
    "whiten_bias_epochs": Hyperparameter(
        {AIRBENCH: 3, RESNET9: 0},
        Fixed("epochs"),
        "how long the whitening layer's bias trains; 0: no whitening layer",
    ),
    "whiten_images": Hyperparameter(
        5000, Fixed("images"), "training images whose 2x2 patches fit the whitening layer"
    ),
    "whiten_eps": Hyperparameter(
        5e-4, Fixed("normalised pixels squared"), "added to the patch covariance's eigenvalues"
    ),
    # airbench94's batchnorm_momentum 0.6 is torch's 1 - 0.6; ResNet-9 keeps torch's defaults, as
    # cifar10-fast does.
    "norm_momentum": Hyperparameter(
        {AIRBENCH: 0.4, RESNET9: 0.1},
        Fixed(),
        "BatchNorm's momentum, as torch counts it: the newest batch's weight in the running statistics",
    ),
    "norm_eps": Hyperparameter(
        {AIRBENCH: 1e-12, RESNET9: 1e-5},
        Fixed("normalised activations squared"),
        "added to BatchNorm's variance",
    ),
    "logit_scale": Hyperparameter(
        {AIRBENCH: 1 / 9, RESNET9: 0.125}, Fixed(), "the last layer's output multiplier"
    ),
    # How the ranks share a step; the numbers change with it.
    "batchnorm": Hyperparameter(
        GLOBAL_BATCHNORM,
        Choice(BATCHNORMS),
        "BatchNorm's statistics over the global batch or each rank's share",
    ),
    "compression": Hyperparameter(
        NO_COMPRESSION, Choice(COMPRESSIONS), "gradient compression for slow links"
    ),
    # What a run records, not how it trains.
    "target_accuracy": Hyperparameter(
        0.94, Rule(float, 0, 1, low_open=True), "test accuracy whose time is reported"
    ),
    "checkpoint_keep": Hyperparameter(3, Rule(int, 1, 100), "checkpoints kept per run"),
}


def value(name: str, model: str) -> Any:
    """What hyperparameter `name` is for `model` when no flag gives it."""
    return HYPERPARAMETERS[name].for_model(model)


def fixed(model: str) -> dict[str, Any]:
    """`model`'s values that no flag sets, by name: what its network and numerics are built with."""
    return {
        name: row.for_model(model) for name, row in HYPERPARAMETERS.items() if isinstance(row.rule, Fixed)
    }


def check(name: str, value: Any) -> int | float | str:
    """`value` checked against the rule of hyperparameter `name`."""
    rule = HYPERPARAMETERS[name].rule
    if isinstance(rule, Fixed):
        raise HyperparameterError(f"is the recipe's own: no flag, sweep or stack key sets {name}")
    return rule.check(value)


def from_airbench94(lr: float, weight_decay: float, momentum: float, batch_size: int) -> tuple[float, float]:
    """airbench94's (lr, weight decay) in this table's convention, at a global batch of `batch_size`.

    airbench94 (KellerJordan/cifar10-airbench, airbench94.py, `hyp['opt']` and `main`) states both
    per 1024 examples: it sums the loss over the batch, gives SGD the rate `lr / s` with
    s = 1024 * (1 + 1 / (1 - momentum)) (the step Nesterov momentum takes on a constant gradient,
    per 1024 examples), and SGD the decay `weight_decay * batch_size / lr`. On the batch-mean loss
    the gradient is 1/batch_size of the summed one, so the same steps take the rate
    lr * batch_size / s and the decay weight_decay / lr, whatever the batch.
    """
    steps_per_gradient = 1024 * (1 + 1 / (1 - momentum))
    return lr * batch_size / steps_per_gradient, weight_decay / lr


def nearest_batch(batch_size: int, ranks: int) -> int:
    """The global batch nearest `batch_size` that splits evenly over `ranks` (the lower on a tie),
    within the batch's rule: what a message offers when `batch_size` does not divide."""
    lower = max(batch_size // ranks * ranks, ranks)
    upper = -(-batch_size // ranks) * ranks
    if upper > CIFAR10_TRAIN_IMAGES or batch_size - lower <= upper - batch_size:
        return lower
    return upper
