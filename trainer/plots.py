"""PNG figures: a run's learning curves and a sweep's accuracy against each hyperparameter."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: pods and CI have no display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from trainer.data import CLASSES


@dataclass(frozen=True)
class RunLabels:
    """What the learning curves' figure names: the run, its model and ranks, its target."""

    run: str
    model: str
    ranks: int
    target: float
    label_smoothing: float

    def title(self) -> str:
        return f"run {self.run}: {self.model} on {self.ranks} rank{'' if self.ranks == 1 else 's'}"


def curves(history: list[dict[str, Any]], out: Path, labels: RunLabels) -> None:
    """Loss (log scale) and accuracy per epoch, train and test, with the target accuracy."""
    figure = curves_figure(history, labels)
    figure.savefig(out, dpi=100)
    plt.close(figure)


def curves_figure(history: list[dict[str, Any]], labels: RunLabels) -> Figure:
    epochs = [line["epoch"] for line in history]
    target, label_smoothing = labels.target, labels.label_smoothing
    figure, (loss, accuracy) = plt.subplots(1, 2, figsize=(10, 4.4))
    figure.suptitle(labels.title())
    loss.plot(epochs, [line["train_loss"] for line in history], marker="o", label="train")
    # A run without per-epoch evaluation has no test figures: NaN leaves the test curve empty.
    loss.plot(epochs, [line.get("test_loss", math.nan) for line in history], marker="o", label="test")
    loss.set(xlabel="epoch", ylabel="loss", title="Loss", yscale="log")
    if label_smoothing:
        floor = smoothing_floor(label_smoothing, len(CLASSES))
        loss.axhline(floor, color="gray", linestyle=":", linewidth=1, label="train loss floor")
        figure.text(
            0.01,
            0.01,
            f"The train loss is taken against labels smoothed by {label_smoothing:g}: it cannot fall below"
            f" {floor:.2f} and can sit above the test loss, which uses the plain labels.",
            fontsize=8,
            color="dimgray",
        )
    accuracy.plot(epochs, [line["train_acc"] for line in history], marker="o", label="train")
    accuracy.plot(epochs, [line.get("test_acc", math.nan) for line in history], marker="o", label="test")
    accuracy.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {100 * target:g}%")
    accuracy.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    for axes in (loss, accuracy):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout(rect=(0, 0.04, 1, 1))  # room for the note at the bottom
    return figure


def smoothing_floor(label_smoothing: float, classes: int) -> float:
    """The least cross-entropy against smoothed labels: the entropy of the smoothed target."""
    right = 1 - label_smoothing + label_smoothing / classes
    wrong = label_smoothing / classes
    return -right * math.log(right) - (classes - 1) * wrong * math.log(wrong)


def sweep(rows: list[dict[str, Any]], parameters: list[str], out: Path) -> None:
    """One panel per hyperparameter: each run's best test accuracy against its value."""
    figure, axes = plt.subplots(1, len(parameters), figsize=(4 * len(parameters), 3.5), squeeze=False)
    for panel, name in zip(axes[0], parameters, strict=True):
        values = [row["hyperparameters"][name] for row in rows]
        numeric = all(isinstance(v, int | float) for v in values)
        positions = values if numeric else [str(v) for v in values]
        panel.scatter(positions, [row["best_test_acc"] for row in rows])
        if numeric and min(values) > 0 and max(values) / min(values) >= 20:
            panel.set_xscale("log")
        panel.set(xlabel=name, ylabel="best test accuracy")
        panel.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
