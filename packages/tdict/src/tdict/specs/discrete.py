"""Discrete specs: Categorical, OneHot, Binary, MultiCategorical, MultiOneHot."""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import torch

from .base import TensorSpec, _cartesian, _count, _draw_on, _leaf_device, _moved, _size, _spec_shape

__all__ = ["Binary", "Categorical", "MultiCategorical", "MultiOneHot", "OneHot"]


# OneHot.rand takes rows of a cached identity matrix up to this many categories (F.one_hot beyond)
_ONE_HOT_TABLE_MAX = 256


@functools.lru_cache(maxsize=64)
def _one_hot_table(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.eye(n, dtype=dtype, device=device)


def _masked_sample(mask: torch.Tensor, lead: torch.Size, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices drawn uniformly among the True entries of ``mask`` (last dim), ``lead`` prepended."""
    m = mask.expand(lead + mask.shape)
    flat = m.reshape(-1, m.shape[-1]).float()
    if (flat.sum(-1) == 0).any():
        raise RuntimeError("rand: a mask row has no allowed action")
    index = torch.multinomial(_moved(flat, _draw_on(flat.device, generator)), 1, generator=generator)
    return _moved(index, flat.device).reshape(m.shape[:-1])


def _enum_batch(values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``values`` (``[K, event]``) broadcast over the batch dims of ``shape``: ``[K, *shape]``."""
    k, ev = values.shape[0], values.shape[1:]
    nb = len(shape) - len(ev)
    return values.reshape((k,) + (1,) * nb + ev).expand((k,) + shape).clone()


class Categorical(TensorSpec):
    """Integer actions in ``0..n-1``, optionally restricted by a boolean action mask.

    Args:
        n: number of categories.
        shape: the spec shape (default ``()``).
        device: where generated values live.
        dtype: integer dtype (default ``torch.int64``).
        mask: boolean tensor of shape ``shape + (n,)``; ``False`` actions are never sampled.

    Examples:
        >>> import torch
        >>> from tdict.specs import Categorical
        >>> spec = Categorical(4, mask=torch.tensor([True, False, True, False]))
        >>> bool(torch.isin(spec.rand((100,)), torch.tensor([0, 2])).all())
        True
        >>> spec.is_in(torch.tensor(1)), spec.to_one_hot(torch.tensor(2)).tolist()
        (False, [False, False, True, False])
    """

    def __init__(
        self,
        n: int,
        shape: Any = None,
        device: Any = None,
        dtype: torch.dtype | None = torch.int64,
        mask: torch.Tensor | None = None,
    ) -> None:
        self.n = _count(n, "Categorical", "n")
        super().__init__(shape, device, dtype or torch.int64)
        if mask is not None:
            self.update_mask(mask)

    @property
    def mask(self) -> torch.Tensor | None:
        """The boolean action mask (``False``: never sampled), or ``None`` (see :meth:`update_mask`)."""
        return self._tensors.get("mask")

    @property
    def space(self):
        """The spec itself (TorchRL's ``spec.space``, for code that reads ``space.n``)."""
        return self

    def _mask_shape(self) -> torch.Size:
        return self.shape + (self.n,)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or clear with ``None``) the boolean action mask."""
        if mask is None:
            self._tensors.pop("mask", None)
            return
        mask = torch.as_tensor(mask, device=self.device)
        if mask.dtype is not torch.bool:
            raise TypeError(f"{type(self).__name__}.update_mask: mask must be bool, got {mask.dtype}")
        try:
            mask = mask.expand(self._mask_shape())
        except RuntimeError:
            raise ValueError(
                f"{type(self).__name__}.update_mask: mask shape {tuple(mask.shape)} does not broadcast to {tuple(self._mask_shape())}"
            ) from None
        self._tensors["mask"] = mask.clone()

    def _extra_eq(self, other: Any) -> bool:
        return self.n == other.n

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        mask = self._tensors.get("mask")
        if mask is None:
            on = _draw_on(self.device, generator)
            x = torch.randint(0, self.n, self._full(shape), dtype=self.dtype, device=on, generator=generator)
            return x if generator is None else _moved(x, self.device)
        return _masked_sample(mask, _size(shape), generator).to(self.dtype)

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        bad = (val < 0) | (val >= self.n)
        if bad.any():
            return f"value {val[bad].flatten()[:5].tolist()} outside the categories 0..{self.n - 1}"
        mask = self._tensors.get("mask")
        if mask is not None:
            allowed = mask.expand(val.shape + (self.n,)).gather(-1, val.long().unsqueeze(-1)).squeeze(-1)
            if not allowed.all():
                return f"value {val[~allowed].flatten()[:5].tolist()} is a masked action"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.is_floating_point():
            val = val.round()
        val = val.clamp(0, self.n - 1)
        mask = self._tensors.get("mask")
        if mask is not None:  # the nearest allowed action
            dist = (torch.arange(self.n, device=val.device) - val.unsqueeze(-1)).abs().float()
            val = dist.masked_fill(~mask.to(val.device), float("inf")).argmin(-1)
        return val.to(self.dtype)

    def cardinality(self) -> int:
        """Number of distinct actions (batch dims share the action, as in TorchRL)."""
        return self.n

    def enumerate(self) -> torch.Tensor:
        """Every action, stacked along a new leading dim: shape ``(n, *shape)`` (batch dims share it)."""
        vals = torch.arange(self.n, dtype=self.dtype, device=self.device)
        return vals.reshape((self.n,) + (1,) * len(self.shape)).expand((self.n,) + self.shape).clone()

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """``tensor_to_index[..., index]`` element-wise: the entry of the last dim each action selects.

        ``index`` (a value of this spec) broadcasts against ``tensor_to_index.shape[:-1]``; the
        result has that shape.
        """
        if not isinstance(index, torch.Tensor):
            raise ValueError(f"{type(self).__name__}.index: index must be a tensor, got {type(index).__name__}")
        idx = index.long().unsqueeze(-1)
        idx = idx.expand(torch.broadcast_shapes(idx.shape[:-1], tensor_to_index.shape[:-1]) + (1,))
        return tensor_to_index.expand(idx.shape[:-1] + tensor_to_index.shape[-1:]).gather(-1, idx).squeeze(-1)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Categorical value to its one-hot (bool) encoding (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return torch.nn.functional.one_hot(val.long(), self.n).bool()

    def to_one_hot_spec(self) -> "OneHot":
        """The matching :class:`OneHot` spec: shape ``shape + (n,)``, bool dtype, same mask and device."""
        return OneHot(self.n, self.shape + (self.n,), self.device, torch.bool, mask=self.mask)

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """``val`` itself: it is categorical already (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return val

    def to_categorical_spec(self) -> "Categorical":
        """The spec itself: it is categorical already."""
        return self

    def _repr_extra(self) -> str:
        return f", n={self.n}" + (", masked" if self.mask is not None else "")


class OneHot(TensorSpec):
    """One-hot actions: the last dim (of size ``n``) holds exactly one ``True``.

    Args:
        n: number of categories.
        shape: the spec shape, ending with ``n`` (default ``(n,)``).
        device: where generated values live.
        dtype: the dtype (default ``torch.bool``).
        mask: boolean tensor of shape ``shape``; ``False`` actions are never sampled.

    Examples:
        >>> import torch
        >>> from tdict.specs import OneHot
        >>> spec = OneHot(3)
        >>> x = spec.rand((5,))
        >>> x.shape, bool((x.sum(-1) == 1).all())
        (torch.Size([5, 3]), True)
        >>> spec.encode(2).tolist(), spec.to_numpy(spec.encode(2)).item()
        ([False, False, True], 2)
    """

    _ev = 1

    def __init__(
        self,
        n: int,
        shape: Any = None,
        device: Any = None,
        dtype: torch.dtype | None = torch.bool,
        mask: torch.Tensor | None = None,
    ) -> None:
        self.n = n = _count(n, type(self).__name__, "n")
        shape = _spec_shape(shape, type(self).__name__) if shape is not None else torch.Size((n,))
        if not shape or shape[-1] != n:
            raise ValueError(f"{type(self).__name__}: the last dim of shape {tuple(shape)} must be n={n}")
        super().__init__(shape, device, dtype or torch.bool)
        if mask is not None:
            self.update_mask(mask)

    mask = Categorical.mask
    update_mask = Categorical.update_mask
    _extra_eq = Categorical._extra_eq
    _repr_extra = Categorical._repr_extra

    @property
    def space(self):
        """The spec itself (TorchRL's ``spec.space``, for code that reads ``space.n``)."""
        return self

    def _mask_shape(self) -> torch.Size:
        return self.shape

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        mask = self._tensors.get("mask")
        lead = _size(shape)
        if mask is None:
            on = _draw_on(self.device, generator)
            idx = torch.randint(0, self.n, lead + self.shape[:-1], device=on, generator=generator)
            idx = idx if generator is None else _moved(idx, self.device)
        else:
            idx = _masked_sample(mask, lead, generator)
        if self.n > _ONE_HOT_TABLE_MAX:
            return torch.nn.functional.one_hot(idx, self.n).to(self.dtype)
        return _one_hot_table(self.n, self.dtype, idx.device)[idx]  # rows of an identity: no range check, no cast

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        if not ((val == 0) | (val == 1)).all() or not (val.sum(-1) == 1).all():
            return "value is not one-hot along the last dim (exactly one 1, the rest 0)"
        mask = self._tensors.get("mask")
        if mask is not None and (val.bool() & ~mask).any():
            return "value selects a masked action"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        score = val.float()
        mask = self._tensors.get("mask")
        if mask is not None:  # the highest-scoring allowed action
            score = score.masked_fill(~mask.to(val.device), float("-inf"))
        return torch.nn.functional.one_hot(score.argmax(-1), self.n).to(self.dtype)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Encode category indices (numpy/int) as one-hot values."""
        idx = torch.as_tensor(val, device=None if ignore_device else self.device)
        if (idx >= self.n).any() or (idx < 0).any():
            raise ValueError(f"{type(self).__name__}.encode: index {idx.tolist()} outside 0..{self.n - 1}")
        return torch.nn.functional.one_hot(idx.long(), self.n).to(self.dtype)

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None):
        """The category index of each one-hot value, as numpy."""
        if safe:
            self.assert_is_in(val)
        return val.long().argmax(-1).cpu().numpy()

    def cardinality(self) -> int:
        """Number of distinct actions (batch dims share the action, as in TorchRL)."""
        return self.n

    def enumerate(self) -> torch.Tensor:
        """Every action, stacked along a new leading dim: shape ``(n, *shape)`` (batch dims share it)."""
        return _enum_batch(torch.eye(self.n, dtype=self.dtype, device=self.device), self.shape)

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """The entry of ``tensor_to_index``'s last dim each one-hot action selects (see :meth:`Categorical.index`)."""
        if not isinstance(index, torch.Tensor):
            raise ValueError(f"{type(self).__name__}.index: index must be a tensor, got {type(index).__name__}")
        # Categorical's implementation (it reads only the class name of self)
        return Categorical.index(self, index.long().argmax(-1), tensor_to_index)  # pyright: ignore[reportArgumentType]

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """One-hot value to its category index (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return val.long().argmax(-1)

    def to_categorical_spec(self) -> Categorical:
        """The matching :class:`Categorical` spec: the last dim dropped, int64 dtype, same mask and device."""
        return Categorical(self.n, self.shape[:-1], self.device, torch.int64, mask=self.mask)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """``val`` itself: it is one-hot already (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return val

    def to_one_hot_spec(self) -> "OneHot":
        """The spec itself: it is one-hot already."""
        return self


class Binary(TensorSpec):
    """A vector of ``n`` independent binary values (0 or 1).

    Args:
        n: number of binary elements (default ``shape[-1]``).
        shape: the spec shape, ending with ``n`` (default ``(n,)``).
        device: where generated values live.
        dtype: the dtype (default ``torch.int8``).

    Examples:
        >>> import torch
        >>> from tdict.specs import Binary
        >>> spec = Binary(3)
        >>> spec.rand((4,)).shape, spec.cardinality(), spec.enumerate().shape
        (torch.Size([4, 3]), 8, torch.Size([8, 3]))
        >>> spec.is_in(torch.tensor([0, 1, 2], dtype=torch.int8))
        False
    """

    _ev = 1

    def __init__(
        self, n: int | None = None, shape: Any = None, device: Any = None, dtype: torch.dtype | None = torch.int8
    ) -> None:
        if shape is None:
            if n is None:
                raise ValueError("Binary: give n or shape")
            shape = (_count(n, "Binary", "n"),)
        shape = _spec_shape(shape, "Binary")
        if n is not None and (not shape or shape[-1] != n):
            raise ValueError(f"Binary: the last dim of shape {tuple(shape)} must be n={n}")
        super().__init__(shape, device, dtype or torch.int8)

    @property
    def n(self) -> int:
        """The number of binary elements (the last dim of the shape)."""
        return self.shape[-1]

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        x = torch.randint(0, 2, self._full(shape), device=_draw_on(self.device, generator), generator=generator)
        return (x if generator is None else _moved(x, self.device)).to(self.dtype)

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        if not ((val == 0) | (val == 1)).all():
            return f"values {val[(val != 0) & (val != 1)].flatten()[:5].tolist()} are not 0/1"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        return (val > 0.5).to(self.dtype)

    def cardinality(self) -> int:
        """``2 ** n`` distinct vectors (batch dims share the value)."""
        return 2**self.n

    def enumerate(self) -> torch.Tensor:
        """All ``2 ** n`` binary vectors: shape ``(2 ** n, *shape)`` (batch dims share the value)."""
        vals = torch.tensor([0, 1], dtype=self.dtype, device=self.device)
        return _enum_batch(_cartesian([vals] * self.n), self.shape)


class MultiCategorical(TensorSpec):
    """Several categorical actions side by side, element ``i`` in ``0..nvec[i]-1``.

    Args:
        nvec: number of categories of each element (a sequence or tensor; a single int gives a spec
            of shape ``()``, like a :class:`Categorical`, as in TorchRL).
        shape: the spec shape, ending with ``len(nvec)`` (default ``nvec.shape``).
        device: where generated values live.
        dtype: integer dtype (default ``torch.int64``).
        mask: optional boolean mask of shape ``shape[:-1] + (sum(nvec),)`` (the blocks of each
            element side by side); masked actions are never sampled.

    Examples:
        >>> import torch
        >>> from tdict.specs import MultiCategorical
        >>> spec = MultiCategorical([2, 3])
        >>> spec.rand((4,)).shape, spec.cardinality()
        (torch.Size([4, 2]), 6)
        >>> spec.is_in(torch.tensor([1, 2])), spec.is_in(torch.tensor([2, 0]))
        (True, False)
    """

    _ev = 1

    def __init__(
        self,
        nvec: int | Sequence[int] | torch.Tensor,
        shape: Any = None,
        device: Any = None,
        dtype: torch.dtype | None = torch.int64,
        mask: Any = None,
    ) -> None:
        dev = _leaf_device(device)
        raw = torch.as_tensor(nvec, device=dev)
        if raw.is_floating_point() or raw.dtype is torch.bool or (raw.numel() and bool((raw < 1).any())):
            raise ValueError(f"MultiCategorical: nvec must hold ints >= 1, got {raw.tolist()}")
        nvec = raw.to(torch.int64)
        if nvec.ndim == 0 and shape is None:  # one element per value, no trailing nvec dim (as in TorchRL)
            self._ev = 0
        elif nvec.ndim == 0:
            nvec = nvec.unsqueeze(0)
        shape = _spec_shape(shape, "MultiCategorical") if shape is not None else nvec.shape
        try:
            nvec = nvec.expand(shape).clone()
        except RuntimeError:
            raise ValueError(
                f"MultiCategorical: nvec of shape {tuple(nvec.shape)} does not broadcast to {tuple(shape)}"
            ) from None
        self.shape, self.device, self.dtype = shape, dev, dtype or torch.int64
        self._tensors = {"nvec": nvec}
        self._finish()
        if mask is not None:
            self.update_mask(mask)

    @property
    def nvec(self) -> torch.Tensor:
        """The number of categories of each element (a tensor broadcast to the spec's shape)."""
        return self._tensors["nvec"]

    mask = Categorical.mask

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set (or clear with ``None``) the boolean action mask, of shape ``shape[:-1] + (sum(nvec),)``.

        Raises:
            ValueError: the spec was built from a single int ``nvec`` (use :class:`Categorical` for a mask).
        """
        if mask is not None and not self._ev:
            raise ValueError(
                "MultiCategorical.update_mask: a spec built from a single int nvec takes no mask; use Categorical"
            )
        Categorical.update_mask(self, mask)  # pyright: ignore[reportArgumentType]

    def _mask_shape(self) -> torch.Size:
        return self._batch_shape + (sum(self._row_nvec()),)

    def _extra_eq(self, other: Any) -> bool:
        return True

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        mask = self._tensors.get("mask")
        if mask is not None:
            lead, start, parts = _size(shape), 0, []
            for k in self._row_nvec():
                parts.append(_masked_sample(mask[..., start : start + k], lead, generator))
                start += k
            return (torch.stack(parts, -1) if self._ev else parts[0]).to(self.dtype)
        on = _draw_on(self.device, generator)
        u = _moved(torch.rand(self._full(shape), dtype=torch.float64, device=on, generator=generator), self.device)
        return torch.minimum((u * self.nvec).floor_().long(), self.nvec - 1).to(self.dtype)

    def _masked_out(self, val: torch.Tensor) -> torch.Tensor | None:
        """Per-element flags of masked actions (``None`` without a mask)."""
        mask = self._tensors.get("mask")
        if mask is None:
            return None
        offsets = torch.tensor([0] + self._row_nvec()[:-1], device=val.device).cumsum(0)
        flat_idx = (val.long().clamp_min(0) + offsets).clamp_max(mask.shape[-1] - 1)
        return ~mask.to(val.device).expand(val.shape[:-1] + mask.shape[-1:]).gather(-1, flat_idx)

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        bad = (val < 0) | (val >= self.nvec)
        if bad.any():
            return f"value {val[bad].flatten()[:5].tolist()} outside 0..nvec-1 (nvec={self.nvec.tolist()})"
        masked = self._masked_out(val)
        if masked is not None and masked.any():
            return f"value {val[masked].flatten()[:5].tolist()} is a masked action"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        if val.is_floating_point():
            val = val.round()
        val = torch.minimum(val.long().clamp_min(0), self.nvec.to(val.device) - 1)
        mask = self._tensors.get("mask")
        if mask is not None:  # the nearest allowed action of each element
            parts, start = [], 0
            for j, k in enumerate(self._row_nvec()):
                dist = (torch.arange(k, device=val.device) - val[..., j : j + 1]).abs().float()
                parts.append(dist.masked_fill(~mask[..., start : start + k].to(val.device), float("inf")).argmin(-1))
                start += k
            val = torch.stack(parts, -1)
        return val.to(self.dtype)

    def _row_nvec(self) -> list[int]:
        flat = self.nvec.reshape(-1, self.shape[-1] if self._ev else 1)
        if not (flat == flat[:1]).all():
            raise NotImplementedError("MultiCategorical: enumerate/cardinality need the same nvec across batch dims")
        return flat[0].tolist()

    def cardinality(self) -> int:
        """Number of distinct action vectors (batch dims share the value)."""
        return math.prod(self._row_nvec())

    def enumerate(self) -> torch.Tensor:
        """All action vectors: shape ``(prod(nvec), *shape)`` (batch dims share the value)."""
        rows = [torch.arange(k, dtype=self.dtype, device=self.device) for k in self._row_nvec()]
        return _enum_batch(_cartesian(rows), self.shape)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Per-element categories to concatenated one-hot (bool) blocks, as :class:`MultiOneHot` holds them.

        Examples:
            >>> import torch
            >>> from tdict.specs import MultiCategorical
            >>> MultiCategorical([2, 3]).to_one_hot(torch.tensor([1, 0])).int().tolist()
            [0, 1, 1, 0, 0]
        """
        if safe:
            self.assert_is_in(val)
        if self._ev == 0:
            return torch.nn.functional.one_hot(val.long(), int(self.nvec.reshape(-1)[0])).bool()
        blocks = [torch.nn.functional.one_hot(v.long(), k) for v, k in zip(val.unbind(-1), self._row_nvec())]
        return torch.cat(blocks, -1).bool()

    def to_one_hot_spec(self) -> "MultiOneHot":
        """The matching :class:`MultiOneHot` spec: the last dim becomes ``sum(nvec)``, bool dtype, same mask and device."""
        rows = self._row_nvec()
        lead = self.shape if self._ev == 0 else self.shape[:-1]
        return MultiOneHot(rows, lead + (sum(rows),), self.device, torch.bool, mask=self.mask)

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """``val`` itself: it is categorical already (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return val

    def to_categorical_spec(self) -> "MultiCategorical":
        """The spec itself: it is categorical already."""
        return self


class MultiOneHot(TensorSpec):
    """Several one-hot actions concatenated along the last dim (sizes ``nvec``).

    Args:
        nvec: size of each one-hot block.
        shape: the spec shape, ending with ``sum(nvec)`` (default ``(sum(nvec),)``).
        device: where generated values live.
        dtype: the dtype (default ``torch.bool``).
        mask: optional boolean mask of shape ``shape``; masked actions are never sampled.

    Examples:
        >>> import torch
        >>> from tdict.specs import MultiOneHot
        >>> spec = MultiOneHot([2, 3])
        >>> x = spec.rand()
        >>> x.shape, int(x.sum()), spec.cardinality()
        (torch.Size([5]), 2, 6)
        >>> spec.to_numpy(spec.encode([1, 2])).tolist()
        [1, 2]
    """

    _ev = 1

    def __init__(
        self,
        nvec: Sequence[int],
        shape: Any = None,
        device: Any = None,
        dtype: torch.dtype | None = torch.bool,
        mask: torch.Tensor | None = None,
    ) -> None:
        self.nvec = [_count(k, "MultiOneHot", "each nvec entry") for k in nvec]
        total = sum(self.nvec)
        shape = _spec_shape(shape, "MultiOneHot") if shape is not None else torch.Size((total,))
        if not shape or shape[-1] != total:
            raise ValueError(f"MultiOneHot: the last dim of shape {tuple(shape)} must be sum(nvec)={total}")
        super().__init__(shape, device, dtype or torch.bool)
        if mask is not None:
            self.update_mask(mask)

    mask = Categorical.mask
    update_mask = Categorical.update_mask
    _mask_shape = OneHot._mask_shape

    def _extra_eq(self, other: Any) -> bool:
        return self.nvec == other.nvec

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        lead = _size(shape)
        mask = self._tensors.get("mask")
        on = _draw_on(self.device, generator)
        parts = []
        start = 0
        for k in self.nvec:
            if mask is None:
                idx = _moved(torch.randint(0, k, lead + self.shape[:-1], device=on, generator=generator), self.device)
            else:
                idx = _masked_sample(mask[..., start : start + k], lead, generator)
            parts.append(torch.nn.functional.one_hot(idx, k))
            start += k
        return torch.cat(parts, -1).to(self.dtype)

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        if not ((val == 0) | (val == 1)).all():
            return "values are not 0/1"
        for i, part in enumerate(val.split(self.nvec, -1)):
            if not (part.sum(-1) == 1).all():
                return f"block {i} (size {self.nvec[i]}) is not one-hot"
        mask = self._tensors.get("mask")
        if mask is not None and (val.bool() & ~mask).any():
            return "value selects a masked action"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        score = val.float()
        mask = self._tensors.get("mask")
        if mask is not None:  # the highest-scoring allowed action of each block
            score = score.masked_fill(~mask.to(val.device), float("-inf"))
        parts = [torch.nn.functional.one_hot(p.argmax(-1), k) for p, k in zip(score.split(self.nvec, -1), self.nvec)]
        return torch.cat(parts, -1).to(self.dtype)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Encode per-block category indices (last dim ``len(nvec)``) as concatenated one-hots, of the spec's shape.

        Raises:
            ValueError: an index is outside its block.
            RuntimeError: the indices do not make a value of the spec's shape ("Shape mismatch").
        """
        idx = torch.as_tensor(val, device=None if ignore_device else self.device).long()
        if idx.shape[-1:] != (len(self.nvec),):
            raise ValueError(
                f"MultiOneHot.encode: expected a last dim of {len(self.nvec)} indices, got shape {tuple(idx.shape)}"
            )
        parts = []
        for i, k in enumerate(self.nvec):
            if (idx[..., i] >= k).any() or (idx[..., i] < 0).any():
                raise ValueError(f"MultiOneHot.encode: index {idx[..., i].tolist()} outside block {i} of size {k}")
            parts.append(torch.nn.functional.one_hot(idx[..., i], k))
        out = torch.cat(parts, -1).to(self.dtype)
        if out.shape != self.shape:  # as TorchRL: the value is one of the spec's shape
            if out.numel() != self.shape.numel():
                raise RuntimeError(
                    f"Shape mismatch: MultiOneHot.encode: shape {list(self.shape)} is invalid for input of size "
                    f"{out.numel()} (indices of shape {tuple(idx.shape)}; expand the spec to encode a batch)"
                )
            out = out.reshape(self.shape)
        return out

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None):
        """Per-block category indices, as numpy (last dim ``len(nvec)``)."""
        if safe:
            self.assert_is_in(val)
        return self.to_categorical(val).cpu().numpy()

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """The category index of each block: a tensor whose last dim is ``len(nvec)``.

        Examples:
            >>> import torch
            >>> from tdict.specs import MultiOneHot
            >>> spec = MultiOneHot([2, 3])
            >>> spec.to_categorical(torch.tensor([0, 1, 0, 0, 1], dtype=torch.bool)).tolist()
            [1, 2]
        """
        if safe:
            self.assert_is_in(val)
        return torch.stack([p.long().argmax(-1) for p in val.split(self.nvec, -1)], -1)

    def to_categorical_spec(self) -> "MultiCategorical":
        """The matching :class:`MultiCategorical` spec: last dim ``len(nvec)``, int64 dtype, same mask and device."""
        return MultiCategorical(
            self.nvec, self.shape[:-1] + (len(self.nvec),), self.device, torch.int64, mask=self.mask
        )

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """``val`` itself: it is one-hot already (checked against the spec first when ``safe``)."""
        if safe:
            self.assert_is_in(val)
        return val

    def to_one_hot_spec(self) -> "MultiOneHot":
        """The spec itself: it is one-hot already."""
        return self

    def cardinality(self) -> int:
        """Number of distinct action vectors (batch dims share the value)."""
        return math.prod(self.nvec)

    def enumerate(self) -> torch.Tensor:
        """All action vectors: shape ``(prod(nvec), *shape)`` (batch dims share the value)."""
        idx = _cartesian([torch.arange(k) for k in self.nvec])
        eyes = [torch.eye(k, dtype=self.dtype, device=self.device) for k in self.nvec]
        return _enum_batch(torch.cat([e[idx[:, j]] for j, e in enumerate(eyes)], -1), self.shape)

    def _repr_extra(self) -> str:
        return f", nvec={self.nvec}"
