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

from trainer.contract import CIFAR10
from trainer.data import CLASSES


@dataclass(frozen=True)
class RunLabels:
    """What the learning curves' figure names: the run, its model and ranks, its target, its data."""

    run: str
    model: str
    ranks: int
    target: float
    label_smoothing: float
    trained_on: str

    def title(self) -> str:
        ranks = f"{self.ranks} rank{'' if self.ranks == 1 else 's'}"
        return f"run {self.run}: {self.model} on {ranks}, trained on {self.trained_on}"


def curves(history: list[dict[str, Any]], out: Path, labels: RunLabels) -> None:
    """Loss (log scale) and accuracy per epoch, train and test, with the target accuracy.

    The PNG's own text fields (its Title and Description) name the data too, for whoever finds
    the file without its run folder.
    """
    figure = curves_figure(history, labels)
    figure.savefig(out, dpi=100, metadata={"Title": labels.title(), "Description": describe(labels)})
    plt.close(figure)


def describe(labels: RunLabels) -> str:
    """What the figure's accuracy measures against: CIFAR-10's target, or nothing on generated data."""
    if labels.trained_on == CIFAR10:
        target = f"{100 * labels.target:g}%"
        return f"Learning curves on CIFAR-10; the dashed line is the target test accuracy {target}."
    return (
        f"Learning curves on {labels.trained_on}: its accuracy says nothing about CIFAR-10, so no"
        " CIFAR-10 target is drawn."
    )


def curves_figure(history: list[dict[str, Any]], labels: RunLabels) -> Figure:
    # A partial last epoch (a step budget ending partway) sits at its fraction past the one before.
    epochs = [line["epoch"] - 1 + line.get("epoch_fraction", 1) for line in history]
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
    if labels.trained_on == CIFAR10:
        accuracy.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {100 * target:g}%")
        accuracy.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    else:
        # A CIFAR-10 target beaten on an easier generated set would read as a CIFAR-10 result.
        accuracy.set(
            xlabel="epoch", ylabel="accuracy", title="Accuracy on generated data (no CIFAR-10 target)"
        )
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


def sweep(rows: list[dict[str, Any]], parameters: list[str], out: Path, trained_on: str) -> None:
    """One panel per hyperparameter: each run's best test accuracy against its value; the title
    (and the PNG's Title field) says what the runs `trained_on`."""
    figure, axes = plt.subplots(1, len(parameters), figsize=(4 * len(parameters), 3.5), squeeze=False)
    figure.suptitle(trained_on[:1].upper() + trained_on[1:])
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
    figure.savefig(out, dpi=100, metadata={"Title": trained_on[:1].upper() + trained_on[1:]})
    plt.close(figure)
