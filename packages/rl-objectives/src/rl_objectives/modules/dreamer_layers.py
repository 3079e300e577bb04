"""DreamerV3's layers: RMS-normalised MLPs and the block-diagonal GRU of its RSSM.

- ``DreamerV3MLP``: ``depth`` x (linear, RMS norm with a learnt scale, SiLU), then a linear output
  whose initial weights are scaled by ``outscale`` (0 for DreamerV3's reward and critic heads).
- ``BlockLinear``: ``num_blocks`` independent linear maps over equal slices of the features (a
  block-diagonal weight), one batched product.
- ``BlockGRU``: the recurrent core, ``h' = u * tanh(r * c) + (1 - u) * h`` with ``r = sigmoid(.)``
  and ``u = sigmoid(. - 1)`` (the update gate leans towards keeping ``h``); every block sees its
  slice of ``h`` and the projections of ``h``, the latent state and the action (the action
  divided by ``max(1, |a|)``).

Linear layers start from a normal truncated at two standard deviations, ``std = 1.1368 /
sqrt(fan_in)``, zero biases (DreamerV3's initialisation).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from tdict import scalar_like
from torch import nn

from .one_hot_latents import gather_table, gathered_product, latent_linear, one_hot_classes, scattered_columns

__all__ = ["BlockGRU", "BlockLinear", "DreamerV3MLP", "RMSNorm", "dreamer_v3_init", "normed_mlp"]

_INIT_GAIN = 1.1368  # makes the truncated normal's standard deviation 1 / sqrt(fan_in)


def _truncated_normal_(weight: torch.Tensor, fan_in: int) -> None:
    std = _INIT_GAIN / fan_in**0.5
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def dreamer_v3_init(module: nn.Module) -> None:
    """DreamerV3's initialisation of an ``nn.Linear`` (use with ``module.apply``); other modules untouched."""
    if isinstance(module, nn.Linear):
        _truncated_normal_(module.weight, module.in_features)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


# ----------------------------------------------------------------------------- recurrences
# A recurrence calls the same linear layers once per step on a small batch. Autograd then computes
# each layer's weight gradient once per step (a product over the few rows of that step, written
# into a full-size matrix) and adds the steps up. Inside ``deferred_weight_grads`` the layers keep
# their forward values, but their backward only stashes each step's input and output gradient; one
# product over all steps' rows then gives the weight gradient (the same sum, in one GEMM; one
# batched product for a block-diagonal layer).


