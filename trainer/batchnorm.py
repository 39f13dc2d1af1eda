"""BatchNorm over the global batch, whatever the number of ranks.

Each of N ranks holds 1/N of the global batch. torch's BatchNorm2d normalises over what it is
given: at N ranks each rank would normalise over its own 1024/N images, keep running statistics of
its own, and the net evaluated (rank 0's) would not be the net one rank trains on the whole batch.

`GlobalBatchNorm` all-reduces each layer's per-channel sum and sum of squares (one collective of
2 x channels numbers per layer and forward; autograd takes the backward pass through the same
all-reduce), so every rank normalises over the global batch and updates the same running
statistics: the outputs, statistics and gradients of one rank with the whole batch, to float
rounding (tests/trainer/test_batchnorm_ranks.py). With one rank it is torch's BatchNorm2d.
PyTorch's own SyncBatchNorm does this with CUDA kernels only
(`torch.batch_norm_stats` has no CPU kernel), so the trainer keeps one module for every device.

The sums are float32 whatever the activations' type. Their variance, E[x^2] - E[x]^2, loses
about mean^2 / variance units of float32 rounding: at most about 10 on airbench's layers
(measured at initialisation and in the first steps), so its relative error stays near 1e-6.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class _Summed(torch.autograd.Function):
    """The sum of a tensor over the ranks; its gradient is the sum of the ranks' gradients (each
    rank's loss reaches every rank's inputs through the statistics they share)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        summed = tensor.clone()
        dist.all_reduce(summed)
        return summed

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.clone()
        dist.all_reduce(summed)
        return summed


class GlobalBatchNorm(nn.BatchNorm2d):
    """torch's BatchNorm2d, with the batch statistics taken over every rank's images in training."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One rank holds the global batch: torch's kernel, without the sums' extra passes and
        # all-reduces (on an H200 they made a step 2.8 times longer in a group of one).
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        assert self.momentum is not None and self.running_mean is not None and self.running_var is not None
        count = x.numel() // x.size(1) * dist.get_world_size()
        floats = x.float()
        moments = _Summed.apply(torch.cat([floats.sum((0, 2, 3)), floats.square().sum((0, 2, 3))])) / count
        mean, square = moments.chunk(2)
        variance = (square - mean * mean).clamp_min(0)
        with torch.no_grad():
            # torch's update: the unbiased variance, the newest batch weighted by the momentum.
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(variance * (count / (count - 1)), self.momentum)
            if self.num_batches_tracked is not None:
                self.num_batches_tracked.add_(1)
        scale = torch.rsqrt(variance + self.eps)
        if self.weight is not None:
            scale = scale * self.weight
        shift = -mean * scale
        if self.bias is not None:
            shift = shift + self.bias
        return (floats * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)).to(x.dtype)


def globalise(net: nn.Module) -> nn.Module:
    """`net` with every BatchNorm2d a GlobalBatchNorm holding the same parameters and buffers."""
    for name, child in net.named_children():
        if type(child) is nn.BatchNorm2d:
            replaced = GlobalBatchNorm(
                child.num_features, child.eps, child.momentum, child.affine, child.track_running_stats
            )
            # The same tensors, not copies: their requires_grad flags (airbench's frozen scale) stay.
            replaced.weight, replaced.bias = child.weight, child.bias
            replaced.running_mean, replaced.running_var = child.running_mean, child.running_var
            replaced.num_batches_tracked = child.num_batches_tracked
            setattr(net, name, replaced)
        else:
            globalise(child)
    return net
