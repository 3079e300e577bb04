"""DreamerV3's convolutional image encoder and decoder (TorchRL's ``DreamerV3ImageEncoder`` /
``DreamerV3ImageDecoder``).

The encoder halves the resolution at each stage (stride-2 convolution, RMS norm over channels,
SiLU) and flattens the last map; images in ``uint8`` are scaled to [0, 1], and every image is
shifted to [-0.5, 0.5]. The decoder mirrors it: a (block-)linear projection to the smallest map,
then stride-2 transposed convolutions back to the image, whose last layer has no norm and adds 0.5
(the scale of images divided by 255). Convolutions start from DreamerV3's truncated normal
(``std = 1.1368 / sqrt(fan_in)``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .dreamer_layers import BlockLinear, RMSNorm, dreamer_v3_init

__all__ = ["DreamerV3ImageDecoder", "DreamerV3ImageEncoder"]


def _conv_init(module: nn.Module) -> None:
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        fan_in = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
        std = 1.1368 / fan_in**0.5
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


class ChannelRMSNorm(RMSNorm):
    """:class:`RMSNorm` over the channels of ``[..., C, H, W]`` maps."""

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return super().forward(value.movedim(-3, -1)).movedim(-1, -3)


def _check_layout(owner: str, kernel_size: int, mults: Sequence[int]) -> None:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"{owner}: kernel_size must be a positive odd int, got {kernel_size!r}.")
    if not mults:
        raise ValueError(f"{owner}: mults needs at least one stage.")


class DreamerV3ImageEncoder(nn.Module):
    """Images ``[*B, C, H, W]`` (``uint8`` or floats in [0, 1]) -> features ``[*B, output_features]``.

    Args:
        in_channels: the image's channels.
        depth: the base width; stage ``i`` has ``depth * mults[i]`` channels.
        mults: one multiplier per stage (each halves the resolution, rounding up).
        kernel_size: an odd kernel size.
        norm_eps: the RMS norms' epsilon.
        device: where the parameters are created.

    Examples:
        >>> encoder = DreamerV3ImageEncoder(depth=8, mults=(1, 2))
        >>> encoder(torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)).shape
        torch.Size([4, 256])
        >>> encoder.output_features((3, 16, 16))
        256
    """

    def __init__(
        self,
        in_channels: int = 3,
        depth: int = 64,
        mults: tuple[int, ...] = (2, 3, 4, 4),
        kernel_size: int = 5,
        norm_eps: float = 1e-4,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        _check_layout("DreamerV3ImageEncoder", kernel_size, mults)
        layers: list = []
        channels = in_channels
        for mult in mults:
            conv = nn.Conv2d(channels, depth * mult, kernel_size, stride=2, padding=kernel_size // 2, device=device)
            layers += [conv, ChannelRMSNorm(depth * mult, norm_eps, device), nn.SiLU()]
            channels = depth * mult
        self.layers = nn.Sequential(*layers)
        self.layers.apply(_conv_init)
        self.out_channels, self.num_stages = channels, len(mults)

    def output_features(self, image_shape: tuple[int, int, int]) -> int:
        """The number of features for images of shape ``(C, H, W)``."""
        _, height, width = image_shape
        for _ in range(self.num_stages):
            height, width = math.ceil(height / 2), math.ceil(width / 2)
        return self.out_channels * height * width

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if not image.is_floating_point():
            image = image.float() / 255.0
        batch = image.shape[:-3]
        features = self.layers((image - 0.5).reshape(-1, *image.shape[-3:]))
        return features.reshape(*batch, -1)


class DreamerV3ImageDecoder(nn.Module):
    """Features ``[*B, in_features]`` (several inputs are concatenated) -> images ``[*B, C, H, W]``.

    Args:
        in_features: the input size (e.g. the latent state and the belief).
        image_shape: ``(C, H, W)``, with ``H`` and ``W`` divisible by ``2 ** len(mults)``.
        depth / mults: the encoder's, mirrored.
        kernel_size: an odd kernel size.
        num_blocks: blocks of the input projection (1: a dense linear layer).
        norm_eps: the RMS norms' epsilon.
        device: where the parameters are created.

    Examples:
        >>> decoder = DreamerV3ImageDecoder(12, image_shape=(3, 16, 16), depth=8, mults=(1, 2), num_blocks=2)
        >>> decoder(torch.randn(4, 8), torch.randn(4, 4)).shape
        torch.Size([4, 3, 16, 16])
    """

    def __init__(
        self,
        in_features: int,
        image_shape: tuple[int, int, int] = (3, 64, 64),
        depth: int = 64,
        mults: tuple[int, ...] = (2, 3, 4, 4),
        kernel_size: int = 5,
        num_blocks: int = 8,
        norm_eps: float = 1e-4,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        owner = "DreamerV3ImageDecoder"
        _check_layout(owner, kernel_size, mults)
        channels, height, width = image_shape
        factor = 2 ** len(mults)
        if height % factor or width % factor:
            raise ValueError(
                f"{owner}: the image's height and width {tuple(image_shape[1:])} must be divisible by 2 ** len(mults) "
                f"= {factor}."
            )
        self.initial_shape = (depth * mults[-1], height // factor, width // factor)
        size = math.prod(self.initial_shape)
        if num_blocks > 1:
            self.projection: nn.Module = BlockLinear(in_features, size, num_blocks, device=device)
        else:
            self.projection = nn.Linear(in_features, size, device=device)
            dreamer_v3_init(self.projection)
        self.projection_norm = ChannelRMSNorm(self.initial_shape[0], norm_eps, device)
        layers: list = []
        width_in = self.initial_shape[0]
        for stage in reversed(range(len(mults))):
            out = channels if stage == 0 else depth * mults[stage - 1]
            layers.append(
                nn.ConvTranspose2d(
                    width_in, out, kernel_size, stride=2, padding=kernel_size // 2, output_padding=1, device=device
                )
            )
            if stage:
                layers += [ChannelRMSNorm(out, norm_eps, device), nn.SiLU()]
            width_in = out
        self.layers = nn.Sequential(*layers)
        self.layers.apply(_conv_init)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        value = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        batch = value.shape[:-1]
        hidden = self.projection(value.reshape(-1, value.shape[-1])).reshape(-1, *self.initial_shape)
        image = self.layers(F.silu(self.projection_norm(hidden))) + 0.5
        return image.reshape(*batch, *image.shape[-3:])
