"""Plain networks: :class:`MLP`, :class:`ConvNet` and the :class:`SquashDims` aggregator (torchrl.modules names).

They are ordinary ``nn.Module``s (tensors in, tensors out); wrap them in a
:class:`tdict.nn.TensorDictModule`, :class:`~rl_objectives.modules.Actor` or
:class:`~rl_objectives.modules.ValueOperator` to read and write TensorDict entries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tdict.validation import check_non_negative_int, check_positive_int
from torch import nn

__all__ = ["MLP", "ConvNet", "SquashDims"]

_DEFAULT_WIDTH = 32
_DEFAULT_DEPTH = 3


def _widths(num_cells: int | Sequence[int] | None, depth: int | None, what: str) -> list[int]:
    """The hidden widths: ``num_cells`` repeated ``depth`` times, or the list given (checked against ``depth``)."""
    check_non_negative_int(what, "depth", depth, allow_none=True)
    if num_cells is None:
        num_cells = _DEFAULT_WIDTH
    if isinstance(num_cells, int):
        if num_cells <= 0:
            raise ValueError(f"{what}: num_cells must be positive, got {num_cells}.")
        return [num_cells] * (_DEFAULT_DEPTH if depth is None else depth)
    if not isinstance(num_cells, Sequence) or not all(isinstance(n, int) and n > 0 for n in num_cells):
        raise ValueError(f"{what}: num_cells must be a positive int or a sequence of positive ints, got {num_cells!r}.")
    if depth is not None and depth != len(num_cells):
        raise ValueError(
            f"{what}: depth={depth} does not match num_cells of length {len(num_cells)} ({list(num_cells)})."
        )
    return list(num_cells)


def _per_layer(value: int | Sequence[Any], n: int, what: str, name: str) -> list:
    """One value per conv layer: an int is used for every layer, a sequence must have one entry per layer."""
    if isinstance(value, int):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(
            f"{what}: {name} has {len(value)} entries but the network has {n} layers (pass an int to use one value for all)."
        )
    return value


class SquashDims(nn.Module):
    """Flatten the last ``ndims_in`` dims into one (e.g. ``[N, C, H, W] -> [N, C*H*W]``).

    Args:
        ndims_in: how many trailing dims to merge (default 3: channels, height, width).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import SquashDims
        >>> SquashDims()(torch.zeros(5, 2, 3, 4)).shape
        torch.Size([5, 24])
    """

    def __init__(self, ndims_in: int = 3) -> None:
        super().__init__()
        if ndims_in < 1:
            raise ValueError(f"SquashDims: ndims_in must be >= 1, got {ndims_in}.")
        self.ndims_in = ndims_in

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(-self.ndims_in, -1)


class _SharedBias(nn.Module):
    """One learnt scalar added to every output feature (the head's bias with ``single_bias_last_layer``)."""

    def __init__(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


class MLP(nn.Sequential):
    """A multi-layer perceptron: ``depth`` hidden layers of ``num_cells`` units, then a linear head.

    Each hidden block is ``Linear -> [Dropout] -> [norm] -> activation`` (TorchRL's order); the head is
    a plain ``Linear`` unless ``activate_last_layer``. Several inputs are concatenated along the last
    dim. With ``in_features=None`` the first layer is an ``nn.LazyLinear`` (sized at the first call).

    Args:
        in_features: size of the (concatenated) input, or ``None`` for a lazy first layer.
        out_features: size of the output; a tuple reshapes the last dim to that shape.
        depth: number of hidden layers (default 3, or ``len(num_cells)``; 0 gives one linear layer).
        num_cells: width of the hidden layers: an int (repeated ``depth`` times, default 32) or a list.
        activation_class: the activation (a class), ``nn.Tanh`` by default.
        activation_kwargs: keyword arguments of ``activation_class``.
        norm_class: a normalisation layer class placed before each activation; it is built as
            ``norm_class(*norm_args, **norm_kwargs)`` with ``norm_args = (width,)`` unless given.
        norm_kwargs: keyword arguments of ``norm_class``.
        dropout: dropout probability after each hidden linear layer (``None``: no dropout).
        bias_last_layer: whether the head has a bias.
        single_bias_last_layer: the head's bias is one scalar shared by all its output features (a
            zero-initialised parameter added after a bias-free head, as in TorchRL).
        activate_last_layer: also apply the activation (and norm, dropout) after the head.
        layer_class: the linear layer class (``nn.Linear``); built as ``layer_class(in, out, bias=...)``.
        layer_kwargs: more keyword arguments of ``layer_class``.
        device: where the parameters are created.

    Raises:
        ValueError: for a missing or non-positive ``out_features``, or ``depth``/``num_cells`` that disagree.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import MLP
        >>> net = MLP(in_features=3, out_features=2, num_cells=[16, 16])
        >>> net(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
        >>> MLP(out_features=(2, 4), depth=1, num_cells=8)(torch.zeros(7, 3)).shape
        torch.Size([7, 2, 4])
        >>> [type(m).__name__ for m in MLP(3, 1, depth=1, num_cells=4)]
        ['Linear', 'Tanh', 'Linear']
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | Sequence[int] | torch.Size | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        activation_class: type[nn.Module] = nn.Tanh,
        activation_kwargs: dict | None = None,
        norm_class: type[nn.Module] | None = None,
        norm_kwargs: dict | None = None,
        dropout: float | None = None,
        bias_last_layer: bool = True,
        single_bias_last_layer: bool = False,
        activate_last_layer: bool = False,
        layer_class: type[nn.Module] = nn.Linear,
        layer_kwargs: dict | None = None,
        device: torch.device | str | None = None,
        norm_args: Sequence[Any] | None = None,
    ) -> None:
        if out_features is None:
            raise ValueError("MLP: out_features is required (an int or a tuple of ints).")
        if isinstance(out_features, int):
            out_shape: tuple[int, ...] | None = None
            out_total = out_features
        else:
            out_shape = tuple(int(s) for s in out_features)
            out_total = math.prod(out_shape)
        if out_total <= 0:
            raise ValueError(f"MLP: out_features must be positive, got {out_features!r}.")
        check_positive_int("MLP", "in_features", in_features, allow_none=True)
        if dropout is not None and not 0.0 <= dropout < 1.0:
            raise ValueError(f"MLP: dropout must be in [0, 1), got {dropout!r}.")
        widths = _widths(num_cells, depth, "MLP")
        activation_kwargs = dict(activation_kwargs or {})
        layer_kwargs = dict(layer_kwargs or {})
        sizes_out = widths + [out_total]
        sizes_in: list[int | None] = [in_features] + widths
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes_in, sizes_out)):
            last = i == len(sizes_out) - 1
            bias = bias_last_layer if last else True
            shared_bias = last and bias and single_bias_last_layer
            if n_in is None:
                layers.append(nn.LazyLinear(n_out, bias=bias and not shared_bias, device=device))
            else:
                layers.append(layer_class(n_in, n_out, bias=bias and not shared_bias, device=device, **layer_kwargs))
            if shared_bias:
                layers.append(_SharedBias(device=device))
            if not last or activate_last_layer:
                if dropout is not None:
                    layers.append(nn.Dropout(dropout))
                if norm_class is not None:
                    args = tuple(norm_args) if norm_args is not None else (n_out,)
                    norm = norm_class(*args, **dict(norm_kwargs or {}))
                    layers.append(norm if device is None else norm.to(device))
                layers.append(activation_class(**activation_kwargs))
        super().__init__(*layers)
        self.in_features = in_features
        self.out_features = out_features
        self.num_cells = widths
        self.depth = len(widths)
        self._out_shape = out_shape

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not inputs:
            raise ValueError("MLP: expected at least one input tensor.")
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        out = super().forward(x)
        if self._out_shape is not None:
            out = out.unflatten(-1, self._out_shape)
        return out


class ConvNet(nn.Sequential):
    """A stack of 2d convolutions followed by an aggregator (by default: flatten channels, height, width).

    Each layer is ``Conv2d -> [norm] -> activation`` (the activation follows the last conv too, unless
    ``activate_last_layer=False``). Inputs may have any number of leading batch dims:
    ``[*B, C, H, W]`` is flattened to ``[N, C, H, W]``, run, and the result unflattened to ``[*B, ...]``.

    Args:
        in_features: input channels, or ``None`` for a lazy first convolution.
        depth: number of conv layers (default 3, or ``len(num_cells)``).
        num_cells: output channels per layer: an int (repeated) or a list (default 32).
        kernel_sizes, strides, paddings: an int for every layer, or a list with one entry (int or pair) per layer.
            Defaults: 3, 1, 0.
        activation_class: the activation class, ``nn.ELU`` by default.
        activation_kwargs: keyword arguments of ``activation_class``.
        norm_class: a normalisation class built as ``norm_class(channels, **norm_kwargs)``, before the activation.
        norm_kwargs: keyword arguments of ``norm_class``.
        bias_last_layer: whether the last convolution has a bias.
        aggregator_class: applied to the ``[N, C, H, W]`` output (default :class:`SquashDims`: ``[N, C*H*W]``).
        aggregator_kwargs: keyword arguments of ``aggregator_class``.
        squeeze_output: squeeze the last dim of the output when it has size 1.
        activate_last_layer: apply the activation after the last convolution (default ``True``).
        device: where the parameters are created.

    Raises:
        ValueError: for ``depth``/``num_cells`` or per-layer lists that disagree, or an input with
            fewer than 3 dims.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import ConvNet
        >>> net = ConvNet(in_features=3, num_cells=[8, 8], kernel_sizes=3, strides=[2, 1])
        >>> net(torch.zeros(4, 3, 16, 16)).shape  # 16 -> 7 -> 5 pixels per side, 8 channels
        torch.Size([4, 200])
        >>> net(torch.zeros(2, 5, 3, 16, 16)).shape
        torch.Size([2, 5, 200])
    """

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        aggregator_class: type[nn.Module] | None = SquashDims,
        aggregator_kwargs: dict | None = None,
        squeeze_output: bool = False,
        kernel_sizes: int | Sequence[int] = 3,
        strides: int | Sequence[int] = 1,
        paddings: int | Sequence[int] = 0,
        activation_class: type[nn.Module] = nn.ELU,
        activation_kwargs: dict | None = None,
        norm_class: type[nn.Module] | None = None,
        norm_kwargs: dict | None = None,
        bias_last_layer: bool = True,
        activate_last_layer: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        check_positive_int("ConvNet", "in_features", in_features, allow_none=True)
        channels = _widths(num_cells, depth, "ConvNet")
        if not channels:
            raise ValueError("ConvNet: depth must be at least 1.")
        n = len(channels)
        kernels = _per_layer(kernel_sizes, n, "ConvNet", "kernel_sizes")
        strides_l = _per_layer(strides, n, "ConvNet", "strides")
        paddings_l = _per_layer(paddings, n, "ConvNet", "paddings")
        activation_kwargs = dict(activation_kwargs or {})
        layers: list[nn.Module] = []
        for i, c_out in enumerate(channels):
            last = i == n - 1
            bias = bias_last_layer if last else True
            c_in = in_features if i == 0 else channels[i - 1]
            kw: dict[str, Any] = dict(
                kernel_size=kernels[i], stride=strides_l[i], padding=paddings_l[i], bias=bias, device=device
            )
            layers.append(nn.LazyConv2d(c_out, **kw) if c_in is None else nn.Conv2d(c_in, c_out, **kw))
            if not last or activate_last_layer:
                if norm_class is not None:
                    layers.append(norm_class(c_out, **dict(norm_kwargs or {})))
                layers.append(activation_class(**activation_kwargs))
        if aggregator_class is not None:
            layers.append(aggregator_class(**dict(aggregator_kwargs or {})))
        super().__init__(*layers)
        self.in_features = in_features
        self.num_cells = channels
        self.depth = n
        self.squeeze_output = squeeze_output

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.ndim < 3:
            raise ValueError(
                f"ConvNet: expected an input of shape [*B, C, H, W] (or [C, H, W]), got {tuple(inputs.shape)}."
            )
        batch = inputs.shape[:-3]
        # Conv2d takes exactly one batch dim: merge the leading dims, and restore them after
        x = inputs.reshape(-1, *inputs.shape[-3:])
        out = super().forward(x)
        out = out.reshape(*batch, *out.shape[1:])
        if self.squeeze_output and out.ndim and out.shape[-1] == 1:
            out = out.squeeze(-1)
        return out