class _Stash:
    __slots__ = ("bias", "grads", "inputs", "one_hot_rows", "packed", "registered_bias", "state_columns", "weight")

    def __init__(self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
        self.registered_bias = bias  # the bias whose gradient the anchor returns
        # detached once: what every call multiplies by
        self.weight = None if weight is None else weight.detach()
        self.bias = None if bias is None else bias.detach()
        self.inputs: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        # calls on a one-hot state: (classes [N, C], the other input columns [N, rest], output gradient [N, out])
        self.one_hot_rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.state_columns: torch.Tensor | None = None  # [state width + 1, out]: what a one-hot state gathers
        self.packed: torch.Tensor | bool | None = None  # the weight in oneDNN's layout: see _packed_product


def _packed_product(
    stash: _Stash, value: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """``F.linear(value, weight, bias)`` from the weight reordered once per recurrence into
    oneDNN's blocked layout; ``None`` where that does not apply (not a dense float32 CPU product,
    no oneDNN) and on the first call (a weight used once is not worth reordering). A recurrence's
    small-batch products stream their weights from memory at every step; read in the blocked
    layout, not repacked by each call, they run about 15% faster (one thread, 16 rows, the DreamerV3
    benchmark's sizes). (The backward's ``grad @ weight`` gains nothing from it.)"""
    if stash.packed is None:  # first call: plain product; reorder from the second on
        stash.packed = (
            weight.ndim == 2
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and torch.backends.mkldnn.is_available()
        )
        return None
    if stash.packed is False or value.dtype != torch.float32 or value.device.type != "cpu":
        return None
    if stash.packed is True:
        try:
            stash.packed = torch.ops.mkldnn._reorder_linear_weight(weight, value.shape[:-1].numel())
        except (AttributeError, RuntimeError):  # a build without the op
            stash.packed = False
            return None
    return torch.ops.mkldnn._linear_pointwise(value, stash.packed, bias, "none", [], "")


class _WeightAnchor(torch.autograd.Function):
    """A 0-d tensor that every deferred call of one layer feeds: its backward (after all of theirs)
    turns the stashed (input, output gradient) rows into the weight and bias gradients."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, bias: torch.Tensor | None, stash: _Stash) -> torch.Tensor:  # type: ignore[override]
        ctx.stash, ctx.has_bias = stash, bias is not None
        return weight.new_zeros(())

    @staticmethod
    def backward(ctx: Any, _grad: torch.Tensor) -> tuple:  # type: ignore[override]
        stash = ctx.stash
        inputs, grads, one_hot_rows = stash.inputs, stash.grads, stash.one_hot_rows
        stash.inputs, stash.grads, stash.one_hot_rows = [], [], []
        grad_weight = grad_bias = None
        if grads:
            grad = _cat(grads)
            value = _cat(inputs)
            if grad.ndim == 2:  # a dense layer: rows [N, out] and [N, in]
                grad_weight = grad.t().mm(value)
            else:  # a block-diagonal one: [N, b, o] and [N, b, i], weight [b, i, o]
                grad_weight = torch.bmm(value.permute(1, 2, 0), grad.transpose(0, 1))
            grad_bias = grad.sum(0)
        if one_hot_rows:  # the state's columns scattered, the other columns multiplied
            classes, rest, grad = (_cat(list(rows)) for rows in zip(*one_hot_rows, strict=True))
            assert stash.state_columns is not None  # set by the calls that stashed these rows
            part = scattered_columns(classes, grad, stash.state_columns.shape[0] - 1)
            if rest.shape[-1]:
                part = torch.cat([part, grad.t().mm(rest)], 1)
            grad_weight = part if grad_weight is None else grad_weight + part
            grad_bias = grad.sum(0) if grad_bias is None else grad_bias + grad.sum(0)
        if not ctx.has_bias or not ctx.needs_input_grad[1]:
            grad_bias = None
        return grad_weight, grad_bias, None


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _product(value: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(value, weight, bias)`` for a dense ``weight [out, in]``; for a block-diagonal one
    ``[b, i, o]`` (:class:`BlockLinear`, no bias here) ``value [..., b, i] -> [..., b, o]``."""
    if weight.ndim == 2:
        return F.linear(value, weight, bias)
    return _block_product(value, weight)


def _block_product(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``value [..., b, i] @ weight [b, i, o] -> [..., b, o]`` block by block: one ``bmm`` (an
    ``einsum`` costs about 10 us more per call at a recurrence step's size)."""
    rows = value.reshape(-1, *value.shape[-2:]).transpose(0, 1)  # [b, N, i]
    return torch.bmm(rows, weight).transpose(0, 1).reshape(*value.shape[:-1], weight.shape[-1])


class _DeferredLinear(torch.autograd.Function):
    """:func:`_product` of a dense or block-diagonal layer, whose weight gradient goes to its stash."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        value: torch.Tensor,
        anchor: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stash: _Stash,
        one_hot: tuple[torch.Tensor, int] | None,
    ) -> torch.Tensor:
        ctx.stash, ctx.classes = stash, None
        if one_hot is None:
            ctx.save_for_backward(value, weight)
            if (out := _packed_product(stash, value, weight, bias)) is not None:
                return out
            return _product(value, weight, bias)
        # a one-hot latent state leads the input: its ones' weight columns, summed; the backward
        # passes the state the dense product's gradient, and the weight's scatters into those columns
        classes, width = one_hot
        if stash.state_columns is None:  # the weight is fixed for the whole recurrence
            stash.state_columns = gather_table(weight[:, :width])
        rest = value[..., width:]
        ctx.save_for_backward(rest, weight)
        ctx.classes = classes
        out = gathered_product(classes, stash.state_columns)
        if rest.shape[-1]:
            return out + F.linear(rest, weight[:, width:], bias)
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        value, weight = ctx.saved_tensors
        row = weight.ndim - 1  # the dims of one row: (in,) dense, (b, i) block-diagonal
        if ctx.classes is None:
            ctx.stash.inputs.append(value.reshape(-1, *value.shape[-row:]))
            ctx.stash.grads.append(grad.reshape(-1, *grad.shape[-row:]))
        else:  # value: the columns after the state
            classes = ctx.classes
            rows = classes.shape[:-1].numel()
            ctx.stash.one_hot_rows.append(
                (classes.reshape(rows, -1), value.reshape(rows, value.shape[-1]), grad.reshape(rows, -1))
            )
        grad_value = None
        if ctx.needs_input_grad[0]:
            grad_value = grad.matmul(weight) if row == 1 else _block_product(grad, weight.transpose(1, 2))
        return grad_value, grad.new_zeros(()), None, None, None, None


class _Deferred(threading.local):
    """Per thread: ``id(weight) -> (anchor, stash)`` of the layers deferring inside the open blocks."""

    def __init__(self) -> None:
        self.layers: dict[int, tuple[torch.Tensor, _Stash]] = {}


_DEFERRED = _Deferred()


def _weight_pairs(module: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    if module._forward_hooks or module._forward_pre_hooks:  # a hook must see the call: leave the layer as is
        return []
    if isinstance(module, nn.Linear):
        pairs = [(module.weight, module.bias)]
    elif isinstance(module, BlockLinear):  # its bias is added outside the product: plain autograd
        pairs = [(module.weight, None)]
    elif isinstance(module, nn.GRUCell):
        pairs = [(module.weight_ih, module.bias_ih), (module.weight_hh, module.bias_hh)]
    else:
        return []
    return [
        (w, b)
        for w, b in pairs
        if not isinstance(w, nn.parameter.UninitializedParameter) and w.requires_grad and (b is None or b.requires_grad)
    ]


@contextmanager
def deferred_weight_grads(*modules: nn.Module, weights: tuple[torch.Tensor, ...] = ()) -> Iterator[None]:
    """Within the block, the linear layers (where called through :func:`linear`,
    :func:`run_sequential` or :func:`gru_cell`), GRU cells and :class:`BlockLinear` layers of
    ``modules``, and the dense ``weights`` (e.g. a slice of a layer's weight, where called through
    :func:`weight_product`), compute their weight gradients in one product over all their calls.
    Forward values are unchanged; not for double backward."""
    added: list[int] = []
    layers = _DEFERRED.layers
    # (compiled code and functorch transforms differentiate the plain ops themselves)
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        pairs = [pair for module in modules for sub in module.modules() for pair in _weight_pairs(sub)]
        pairs += [(weight, None) for weight in weights if weight.requires_grad]
        for weight, bias in pairs:
            if id(weight) not in layers:
                stash = _Stash(weight, bias)
                layers[id(weight)] = (_WeightAnchor.apply(weight, bias, stash), stash)
                added.append(id(weight))
    try:
        yield
    finally:
        for key in added:
            del layers[key]


def _linear(
    value: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    one_hot: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    layers = _DEFERRED.layers
    entry = layers.get(id(weight)) if layers else None
    # a call with another bias than the one registered with the weight (a layer tying the weight,
    # a bias-free product of a layer's weight) is not deferred: the anchor returns the registered bias's gradient
    if entry is None or not torch.is_grad_enabled() or bias is not entry[1].registered_bias:
        return _product(value, weight, bias)
    anchor, stash = entry
    if one_hot is not None and (weight.ndim != 2 or value.dtype != weight.dtype):
        one_hot = None
    return _DeferredLinear.apply(value, anchor, stash.weight, stash.bias, stash, one_hot)


def weight_product(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``value @ weight.T``; inside :func:`deferred_weight_grads` naming ``weight``, deferred."""
    return _linear(value, weight, None)


def linear(module: nn.Module, value: torch.Tensor, one_hot: tuple[torch.Tensor, int] | None = None) -> torch.Tensor:
    """``module(value)``; an ``nn.Linear`` inside :func:`deferred_weight_grads` defers its weight
    gradient, and where ``value`` starts with a one-hot latent state (``one_hot``: the classes it
    drew and its width) sums the weight columns of its ones instead of multiplying."""
    layers = _DEFERRED.layers
    if layers and isinstance(module, nn.Linear) and id(module.weight) in layers:
        return _linear(value, module.weight, module.bias, one_hot)
    return module(value)


def leading_one_hot(state: torch.Tensor) -> tuple[torch.Tensor, int] | None:
    """``(classes, width)`` of a marked one-hot latent ``state`` (for :func:`linear` on an input it
    leads), else ``None``."""
    classes = one_hot_classes(state)
    return None if classes is None else (classes, state.shape[-1])


def run_sequential(
    sequence: nn.Module, value: torch.Tensor, one_hot: tuple[torch.Tensor, int] | None = None
) -> torch.Tensor:
    """``sequence(value)``, its linear layers called through :func:`linear` (``one_hot``: the
    first one's)."""
    if not _DEFERRED.layers or not isinstance(sequence, nn.Sequential):
        return sequence(value)
    for module in sequence:
        value = linear(module, value, one_hot)
        one_hot = None
    return value


def gru_cell(cell: nn.Module, value: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """``cell(value, hidden)``; an ``nn.GRUCell`` inside :func:`deferred_weight_grads` runs the
    operations of torch's CPU cell as one autograd step (:class:`_DeferredGRUCell`), its weight
    gradients deferred."""
    layers = _DEFERRED.layers
    if not (layers and isinstance(cell, nn.GRUCell) and torch.is_grad_enabled()):
        return cell(value, hidden)
    ih, hh = layers.get(id(cell.weight_ih)), layers.get(id(cell.weight_hh))
    if (
        ih is None
        or hh is None
        or ih[1].registered_bias is not cell.bias_ih  # weights tied to another cell's (see _linear)
        or hh[1].registered_bias is not cell.bias_hh
        or value.ndim != 2
        or not value.dtype == hidden.dtype == cell.weight_ih.dtype
    ):
        return cell(value, hidden)
    stash_ih, stash_hh = ih[1], hh[1]
    return _DeferredGRUCell.apply(
        value, hidden, ih[0], hh[0], stash_ih.weight, stash_ih.bias, stash_hh.weight, stash_hh.bias, stash_ih, stash_hh
    )


class _DeferredGRUCell(torch.autograd.Function):
    """A GRU cell step (torch's gate order: reset, update, new) whose two products defer their
    weight gradients to their stashes, and whose backward writes the gates' gradients in closed
    form (``h' = z h + (1 - z) n``, ``n = tanh(i_n + r h_n)``, ``r`` and ``z`` sigmoids) instead
    of through a node per operation."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        value: torch.Tensor,
        hidden: torch.Tensor,
        anchor_ih: torch.Tensor,
        anchor_hh: torch.Tensor,
        weight_ih: torch.Tensor,
        bias_ih: torch.Tensor | None,
        weight_hh: torch.Tensor,
        bias_hh: torch.Tensor | None,
        stash_ih: _Stash,
        stash_hh: _Stash,
    ) -> torch.Tensor:
        in_gates, hidden_gates = (
            out if (out := _packed_product(stash, x, w, b)) is not None else F.linear(x, w, b)
            for stash, x, w, b in ((stash_ih, value, weight_ih, bias_ih), (stash_hh, hidden, weight_hh, bias_hh))
        )
        in_reset, in_update, in_new = in_gates.chunk(3, -1)
        hidden_reset, hidden_update, hidden_new = hidden_gates.chunk(3, -1)
        reset = torch.sigmoid(hidden_reset + in_reset)
        update = torch.sigmoid(hidden_update + in_update)
        new = torch.tanh(in_new + hidden_new * reset)
        ctx.save_for_backward(value, hidden, weight_ih, weight_hh, reset, update, new, hidden_new)
        ctx.stashes = stash_ih, stash_hh
        return (hidden - new) * update + new

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        value, hidden, weight_ih, weight_hh, reset, update, new, hidden_new = ctx.saved_tensors
        # the derivatives 1 - n^2 and s - s^2 as one addcmul each, the 1 a tensor made once
        one = scalar_like(1.0, grad)
        if not isinstance(one, torch.Tensor):  # (a dtype scalar_like leaves as a number)
            one = grad.new_ones(())
        grad_new = (one - update).mul_(grad).mul_(torch.addcmul(one, new, new, value=-1))  # through the tanh
        grad_update = (hidden - new).mul_(grad).mul_(torch.addcmul(update, update, update, value=-1))  # the sigmoid
        grad_reset = (grad_new * hidden_new).mul_(torch.addcmul(reset, reset, reset, value=-1))
        grad_in = torch.cat([grad_reset, grad_update, grad_new], -1)
        grad_hidden_gates = torch.cat([grad_reset, grad_update, grad_new * reset], -1)
        stash_ih, stash_hh = ctx.stashes
        stash_ih.inputs.append(value)
        stash_ih.grads.append(grad_in)
        stash_hh.inputs.append(hidden)
        stash_hh.grads.append(grad_hidden_gates)
        grad_value = grad_in.mm(weight_ih) if ctx.needs_input_grad[0] else None
        grad_hidden = torch.addmm(grad * update, grad_hidden_gates, weight_hh) if ctx.needs_input_grad[1] else None
        zero = grad.new_zeros(())
        return grad_value, grad_hidden, zero, zero, None, None, None, None, None, None


_FUSED_RMS_NORM_MIN = 1 << 17


class _RMSNorm(torch.autograd.Function):
    """``F.rms_norm`` over the last dim in fewer passes over the data: the mean square from one
    vector norm, the backward from one dot product per row (``dx = r * (g w - x_hat * mean(g w
    x_hat))``, ``x_hat = r x``, ``r = 1 / sqrt(mean(x^2) + eps)``) instead of differentiating the
    composite's steps; vmap-able (its rule generated), not twice differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def _inverse_rms(value: torch.Tensor, eps: float) -> torch.Tensor:
        norm = torch.linalg.vector_norm(value, dim=-1, keepdim=True)
        return torch.rsqrt(norm.square().div(value.shape[-1]).add(eps))

    @staticmethod
    def forward(value: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        return value * _RMSNorm._inverse_rms(value, eps) * weight

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        value, weight, eps = inputs
        ctx.save_for_backward(value, weight)
        ctx.eps = eps

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        value, weight = ctx.saved_tensors
        inverse_rms = _RMSNorm._inverse_rms(value, ctx.eps)
        normed = value * inverse_rms
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * normed).reshape(-1, normed.shape[-1]).sum(0)
        grad_value = None
        if ctx.needs_input_grad[0]:
            scaled = grad * weight
            mean_dot = torch.linalg.vecdot(scaled, normed).unsqueeze(-1).div(normed.shape[-1])
            grad_value = torch.addcmul(scaled, normed, mean_dot, value=-1).mul_(inverse_rms)
        return grad_value, grad_weight, None


def _small_rms_norm(value: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """``F.rms_norm`` over the last dim, for few rows: its operations without its two conversions
    of Python numbers (the mean's ``1 / n`` and ``eps``), which at 16 x 512 cost as much as an
    operation (fused: about 5% of its forward and backward)."""
    eps_tensor = scalar_like(eps, value)
    if not isinstance(eps_tensor, torch.Tensor):  # (other dtypes or devices, compiled code)
        return F.rms_norm(value, value.shape[-1:], weight, eps)
    squares = value.square().sum(-1, keepdim=True)
    out = value * torch.rsqrt(torch.add(eps_tensor, squares, alpha=1.0 / value.shape[-1]))
    return out if weight is None else out * weight


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim (computed in float32), no shift.

    From 128k elements on (outside ``torch.compile``) a fused autograd function computes it in
    fewer passes over the data; it is not twice differentiable.

    Examples:
        >>> norm = RMSNorm(4)
        >>> norm(torch.full((2, 4), 3.0)).detach()
        tensor([[1.0000, 1.0000, 1.0000, 1.0000],
                [1.0000, 1.0000, 1.0000, 1.0000]])
    """

    def __init__(self, features: int, eps: float = 1e-4, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features, device=device))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        # the compiler fuses the composite itself; below ~100k elements the fused function's call
        # costs more than its passes save (one CPU thread: 0.26 ms against 0.15 ms at 16 x 512,
        # 2.4 ms against 3.5 ms at 1024 x 512, forward and backward)
        if torch.compiler.is_compiling() or value.numel() < _FUSED_RMS_NORM_MIN:
            out = _small_rms_norm(value.float(), self.weight.float(), self.eps)
        else:
            out = _RMSNorm.apply(value.float(), self.weight.float(), self.eps)
        return out.to(value.dtype)


def _normed_layer(in_features: int, out_features: int, eps: float, device: torch.device | str | None) -> list:
    return [nn.Linear(in_features, out_features, device=device), RMSNorm(out_features, eps, device), nn.SiLU()]


def normed_mlp(
    in_features: int,
    out_features: int | None,
    depth: int,
    num_cells: int,
    norm_eps: float,
    device: torch.device | str | None,
) -> nn.Sequential:
    """``depth`` x (linear, RMS norm, SiLU) of ``num_cells`` units, then a linear output (none for
    ``out_features=None``), with DreamerV3's initialisation."""
    layers: list = []
    width = in_features
    for _ in range(depth):
        layers += _normed_layer(width, num_cells, norm_eps, device)
        width = num_cells
    if out_features is not None:
        layers.append(nn.Linear(width, out_features, device=device))
    model = nn.Sequential(*layers)
    model.apply(dreamer_v3_init)
    return model


class BlockLinear(nn.Module):
    """``num_blocks`` linear maps, block ``b`` from input slice ``b`` to output slice ``b`` (``weight[b]``).

    Examples:
        >>> layer = BlockLinear(6, 4, num_blocks=2)
        >>> layer.weight.shape, layer(torch.randn(3, 6)).shape
        (torch.Size([2, 3, 2]), torch.Size([3, 4]))
    """

    def __init__(
        self, in_features: int, out_features: int, num_blocks: int, *, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        if in_features % num_blocks or out_features % num_blocks:
            raise ValueError(
                f"BlockLinear: in_features ({in_features}) and out_features ({out_features}) must be divisible "
                f"by num_blocks ({num_blocks})."
            )
        self.in_features, self.out_features, self.num_blocks = in_features, out_features, num_blocks
        self.weight = nn.Parameter(
            torch.empty(num_blocks, in_features // num_blocks, out_features // num_blocks, device=device)
        )
        self.bias = nn.Parameter(torch.zeros(out_features, device=device))
        _truncated_normal_(self.weight, in_features)  # fan-in: the whole (block-diagonal) kernel's

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        blocks = value.reshape(*value.shape[:-1], self.num_blocks, self.in_features // self.num_blocks)
        return _linear(blocks, self.weight, None).flatten(-2) + self.bias  # (deferred inside a recurrence)

    def shared_input_weights(self, own_features: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For inputs whose blocks each start with ``own_features`` of their own and end with
        features every block shares: the rows that read the own features (``[b, own, o]``, a view)
        and those that read the shared ones as one dense ``[b * o, shared]`` weight (a copy; its
        gradient flows back into :attr:`weight`)."""
        own, shared = self.weight.split([own_features, self.weight.shape[1] - own_features], 1)
        return own, shared.permute(0, 2, 1).reshape(self.out_features, -1)

    def forward_shared(
        self, own: torch.Tensor, shared: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``self(torch.cat([own, shared expanded over the blocks], -1).flatten(-2))`` for ``own
        [..., b, i]`` and ``shared [..., s]``, without the expanded copy: the shared features take
        one dense product (``weights``: :meth:`shared_input_weights`, deferred inside a recurrence).

        Examples:
            >>> layer = BlockLinear(2 * (1 + 3), 4, num_blocks=2)
            >>> own, shared = torch.randn(5, 2, 1), torch.randn(5, 3)
            >>> expanded = torch.cat([own, shared.unsqueeze(-2).expand(5, 2, 3)], -1).flatten(-2)
            >>> torch.allclose(layer.forward_shared(own, shared), layer(expanded), atol=1e-6)
            True
        """
        own_weight, shared_weight = self.shared_input_weights(own.shape[-1]) if weights is None else weights
        out = _linear(own, own_weight, None) + _linear(shared, shared_weight, None).unflatten(-1, (self.num_blocks, -1))
        return out.flatten(-2) + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, num_blocks={self.num_blocks}"


class BlockGRU(nn.Module):
    """DreamerV3's recurrent core: ``belief' = BlockGRU(state, belief, action)``.

    Args:
        state_dim / action_dim / belief_dim: the latent state's, the action's and the belief's
            (deterministic state's) sizes; ``belief_dim`` divisible by ``num_blocks``.
        hidden_dim: the width of the three input projections (belief, state, action).
        num_blocks: the number of blocks the belief is cut into.
        num_layers: block-linear hidden layers before the gates.
        norm_eps: the RMS norms' epsilon.

    Examples:
        >>> gru = BlockGRU(state_dim=16, action_dim=2, belief_dim=8, hidden_dim=4, num_blocks=2)
        >>> gru(torch.zeros(3, 16), torch.zeros(3, 8), torch.zeros(3, 2)).shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        *,
        state_dim: int,
        action_dim: int,
        belief_dim: int,
        hidden_dim: int,
        num_blocks: int = 8,
        num_layers: int = 1,
        norm_eps: float = 1e-4,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if belief_dim % num_blocks:
            raise ValueError(f"BlockGRU: belief_dim ({belief_dim}) must be divisible by num_blocks ({num_blocks}).")
        self.belief_dim, self.num_blocks = belief_dim, num_blocks
        self.belief_in = nn.Sequential(*_normed_layer(belief_dim, hidden_dim, norm_eps, device))
        self.state_in = nn.Sequential(*_normed_layer(state_dim, hidden_dim, norm_eps, device))
        self.action_in = nn.Sequential(*_normed_layer(action_dim, hidden_dim, norm_eps, device))
        layers: list = []
        width = belief_dim + 3 * hidden_dim * num_blocks  # each block: its belief slice + the 3 projections
        for _ in range(num_layers):
            layers += [BlockLinear(width, belief_dim, num_blocks, device=device), RMSNorm(belief_dim, norm_eps, device)]
            layers.append(nn.SiLU())
            width = belief_dim
        self.hidden = nn.Sequential(*layers)
        self.gates = BlockLinear(width, 3 * belief_dim, num_blocks, device=device)
        self.apply(dreamer_v3_init)

    def _first_block_layer(self) -> BlockLinear | None:
        """The first block-linear layer, where it may run on its split input (no hook sees the calls)."""
        first = self.hidden[0] if len(self.hidden) else self.gates
        if not isinstance(first, BlockLinear) or any(
            m._forward_hooks or m._forward_pre_hooks for m in (self.hidden, first)
        ):
            return None
        return first

    def _projections(self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The three projections (belief, state, action: each linear, RMS norm, SiLU), concatenated.
        For a small batch (a recurrence's step) the three products are stacked and normalised and
        activated together: at that size each operation costs its call, not its data (one thread,
        16 rows: 0.40 against 0.61 ms forward and backward)."""
        sequences = (self.belief_in, self.state_in, self.action_in)
        inputs = (belief, state, action)
        one_hots = (None, leading_one_hot(state), None)
        norms = self._stacked_norms(sequences, belief.shape[:-1].numel())
        if norms is None:
            return torch.cat([run_sequential(*args) for args in zip(sequences, inputs, one_hots, strict=True)], -1)
        products = torch.stack(
            [linear(seq[0], x, one_hot) for seq, x, one_hot in zip(sequences, inputs, one_hots, strict=True)], -2
        )
        weight = torch.stack([norm.weight for norm in norms]).float()
        normed = _small_rms_norm(products.float(), None, norms[0].eps) * weight
        return F.silu(normed.to(products.dtype)).flatten(-2)

    @staticmethod
    def _stacked_norms(sequences: tuple[nn.Sequential, ...], rows: int) -> list[RMSNorm] | None:
        """The projections' norms where the three may run stacked: each exactly (linear, RMS norm,
        SiLU) with one epsilon, no hook to see their calls, and few rows (where each norm would
        take the composite; the compiler sees the layers as they are)."""
        norms: list[RMSNorm] = []
        for seq in sequences:
            layers = list(seq)
            if len(layers) != 3 or any(m._forward_hooks or m._forward_pre_hooks for m in (seq, *layers)):
                return None
            first, norm, activation = layers
            if not (type(first) is nn.Linear and type(norm) is RMSNorm and type(activation) is nn.SiLU):
                return None
            norms.append(norm)
        if (
            torch.compiler.is_compiling()
            or any(norm.eps != norms[0].eps for norm in norms)
            or 3 * rows * norms[0].weight.shape[0] >= _FUSED_RMS_NORM_MIN
        ):
            return None
        return norms

    def input_weights(self) -> tuple[torch.Tensor, ...]:
        """The first block-linear layer's :meth:`BlockLinear.shared_input_weights` (each block reads
        its slice of the belief, then the projections every block shares), for :meth:`forward`'s
        ``weights`` in a recurrence; ``()`` where that layer runs unsplit."""
        first = self._first_block_layer()
        return () if first is None else first.shared_input_weights(self.belief_dim // self.num_blocks)

    def forward(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor, weights: tuple[torch.Tensor, ...] = ()
    ) -> torch.Tensor:
        """The next belief; ``weights``: :meth:`input_weights`, computed once for a whole sequence."""
        action = action / action.detach().abs().clamp_min(1.0)
        inputs = self._projections(state, belief, action)
        blocks, size = self.num_blocks, self.belief_dim // self.num_blocks
        own = belief.reshape(*belief.shape[:-1], blocks, size)
        first = self._first_block_layer()
        if first is None:  # the expanded input, for the hooks
            per_block = torch.cat([own, inputs.unsqueeze(-2).expand(*inputs.shape[:-1], blocks, -1)], -1)
            gates = self.gates(self.hidden(per_block.flatten(-2)))
        else:
            value = first.forward_shared(own, inputs, weights or None)  # type: ignore[arg-type]
            for module in list(self.hidden)[1:]:
                value = module(value)
            gates = value if first is self.gates else self.gates(value)
        reset, candidate, update = gates.reshape(*gates.shape[:-1], blocks, 3, size).unbind(-2)
        reset = torch.sigmoid(reset.flatten(-2))
        candidate = torch.tanh(reset * candidate.flatten(-2))
        update = torch.sigmoid(update.flatten(-2) - scalar_like(1.0, update))
        return torch.lerp(belief, candidate, update)  # update * candidate + (1 - update) * belief


class DreamerV3MLP(nn.Module):
    """``depth`` x (linear, RMS norm, SiLU) of ``num_cells`` units, then a linear output (TorchRL's ``DreamerV3MLP``).

    Several inputs are concatenated along the last dim. The first layer sums the weight columns of
    the ones of a one-hot latent state drawn by the RSSM (marked with its classes,
    :mod:`~rl_objectives.modules.one_hot_latents`) instead of multiplying by it.

    Args:
        in_features / out_features: the input and output sizes (``out_features=None``: no output
            layer, the last hidden layer's ``num_cells`` features come out).
        depth: the number of hidden layers.
        num_cells: their width.
        outscale: scales the output layer's initial weights (0: the head starts at its bias).
        norm_eps: the RMS norms' epsilon.
        device: where the parameters are created.

    Examples:
        >>> mlp = DreamerV3MLP(6, 4, depth=2, num_cells=8)
        >>> mlp(torch.randn(3, 2), torch.randn(3, 4)).shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int | None,
        depth: int = 3,
        num_cells: int = 1024,
        outscale: float = 1.0,
        norm_eps: float = 1e-4,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.model = normed_mlp(in_features, out_features, depth, num_cells, norm_eps, device)
        output = self.model[-1]
        if out_features is not None and isinstance(output, nn.Linear):
            with torch.no_grad():
                output.weight.mul_(outscale)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.model._forward_hooks or self.model._forward_pre_hooks or not self.model:
            return self.model(inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1))
        first, *rest = self.model  # the first layer gathers the columns of one-hot latent states
        value = latent_linear(inputs, first)
        for module in rest:
            value = module(value)
        return value
