"""Ragged access to a lazy stack: leaves whose shapes differ between members.

Padded stacks (``as_padded_tensor``, ``get(key, as_padded_tensor=True)``), nested tensors
(``get(key, as_nested_tensor=True)``, ``densify(layout=torch.jagged)``), dense copies
(``densify``, ``to_tensordict``) and the error that points at them when a plain ``get`` cannot
stack a key.
"""

# Mixin of LazyStackedTensorDict: the attributes it reads (tensordicts, stack_dim, _like...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import Any

import torch

from .._core.utils import NO_DEFAULT, NestedKey, _key_to_tuple, normalize_dim, unravel_key
from ..tensordict import TensorDict


class LazyRaggedMixin:
    """Padded, nested and dense views of :class:`~tdict.lazy.LazyStackedTensorDict`, the only
    class that inherits it. The host provides ``tensordicts``, ``stack_dim``, ``_batch_size``,
    ``device``, ``_maybe_names``, ``_common_keys``, ``_member_values`` and ``_combine``."""

    __slots__ = ()

    def as_padded_tensor(
        self, key: NestedKey, dim: int | None = None, value: float | int | bool = 0.0, *, padding_side: str = "right"
    ) -> torch.Tensor:
        """Pad the members' leaves under ``key`` to the largest size on every dim and stack them.

        Args:
            key: a leaf key held by every member.
            dim: where the members go in the result (default: the stack dim).
            value: the padding value.
            padding_side: ``"right"`` (pad after the data) or ``"left"``.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(x=torch.ones(1)), TensorDict(x=torch.ones(3))])
            >>> s.as_padded_tensor("x", value=-1)
            tensor([[ 1., -1., -1.],
                    [ 1.,  1.,  1.]])
        """
        flags = {"as_padded_tensor": True, "padding_value": value, "padding_side": padding_side}
        vals = self._member_values(key, NO_DEFAULT, flags)
        return _pad_stack(key, vals, self.stack_dim if dim is None else dim, value, padding_side)

    def get_nestedtensor(self, key: NestedKey, default: Any = NO_DEFAULT, *, layout: torch.layout | None = None) -> Any:
        """The members' leaves under ``key`` as one nested tensor (their shapes may differ).

        Nested tensors hold their members along dim 0, so the stack dim must be 0. A member
        without ``key`` takes ``default`` when it is a tensor; any other default is returned as
        is when a member lacks the key.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(x=torch.zeros(2)), TensorDict(x=torch.ones(3))])
            >>> [t.tolist() for t in s.get_nestedtensor("x").unbind()]
            [[0.0, 0.0], [1.0, 1.0, 1.0]]
        """
        if self.stack_dim != 0:
            raise RuntimeError(
                "Nested tensors stack their members along their first dim: LazyStackedTensorDict.get_nestedtensor can "
                f"only be called when the stack_dim is 0 (this stack has stack_dim={self.stack_dim}); use "
                "as_padded_tensor(key) or get(key, as_list=True) instead."
            )
        first, *rest = _key_to_tuple(key)
        if rest:
            inner = self.get(first, default)
            if inner is default:
                return default
            return inner.get_nestedtensor(tuple(rest), default, layout=layout)
        vals = [td.get(first, default) for td in self.tensordicts]
        if not isinstance(default, torch.Tensor) and any(v is default for v in vals):
            return default
        if not all(isinstance(v, torch.Tensor) for v in vals):
            raise TypeError(f"get_nestedtensor: key {key!r} is not a tensor leaf in every member.")
        return torch.nested.nested_tensor(vals, layout=layout)

    def densify(self, *, layout: torch.layout = torch.strided) -> TensorDict:
        """A dense TensorDict of the common keys.

        ``layout=torch.strided`` needs equal shapes per key (raises naming the key otherwise);
        ``layout=torch.jagged`` turns ragged leaves into nested tensors (stack dim 0 only) and
        stacks the others densely.
        """
        if layout not in (torch.strided, torch.jagged):
            raise ValueError(f"densify: layout must be torch.strided or torch.jagged, got {layout}.")
        return self._dense(layout, ())

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """A dense TensorDict (a copy) of the keys common to all members."""
        return self._dense(torch.strided, ())

    def _dense(self, layout: torch.layout, prefix: tuple) -> TensorDict:
        tds = [td._dense(layout, prefix) if isinstance(td, LazyRaggedMixin) else td for td in self.tensordicts]
        sd = self.stack_dim
        out = {}
        for key in self._common_keys():
            vals = [td._get_str(key, NO_DEFAULT) for td in tds]
            first = vals[0]
            path = prefix + (key,)
            if isinstance(first, torch.Tensor):
                out[key] = _dense_leaf(unravel_key(path), vals, sd, layout)
            elif first._is_non_tensor:
                out[key] = torch.stack(vals, sd)
            else:
                out[key] = self._combine(unravel_key(path), vals)._dense(layout, path)
        return TensorDict._new_unsafe(out, self._batch_size, self.device, self._maybe_names())


