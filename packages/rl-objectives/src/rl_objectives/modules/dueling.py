"""Dueling Q-networks (Wang et al. 2016, "Dueling Network Architectures for Deep RL"): a shared trunk,
a state-value head ``V`` and an advantage head ``A``, combined as ``Q = V + A - mean(A)``.

:class:`DuelingMlpDQNet` has an :class:`~rl_objectives.modules.MLP` trunk, :class:`DuelingCnnDQNet` a
:class:`~rl_objectives.modules.ConvNet` one; names, arguments and defaults follow ``torchrl.modules``
(0.14). The first layer of the trunk and of each head is lazy unless ``in_features`` is given in
the kwargs: run the network once (e.g. on a fake observation) before handing it to a loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .models import MLP, ConvNet

__all__ = ["DuelingCnnDQNet", "DuelingMlpDQNet"]

_HEAD_KWARGS: dict[str, Any] = {"depth": 1, "activation_class": nn.ELU, "num_cells": 512, "bias_last_layer": True}


class _Dueling(nn.Module):
    """``features`` then the ``value`` and ``advantage`` heads, combined as ``V + A - mean(A)``."""

    features: nn.Module
    advantage: nn.Module
    value: nn.Module

    def _build_heads(self, out_features: Any, out_features_value: int, mlp_kwargs: dict | None, device: Any) -> None:
        kwargs = {**_HEAD_KWARGS, **dict(mlp_kwargs or {})}
        for reserved in ("out_features", "device"):
            if reserved in kwargs:
                raise ValueError(f"{type(self).__name__}: {reserved!r} is set by the network, not by the head kwargs.")
        self.out_features = out_features
        self.out_features_value = out_features_value
        self.advantage = MLP(out_features=out_features, device=device, **kwargs)
        self.value = MLP(out_features=out_features_value, device=device, **kwargs)
        # biases start at zero, as TorchRL's (a lazy layer is initialised at its first call instead)
        with torch.no_grad():
            for layer in self.modules():
                bias = getattr(layer, "bias", None)
                if isinstance(layer, (nn.Linear, nn.Conv2d)) and isinstance(bias, nn.Parameter) and not is_lazy(bias):
                    bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.features(x)
        advantage = self.advantage(hidden)
        value = self.value(hidden)
        return value + advantage - advantage.mean(dim=-1, keepdim=True)


class DuelingMlpDQNet(_Dueling):
    """A dueling Q-network on an MLP trunk: ``Q(s, .) = V(s) + A(s, .) - mean(A(s, .))``.

    Args:
        out_features: number of actions (the advantage head's width; an int or a shape whose last dim
            the mean runs over).
        out_features_value: the value head's width (default 1, broadcast over the actions).
        mlp_kwargs_feature: :class:`~rl_objectives.modules.MLP` kwargs of the trunk; default
            ``num_cells=[256, 256], out_features=256, activation_class=nn.ELU, activate_last_layer=True``.
        mlp_kwargs_output: MLP kwargs of both heads; default ``depth=1, activation_class=nn.ELU,
            num_cells=512, bias_last_layer=True``.
        device: where the parameters are created.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import DuelingMlpDQNet
        >>> net = DuelingMlpDQNet(4, mlp_kwargs_feature={"num_cells": [16], "out_features": 8},
        ...                       mlp_kwargs_output={"num_cells": 8})
        >>> q = net(torch.randn(5, 3))
        >>> q.shape
        torch.Size([5, 4])
        >>> h = net.features(torch.zeros(1, 3))
        >>> torch.allclose(net(torch.zeros(1, 3)), net.value(h) + net.advantage(h) - net.advantage(h).mean(-1, keepdim=True))
        True
    """

    def __init__(
        self,
        out_features: int | torch.Size,
        out_features_value: int = 1,
        mlp_kwargs_feature: dict | None = None,
        mlp_kwargs_output: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        feature_kwargs: dict[str, Any] = {
            "num_cells": [256, 256],
            "out_features": 256,
            "activation_class": nn.ELU,
            "activate_last_layer": True,
            **dict(mlp_kwargs_feature or {}),
        }
        self.features = MLP(device=device, **feature_kwargs)
        self._build_heads(out_features, out_features_value, mlp_kwargs_output, device)


class DuelingCnnDQNet(_Dueling):
    """A dueling Q-network on a convolutional trunk: ``Q(s, .) = V(s) + A(s, .) - mean(A(s, .))``.

    Args:
        out_features: number of actions (the advantage head's width).
        out_features_value: the value head's width (default 1, broadcast over the actions).
        cnn_kwargs: :class:`~rl_objectives.modules.ConvNet` kwargs of the trunk; default (Atari's
            Nature DQN) ``num_cells=[32, 64, 64], strides=[4, 2, 1], kernel_sizes=[8, 4, 3]``.
        mlp_kwargs: :class:`~rl_objectives.modules.MLP` kwargs of both heads; default ``depth=1,
            activation_class=nn.ELU, num_cells=512, bias_last_layer=True``.
        device: where the parameters are created.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import DuelingCnnDQNet
        >>> net = DuelingCnnDQNet(6, cnn_kwargs={"num_cells": [4, 4], "kernel_sizes": 3, "strides": 2},
        ...                       mlp_kwargs={"num_cells": 16})
        >>> net(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 6])
    """

    def __init__(
        self,
        out_features: int,
        out_features_value: int = 1,
        cnn_kwargs: dict | None = None,
        mlp_kwargs: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        conv_kwargs: dict[str, Any] = {
            "num_cells": [32, 64, 64],
            "strides": [4, 2, 1],
            "kernel_sizes": [8, 4, 3],
            **dict(cnn_kwargs or {}),
        }
        self.features = ConvNet(device=device, **conv_kwargs)
        self._build_heads(out_features, out_features_value, mlp_kwargs, device)
