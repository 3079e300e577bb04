"""One-hot latent states that remember their classes, and the linear layer that gathers their columns.

A DreamerV3 latent state is ``num_categoricals`` one-hot vectors, flattened: a linear layer reading
it adds up one weight column per categorical and multiplies every other column by zero. The RSSM
marks each state it draws with the classes drawn (:func:`mark_one_hot`); :func:`latent_linear`,
``layer(torch.cat(inputs, -1))`` for the first layer of ``DreamerV3MLP`` (the model's heads, the
actor and critic), then sums the marked inputs' columns (``F.embedding_bag``) instead of
multiplying, and multiplies the other inputs. Inside the rollout's recurrence the prior's first
layer does the same (``dreamer_layers.linear(..., one_hot=)``).

- Values equal the dense product up to the order of the additions.
- Gradients are the dense product's: the state's is ``grad @ weight`` (the straight-through
  gradient the draw passes on to the probabilities), the weight's has a row for each drawn column.
- A mark holds while the tensor is not modified in place (its version counter is compared); a
  state built by any other operation, or under ``torch.inference_mode``, is not marked and is
  multiplied as before, as are all inputs under ``torch.compile`` or in another dtype than the weight.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> classes = torch.tensor([[1, 0], [2, 2]])  # 2 rows, 2 categoricals of 3 classes
    >>> state = mark_one_hot(torch.nn.functional.one_hot(classes, 3).float().flatten(-2), classes)
    >>> layer = nn.Linear(6 + 4, 5)
    >>> belief = torch.randn(2, 4)
    >>> torch.allclose(latent_linear([state, belief], layer), layer(torch.cat([state, belief], -1)))
    True
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["latent_linear", "mark_one_hot", "one_hot_classes"]

_MARK = "_one_hot_classes"


def mark_one_hot(state: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """Records on ``state`` (``[..., C * K]``, exactly one-hot per categorical) the classes drawn,
    ``classes [..., C]`` (-1 for a categorical set to zeros); returns ``state`` (an inference tensor
    has no version counter: not marked)."""
    if not state.is_inference():
        setattr(state, _MARK, (classes, state._version))
    return state


def one_hot_classes(state: torch.Tensor) -> torch.Tensor | None:
    """The classes ``[..., C]`` of a marked ``state``; ``None`` when it is not marked, or was modified
    in place since."""
    mark = getattr(state, _MARK, None)
    if mark is None or mark[1] != state._version:
        return None
    return mark[0]


def gather_table(weight: torch.Tensor) -> torch.Tensor:
    """The rows :func:`gathered_product` sums: ``weight [out, width]`` transposed, then a zero row."""
    return torch.cat([weight.t(), weight.new_zeros(1, weight.shape[0])])


def gathered_product(classes: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``state @ weight.T`` ``[..., out]`` for the flattened one-hot state whose categoricals drew
    ``classes [..., C]``: the sum of one row of ``table`` (:func:`gather_table` of ``weight``) per
    categorical; a zeroed categorical (class -1) adds the zero row."""
    columns = _columns(classes, table.shape[0] - 1)
    rows = F.embedding_bag(columns.reshape(-1, classes.shape[-1]), table, mode="sum")
    return rows.reshape(*classes.shape[:-1], -1)


def scattered_columns(classes: torch.Tensor, grad: torch.Tensor, width: int) -> torch.Tensor:
    """The weight gradient of :func:`gathered_product`, ``[out, width]``: each row's output gradient
    ``grad [N, out]`` added to the column its categoricals drew (``classes [N, C]``; none for -1),
    where the dense product ``grad.T @ state`` multiplies every other column by zero."""
    columns = _columns(classes, width)
    table = grad.new_zeros(width + 1, grad.shape[-1])
    for categorical in columns.unbind(-1):  # one index_add per categorical: no [N * C, out] copy of grad
        table.index_add_(0, categorical, grad)
    return table[:-1].t()


def _columns(classes: torch.Tensor, width: int) -> torch.Tensor:
    """The state's column of each drawn class (categorical ``c`` owns columns ``c * K`` to ``c * K + K - 1``);
    ``width`` (the zero row of a gather table) for a zeroed categorical."""
    offsets = torch.arange(0, width, width // classes.shape[-1], device=classes.device)
    return torch.where(classes < 0, width, classes + offsets)


class _GatheredRows(torch.autograd.Function):
    """``rest + state @ weight.T`` for a marked one-hot ``state`` whose categoricals drew ``classes``:
    the columns gathered and summed (:func:`gathered_product`). ``state`` receives the dense
    product's gradient, ``grad @ weight``; ``weight`` the rows' gradients added to the columns drawn
    (:func:`scattered_columns`: one ``index_add`` per categorical, where autograd through the
    gather would sort every index and scatter into the transposed table)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, rest: torch.Tensor, state: torch.Tensor, classes: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(classes, weight)
        return gathered_product(classes, gather_table(weight)) + rest

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        classes, weight = ctx.saved_tensors
        grad_state = grad.matmul(weight) if ctx.needs_input_grad[1] else None
        grad_weight = None
        if ctx.needs_input_grad[3]:
            rows = classes.shape[:-1].numel()
            grad_weight = scattered_columns(classes.reshape(rows, -1), grad.reshape(rows, -1), weight.shape[1])
        return grad, grad_state, None, grad_weight


def latent_linear(inputs: list[torch.Tensor] | tuple[torch.Tensor, ...], layer: nn.Module) -> torch.Tensor:
    """``layer(torch.cat(inputs, -1))``, the columns of marked one-hot inputs gathered, not multiplied."""
    classes = [None if torch.compiler.is_compiling() else one_hot_classes(x) for x in inputs]
    if (
        all(c is None for c in classes)
        or type(layer) is not nn.Linear
        or layer._forward_hooks
        or layer._forward_pre_hooks
    ):
        return layer(inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1))
    weight, bias = layer.weight, layer.bias
    if any(x.dtype != weight.dtype for x in inputs):
        return layer(torch.cat(inputs, -1))
    dense, dense_weights, gathered = [], [], []
    parts = weight.split([x.shape[-1] for x in inputs], -1)  # one gradient, concatenated, for the weight
    for x, drawn, part in zip(inputs, classes, parts, strict=True):
        if drawn is None:
            dense.append(x)
            dense_weights.append(part)
        else:
            gathered.append((x, drawn, part))
    if dense:
        out = F.linear(
            dense[0] if len(dense) == 1 else torch.cat(dense, -1),
            dense_weights[0] if len(dense) == 1 else torch.cat(dense_weights, -1),
            bias,
        )
    else:
        out = bias if bias is not None else weight.new_zeros(())
    for x, drawn, part in gathered:
        out = _GatheredRows.apply(out, x, drawn, part)
    return out