def _stack_error(key: Any, vals: list) -> RuntimeError:
    kinds = {type(v).__name__ for v in vals}
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return RuntimeError(
            f"Failed to stack tensors within a tensordict: key {key!r} holds different kinds of entries in the members "
            f"({sorted(kinds)})."
        )
    shapes = [tuple(v.shape) for v in vals]
    if len(set(shapes)) == 1:
        devices = sorted({str(v.device) for v in vals})
        return RuntimeError(
            f"Failed to stack tensors within a tensordict: key {key!r}, the members' tensors differ in devices or dtypes (devices {devices}, dtypes {sorted({str(v.dtype) for v in vals})})."
        )
    return RuntimeError(
        f"Failed to stack tensors within a tensordict: key {key!r} holds tensors of different shapes {shapes} in the "
        "members, which cannot be stacked densely. "
        f"Use get({key!r}, as_padded_tensor=True) or as_padded_tensor({key!r}) to pad them, "
        f"get({key!r}, as_nested_tensor=True) or densify(layout=torch.jagged) for nested tensors, "
        f"or get({key!r}, as_list=True) for the list."
    )


def _dense_leaf(key: Any, vals: list, sd: int, layout: torch.layout) -> torch.Tensor:
    shape = vals[0].shape
    if all(v.shape == shape for v in vals):
        return torch.stack(vals, sd)
    shapes = [tuple(v.shape) for v in vals]
    if layout is torch.strided:
        raise RuntimeError(
            f"Failed to stack tensors within a tensordict: key {key!r} holds tensors of different shapes {shapes} in the "
            "members; a strided TensorDict needs equal shapes. "
            f"Use densify(layout=torch.jagged), as_padded_tensor({key!r}) or get({key!r}, as_list=True)."
        )
    return _nested(key, vals, sd, layout)


def _nested(key: Any, vals: list, sd: int, layout: torch.layout) -> torch.Tensor:
    if sd != 0:
        raise ValueError(
            f"Key {key!r}: nested tensors need the stack dim first (stack_dim=0), this stack has stack_dim={sd}."
        )
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise TypeError(f"Key {key!r}: nested tensors need tensor leaves in every member.")
    try:
        return torch.nested.as_nested_tensor(vals, layout=layout)
    except (RuntimeError, ValueError, TypeError) as err:
        raise RuntimeError(
            f"Key {key!r}: cannot build a nested tensor ({layout}) from shapes {[tuple(v.shape) for v in vals]}: {err}"
        ) from err


def _pad_stack(key: Any, vals: list, dim: int, value: Any, padding_side: str) -> torch.Tensor:
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}.")
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise TypeError(
            f"as_padded_tensor: key {key!r} is not a tensor leaf in every member ({sorted({type(v).__name__ for v in vals})})."
        )
    ndim = vals[0].dim()
    if any(v.dim() != ndim for v in vals):
        raise RuntimeError(
            f"as_padded_tensor: key {key!r} has tensors with different numbers of dims {[tuple(v.shape) for v in vals]}."
        )
    dim = normalize_dim(dim, ndim + 1)
    maxs = [max(v.shape[i] for v in vals) for i in range(ndim)]
    out_shape = maxs[:dim] + [len(vals)] + maxs[dim:]
    out = torch.full(out_shape, value, dtype=vals[0].dtype, device=vals[0].device)
    right = padding_side == "right"
    for j, v in enumerate(vals):
        region = tuple(slice(0, s) if right else slice(m - s, m) for s, m in zip(v.shape, maxs))
        out.select(dim, j)[region] = v
    return out
