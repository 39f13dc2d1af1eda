"""The two networks and their recipes: airbench-class (default) and the DAWNBench ResNet-9.

Hyperparameters use one convention for both: SGD with Nesterov momentum on the loss averaged
over the global batch, `weight_decay` coupled as in `torch.optim.SGD`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from trainer.contract import AIRBENCH, RESNET9


@dataclass(frozen=True)
class Recipe:
    lr: float
    momentum: float
    weight_decay: float
    label_smoothing: float
    epochs: int
    bias_scale: float  # learning-rate multiplier of biases (BatchNorm and whitening)
    schedule: tuple[float, float, float]  # lr multiplier at the start, peak position (fraction), end
    lookahead: bool
    whiten_bias_epochs: int  # epochs the whitening layer's bias trains; 0: no whitening layer


# airbench94's recipe (lr 11.5, weight decay 0.0153 in its batch-normalised units) converted to
# the convention above at its batch size of 1024.
RECIPES = {
    AIRBENCH: Recipe(1.5, 0.85, 1.33e-3, 0.2, 10, 64.0, (0.2, 0.23, 0.07), True, 3),
    RESNET9: Recipe(0.4, 0.9, 5e-4, 0.2, 24, 1.0, (0.0, 5 / 24, 0.0), False, 0),
}


def _batch_norm(channels: int) -> nn.BatchNorm2d:
    # Frozen unit scale: the following convolution absorbs it, and the net trains faster without it.
    norm = nn.BatchNorm2d(channels, momentum=0.4, eps=1e-12)
    norm.weight.requires_grad = False
    return norm


class ConvGroup(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.MaxPool2d(2),
            _batch_norm(c_out),
            nn.GELU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            _batch_norm(c_out),
            nn.GELU(),
        )


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class Airbench(nn.Sequential):
    """2x2 patch-whitening stem, three conv groups (w, 4w, 4w), max-pool head: 2M parameters at w=64."""

    def __init__(self, width: int = 64, classes: int = 10) -> None:
        widths = (width, 4 * width, 4 * width)
        whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
        whiten.weight.requires_grad = False
        super().__init__(
            whiten,
            nn.GELU(),
            ConvGroup(24, widths[0]),
            ConvGroup(widths[0], widths[1]),
            ConvGroup(widths[1], widths[2]),
            nn.MaxPool2d(3),
            nn.Flatten(),
            nn.Linear(widths[2], classes, bias=False),
            Scale(1 / 9),
        )

    @property
    def whiten(self) -> nn.Conv2d:
        return self[0]

    @torch.no_grad()
    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the stem to whiten 2x2 patches of `images` (normalised), as +/- eigenvector pairs."""
        patches = images.double().unfold(2, 2, 1).unfold(3, 2, 1)
        patches = patches.transpose(1, 3).reshape(-1, 3, 2, 2).flatten(1)
        eigenvalues, eigenvectors = torch.linalg.eigh(torch.cov(patches.T))
        filters = (eigenvectors.T / torch.sqrt(eigenvalues + eps).unsqueeze(1)).view(12, 3, 2, 2)
        self.whiten.weight.copy_(torch.cat([filters, -filters]).float())


def _conv_bn_relu(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn_relu(channels, channels), _conv_bn_relu(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNet9(nn.Sequential):
    """The DAWNBench ResNet-9 of cifar10-fast (w, 2w, 4w, 8w channels): 6.6M parameters at w=64."""

    def __init__(self, width: int = 64, classes: int = 10) -> None:
        w = width
        super().__init__(
            _conv_bn_relu(3, w),
            _conv_bn_relu(w, 2 * w),
            nn.MaxPool2d(2),
            Residual(2 * w),
            _conv_bn_relu(2 * w, 4 * w),
            nn.MaxPool2d(2),
            _conv_bn_relu(4 * w, 8 * w),
            nn.MaxPool2d(2),
            Residual(8 * w),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
            nn.Linear(8 * w, classes, bias=False),
            Scale(0.125),
        )


def build(name: str, width: int, whitening_images: torch.Tensor) -> nn.Module:
    """The named network; airbench's stem is fitted to `whitening_images` (normalised, on CPU)."""
    if name == AIRBENCH:
        net = Airbench(width)
        net.init_whitening(whitening_images)
        return net
    if name == RESNET9:
        return ResNet9(width)
    raise ValueError(f"unknown model {name!r}; use airbench or resnet9")


def param_groups(net: nn.Module, recipe: Recipe, lr: float, weight_decay: float) -> list[dict]:
    """Weights, biases (`bias_scale` times the rate, the same decay) and the whitening bias, named."""
    whiten_bias = net.whiten.bias if isinstance(net, Airbench) else None
    params = [p for p in net.parameters() if p.requires_grad and p is not whiten_bias]
    bias_lr = lr * recipe.bias_scale
    bias_decay = weight_decay / recipe.bias_scale

    def group(name: str, members: list[torch.Tensor], rate: float, decay: float) -> dict:
        return {"name": name, "params": members, "lr": rate, "weight_decay": decay, "base_lr": rate}

    groups = [
        group("weights", [p for p in params if p.ndim >= 2], lr, weight_decay),
        group("biases", [p for p in params if p.ndim < 2], bias_lr, bias_decay),
    ]
    if whiten_bias is not None:
        groups.append(group("whiten_bias", [whiten_bias], bias_lr, bias_decay))
    return groups
