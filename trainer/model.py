"""The two networks: airbench-class (default) and the DAWNBench ResNet-9, each built with its
model's recipe from trainer/hyperparameters.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from trainer.contract import AIRBENCH, MODELS, RESNET9
from trainer.hyperparameters import fixed


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What a model trains with that no flag sets. The values, their units and where they come from
    are the table's in trainer/hyperparameters.py; a row this misses, or a field the table lacks,
    fails at import."""

    bias_scale: float
    schedule: tuple[float, float, float]
    lookahead: bool
    lookahead_every: int
    lookahead_decay: float
    translate: int
    eval_batch: int
    whiten_bias_epochs: int
    whiten_images: int
    whiten_eps: float
    norm_momentum: float
    norm_eps: float
    logit_scale: float


RECIPES = {model: Recipe(**fixed(model)) for model in MODELS}


def _batch_norm(channels: int, recipe: Recipe) -> nn.BatchNorm2d:
    # Frozen unit scale: the following convolution absorbs it, and the net trains faster without it.
    norm = nn.BatchNorm2d(channels, momentum=recipe.norm_momentum, eps=recipe.norm_eps)
    norm.weight.requires_grad = False
    return norm


def _conv(c_in: int, c_out: int) -> nn.Conv2d:
    """A 3x3 convolution that starts as the identity on its first `c_in` outputs (the rest keep
    torch's default draw), as airbench94's `Conv.reset_parameters` starts them."""
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[: min(c_in, c_out)])
    return conv


class ConvGroup(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, recipe: Recipe) -> None:
        super().__init__(
            _conv(c_in, c_out),
            nn.MaxPool2d(2),
            _batch_norm(c_out, recipe),
            nn.GELU(),
            _conv(c_out, c_out),
            _batch_norm(c_out, recipe),
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

    def __init__(self, width: int, classes: int = 10, recipe: Recipe | None = None) -> None:
        recipe = recipe or RECIPES[AIRBENCH]
        widths = (width, 4 * width, 4 * width)
        whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
        whiten.weight.requires_grad = False
        nn.init.zeros_(whiten.bias)
        super().__init__(
            whiten,
            nn.GELU(),
            ConvGroup(24, widths[0], recipe),
            ConvGroup(widths[0], widths[1], recipe),
            ConvGroup(widths[1], widths[2], recipe),
            nn.MaxPool2d(3),
            nn.Flatten(),
            nn.Linear(widths[2], classes, bias=False),
            Scale(recipe.logit_scale),
        )
        self.whiten_eps = recipe.whiten_eps

    @property
    def whiten(self) -> nn.Conv2d:
        return self[0]

    @torch.no_grad()
    def init_whitening(self, images: torch.Tensor) -> None:
        """Set the stem to whiten 2x2 patches of `images` (normalised, on the net's device), as
        +/- eigenvector pairs, in float64 on that device.

        The patches' second moment, uncentred, as airbench94 takes it (`get_whitening_parameters`):
        normalised pixels have a mean near zero, and the bias that follows learns any offset.
        """
        patches = images.double().unfold(2, 2, 1).unfold(3, 2, 1)
        patches = patches.transpose(1, 3).reshape(-1, 3, 2, 2).flatten(1)
        eigenvalues, eigenvectors = torch.linalg.eigh(patches.T @ patches / len(patches))
        filters = (eigenvectors.T / torch.sqrt(eigenvalues + self.whiten_eps).unsqueeze(1)).view(12, 3, 2, 2)
        self.whiten.weight.copy_(torch.cat([filters, -filters]).float())


def _conv_bn_relu(c_in: int, c_out: int, recipe: Recipe) -> nn.Sequential:
    norm = nn.BatchNorm2d(c_out, momentum=recipe.norm_momentum, eps=recipe.norm_eps)
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), norm, nn.ReLU())


class Residual(nn.Module):
    def __init__(self, channels: int, recipe: Recipe) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _conv_bn_relu(channels, channels, recipe), _conv_bn_relu(channels, channels, recipe)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNet9(nn.Sequential):
    """The DAWNBench ResNet-9 of cifar10-fast (w, 2w, 4w, 8w channels): 6.6M parameters at w=64."""

    def __init__(self, width: int, classes: int = 10) -> None:
        w, recipe = width, RECIPES[RESNET9]
        super().__init__(
            _conv_bn_relu(3, w, recipe),
            _conv_bn_relu(w, 2 * w, recipe),
            nn.MaxPool2d(2),
            Residual(2 * w, recipe),
            _conv_bn_relu(2 * w, 4 * w, recipe),
            nn.MaxPool2d(2),
            _conv_bn_relu(4 * w, 8 * w, recipe),
            nn.MaxPool2d(2),
            Residual(8 * w, recipe),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
            nn.Linear(8 * w, classes, bias=False),
            Scale(recipe.logit_scale),
        )


def build(name: str, width: int) -> nn.Module:
    """The named network, its weights drawn from torch's generator; airbench's stem is fitted to
    the data afterwards, on the device (`fit_to_data`)."""
    if name == AIRBENCH:
        return Airbench(width)
    if name == RESNET9:
        return ResNet9(width)
    raise ValueError(f"unknown model {name!r}; use airbench or resnet9")


def fit_to_data(net: nn.Module, images: torch.Tensor) -> None:
    """What a net takes from the training images before its first step: airbench's whitening
    stem, from the first `whiten_images` of `images` (normalised, on the net's device); nothing
    for ResNet-9."""
    if isinstance(net, Airbench):
        net.init_whitening(images[: RECIPES[AIRBENCH].whiten_images])


def param_groups(net: nn.Module, recipe: Recipe, lr: float, weight_decay: float) -> list[dict]:
    """Weights, BatchNorm biases (`bias_scale` times the rate, the same decay) and the whitening
    bias, named. The whitening bias trains at the weights' rate, as in airbench94 (its `bias_scaler`
    applies only to parameters named `norm`)."""
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
        groups.append(group("whiten_bias", [whiten_bias], lr, weight_decay))
    return groups
