"""How a device holds the numbers of a run: the net's floating-point type and the loss scale.

On a GPU, airbench94's precision: the net's weights and activations in float16, BatchNorm's
parameters and statistics in float32, no autocast (the `airbench` package 0.1.8,
lib_airbench94.py, `make_net94`: `net.half()`, then `.float()` on every BatchNorm). Against
bfloat16 autocast over float32 weights it saves the weight casts of every forward and half the
weight traffic (docs/trainer.md, "Precision").

float16's smallest subnormal is 6e-8. The gradient of the batch-mean loss is 1/batch of the
summed one, and on the airbench net at batch 1024 most activation gradients of the mean fall
below it (measured in docs/trainer.md): so on a GPU the loss is summed over the global batch, as
airbench94 sums it (utils.py, `train`: `loss_fn(outputs, labels).sum()`), and SGD takes the rate
divided and the decay multiplied by that sum's count. Those steps are the batch-mean steps
exactly, so the recipe's rates keep their unit.

On a CPU: float32 throughout, the batch mean, no scale (float16 convolutions there are slow and
buy nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype  # the net's weights and activations; BatchNorm stays float32
    loss_scale: float  # the batch-mean loss is multiplied by this before the backward pass

    def sgd(self, lr: float, weight_decay: float) -> tuple[float, float]:
        """SGD's (rate, decay) that make a step on the scaled loss the recipe's step on the mean:
        torch.optim.SGD adds decay times the weight to the gradient, then steps by the rate."""
        return lr / self.loss_scale, weight_decay * self.loss_scale

    def recipe_lr(self, sgd_lr: float) -> float:
        """The recipe's rate for SGD's `sgd_lr` (what the metrics report)."""
        return sgd_lr * self.loss_scale

    def apply(self, net: nn.Module) -> nn.Module:
        net.to(self.dtype)
        for module in net.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.float()
        return net


def for_device(device: torch.device, global_batch: int) -> Precision:
    if device.type == "cuda":
        return Precision(torch.float16, float(global_batch))
    return Precision(torch.float32, 1.0)
