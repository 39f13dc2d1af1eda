"""PNG figures: a run's learning curves and a sweep's accuracy against each hyperparameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: pods and CI have no display
import matplotlib.pyplot as plt


def curves(history: list[dict[str, Any]], out: Path) -> None:
    """Loss and accuracy per epoch, train and test."""
    epochs = [line["epoch"] for line in history]
    figure, (loss, accuracy) = plt.subplots(1, 2, figsize=(10, 4))
    loss.plot(epochs, [line["train_loss"] for line in history], marker="o", label="train")
    loss.plot(epochs, [line["test_loss"] for line in history], marker="o", label="test")
    loss.set(xlabel="epoch", ylabel="loss", title="Loss")
    accuracy.plot(epochs, [line["train_acc"] for line in history], marker="o", label="train")
    accuracy.plot(epochs, [line["test_acc"] for line in history], marker="o", label="test")
    accuracy.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    for axes in (loss, accuracy):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


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
