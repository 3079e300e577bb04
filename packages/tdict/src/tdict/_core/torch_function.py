"""torch functions over tensor collections: ``torch.stack``, ``torch.cat`` and friends.

Each handler is registered in :data:`tdict.base.TD_HANDLED_FUNCTIONS`, which
``TensorDictBase.__torch_function__`` consults.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import torch
import torch.nn.functional as F

from ..errors import ShapeMismatchError
from .entries import _set_device_tree
from .locking import keep_lock
from .utils import normalize_dim, parse_device
from ..base import TD_HANDLED_FUNCTIONS, TensorDictBase, is_tensor_collection
from ..tensordict import TensorDict
from ..unbatched import UNBATCHED_TYPES, _combine_unbatched

_Tensor = torch.Tensor


def implements(*funcs: Callable) -> Callable:
    def register(handler: Callable) -> Callable:
        for func in funcs:
            TD_HANDLED_FUNCTIONS[func] = handler
        return handler

    return register


def _check_list(tds: Sequence, what: str) -> None:
    if not isinstance(tds, (list, tuple)) or not tds:
        raise ValueError(
            f"{what} expects a non-empty list of tensor collections, got {type(tds).__name__} of length {len(tds) if hasattr(tds, '__len__') else '?'}."
        )


@implements(torch.stack)
def stack(
    tds: Sequence[TensorDictBase], dim: int = 0, *, out: TensorDictBase | None = None, contiguous: bool | None = None
) -> TensorDictBase:
    """Dense stack of collections with identical keys and batch sizes (``lazy_stack`` for ragged ones).

    ``contiguous`` is accepted for compatibility with tensordict's stack and changes nothing: the
    result is always dense (build a lazy stack explicitly with ``lazy_stack``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> tds = [TensorDict(a=torch.zeros(3), batch_size=[3]) for _ in range(4)]
        >>> torch.stack(tds, 1).batch_size
        torch.Size([3, 4])
    """
    _check_list(tds, "stack")
    first = tds[0]
    bs = first.batch_size
    dim = normalize_dim(dim, len(bs) + 1)
    kind = type(first)
    if kind is not TensorDict or any(type(td) is not kind for td in tds):
        return _stack_special(tds, dim, out)
    for i, td in enumerate(tds):
        if td._batch_size != bs:
            raise RuntimeError(
                f"stack: collection {i} has batch size {list(td._batch_size)}, collection 0 has {list(bs)}; use lazy_stack for different batch sizes."
            )
    new_bs = bs[:dim] + (len(tds),) + bs[dim:]
    dense = cast("Sequence[TensorDict]", tds)  # all plain TensorDicts (checked above)
    entries = {}
    dest = out._tensordict if out is not None else None
    for key, value, values in _values_by_key(dense):
        if isinstance(value, torch.Tensor):
            if type(value) is not _Tensor and type(value) in UNBATCHED_TYPES:  # kept whole: the first one, re-tagged
                combined = _combine_unbatched(values, new_bs, key, "stack")
                if dest is not None:
                    dest[key] = combined
                else:
                    entries[key] = combined
                continue
            try:
                if dest is not None:
                    torch.stack(values, dim, out=dest[key])
                    continue
                entries[key] = torch.stack(values, dim)
            except RuntimeError as err:
                shapes = sorted({tuple(v.shape) for v in values})
                raise RuntimeError(
                    f"stack: key {key!r} has different shapes {shapes} across collections; use lazy_stack."
                ) from err
        else:
            if dest is not None:
                stack(values, dim, out=dest[key])
                continue
            entries[key] = stack(values, dim)
    if out is not None:
        return out
    return TensorDict._new_unsafe(entries, torch.Size(new_bs), dense[0]._device, _stacked_names(tds, dim))


def _values_by_key(tds: Sequence[TensorDict]):
    """``(key, first value, every value)`` per key of plain TensorDicts that must hold the same keys."""
    first = tds[0]
    n_keys = len(first._tensordict)
    for td in tds:
        if len(td._tensordict) != n_keys:
            _raise_key_mismatch(tds)
    for key, value in first._tensordict.items():
        try:
            yield key, value, [td._tensordict[key] for td in tds]
        except KeyError:
            _raise_key_mismatch(tds)


def _stack_special(tds: Sequence, dim: int, out: Any) -> Any:
    """Stacks of non-tensor data, lazy stacks, tensorclasses or mixed collection types."""
    first = tds[0]
    hook = getattr(type(first), "_stack_impl", None)
    if hook is not None:
        return hook(tds, dim, out)
    if all(is_tensor_collection(td) for td in tds):
        return stack([td.to_tensordict() if hasattr(td, "to_tensordict") else td for td in tds], dim, out=out)
    raise TypeError(
        f"stack: expected tensor collections, got {[type(t).__name__ for t in tds]} "
        "(no implementation found for stacking tensors with tensor collections)."
    )


def _stacked_names(tds: Sequence, dim: int):
    """The first collection's names, with the new dim unnamed; none when the collections disagree."""
    names = tds[0]._maybe_names()
    if names is None or any(td._maybe_names() != names for td in tds[1:]):
        return None
    return names[:dim] + [None] + names[dim:]


def _raise_key_mismatch(tds: Sequence) -> None:
    reference = set(tds[0].keys(True, True))
    for i, td in enumerate(tds[1:], 1):
        keys = set(td.keys(True, True))
        if keys != reference:
            raise KeyError(
                f"stack/cat: collection {i} has keys differing from collection 0 "
                f"(missing {sorted(map(str, reference - keys))}, extra {sorted(map(str, keys - reference))}); use lazy_stack."
            )
    raise KeyError("stack/cat: the collections have different keys; use lazy_stack.")


@implements(torch.cat, torch.concatenate, torch.concat)
def cat(tds: Sequence[TensorDictBase], dim: int = 0, *, out: TensorDictBase | None = None) -> TensorDictBase:
    """Concatenate along an existing batch dim; keys and other batch dims must match."""
    _check_list(tds, "cat")
    first = tds[0]
    bs = first.batch_size
    if not bs:
        raise RuntimeError("cat: collections with an empty batch size cannot be concatenated.")
    dim = normalize_dim(dim, len(bs))
    kind = type(first)
    if kind is not TensorDict or any(type(td) is not kind for td in tds):
        hook = getattr(kind, "_cat_impl", None)
        if hook is not None:
            return hook(tds, dim, out)
    for i, td in enumerate(tds):
        try:
            other = td.batch_size
        except AttributeError:  # a tensor (or anything else) among the collections
            raise TypeError(
                f"cat: no implementation found for a {type(td).__name__} (item {i}) concatenated with "
                f"{type(first).__name__}s: every item must be a tensor collection."
            ) from None
        if other != bs and (len(other) != len(bs) or other[:dim] != bs[:dim] or other[dim + 1 :] != bs[dim + 1 :]):
            raise RuntimeError(
                f"cat: collection {i} has batch size {list(other)}, incompatible with {list(bs)} along dim {dim}."
            )
    if out is None and kind is TensorDict:
        return _cat_tensordicts(cast("Sequence[TensorDict]", tds), dim)  # all plain TensorDicts (checked above)
    entries = {}
    dest = None if out is None else out._tensordict if type(out) is TensorDict else None
    new_bs = torch.Size(bs[:dim] + (sum(td.batch_size[dim] for td in tds),) + bs[dim + 1 :])
    n_keys = len(list(first._items_raw()))
    if any(len(list(td._items_raw())) != n_keys for td in tds):
        _raise_key_mismatch(tds)
    for key, value in first._items_raw():
        values = [td._get_str(key, None) for td in tds]
        if any(v is None for v in values):
            _raise_key_mismatch(tds)
        target = None if out is None else (dest[key] if dest is not None else out.get(key))
        if type(value) in UNBATCHED_TYPES:  # kept whole: the first one, tagged with the new batch size
            combined = _combine_unbatched(values, new_bs, key, "cat")
            if out is None:
                entries[key] = combined
            elif dest is not None:
                dest[key] = combined
            else:
                out.set(key, combined)
        elif isinstance(value, torch.Tensor):
            if target is not None:
                torch.cat(values, dim, out=target)
            else:
                entries[key] = torch.cat(values, dim)
        elif target is not None:
            cat(values, dim, out=target)
        else:
            entries[key] = cat(values, dim)
    if out is not None:
        return out
    return TensorDict._new_unsafe(entries, new_bs, first.device, first._maybe_names())


def _cat_tensordicts(tds: Sequence[TensorDict], dim: int) -> TensorDict:
    """``cat`` of plain TensorDicts whose batch sizes were checked: a direct walk of their entries."""
    entries = {}
    bs = tds[0]._batch_size
    total = 0
    for td in tds:
        total += td._batch_size[dim]
    new_bs = bs[:dim] + (total,) + bs[dim + 1 :]
    for key, value, values in _values_by_key(tds):
        if isinstance(value, torch.Tensor):
            if type(value) is not _Tensor and type(value) in UNBATCHED_TYPES:  # kept whole: the first one, re-tagged
                entries[key] = _combine_unbatched(values, new_bs, key, "cat")
                continue
            try:
                entries[key] = torch.cat(values, dim)
            except (RuntimeError, TypeError) as err:
                shapes = sorted({tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__ for v in values})
                raise RuntimeError(f"cat: key {key!r} cannot be concatenated along dim {dim}: {shapes}.") from err
        elif type(value) is TensorDict and _plain_and_aligned(key, values, value._batch_size, dim):
            entries[key] = _cat_tensordicts(values, dim)
        else:
            entries[key] = cat(values, dim)
    return TensorDict._new_unsafe(entries, new_bs, tds[0]._device, tds[0]._names)


def _plain_and_aligned(key: str, values: list, batch_size: torch.Size, dim: int) -> bool:
    """True when every value is a plain TensorDict; raise if their batch dims after ``dim`` differ."""
    for v in values:
        if type(v) is not TensorDict:
            return False
        if v._batch_size != batch_size and v._batch_size[dim + 1 :] != batch_size[dim + 1 :]:
            raise RuntimeError(
                f"cat: nested key {key!r} has batch sizes {[list(x._batch_size) for x in values]}, incompatible along dim {dim}."
            )
    return True


@implements(torch.unbind)
def _unbind(td: TensorDictBase, dim: int = 0) -> tuple:
    return td.unbind(dim)


@implements(torch.split)
def _split(td: TensorDictBase, split_size_or_sections: Any, dim: int = 0) -> tuple:
    return td.split(split_size_or_sections, dim)


@implements(torch.chunk)
def _chunk(td: TensorDictBase, chunks: int, dim: int = 0) -> tuple:
    return td.chunk(chunks, dim)


@implements(torch.where)
def _where(condition: torch.Tensor, input: Any, other: Any, *, out: Any = None) -> TensorDictBase:
    if is_tensor_collection(input):
        return input.where(condition, other, out=out)
    # other is the collection: flip the condition
    return other.where(~condition, input, out=out)


@implements(torch.gather)
def _gather(td: TensorDictBase, dim: int, index: torch.Tensor, *, out: Any = None) -> TensorDictBase:
    return td.gather(dim, index, out=out)


@implements(torch.clone)
def _clone(td: TensorDictBase, *, memory_format: Any = None) -> TensorDictBase:
    return td.clone()


@implements(torch.squeeze)
def _squeeze(td: TensorDictBase, dim: Any = None) -> TensorDictBase:
    return td.squeeze(dim)


@implements(torch.unsqueeze)
def _unsqueeze(td: TensorDictBase, dim: int) -> TensorDictBase:
    return td.unsqueeze(dim)


@implements(torch.permute)
def _permute(td: TensorDictBase, dims: Sequence[int]) -> TensorDictBase:
    return td.permute(*dims)


@implements(torch.reshape)
def _reshape(td: TensorDictBase, shape: Sequence[int]) -> TensorDictBase:
    return td.reshape(*shape)


@implements(torch.flatten)
def _flatten(td: TensorDictBase, start_dim: int = 0, end_dim: int = -1) -> TensorDictBase:
    return td.flatten(start_dim, end_dim)


@implements(torch.unflatten)
def _unflatten(td: TensorDictBase, dim: int, sizes: Sequence[int]) -> TensorDictBase:
    return td.unflatten(dim, sizes)


@implements(torch.transpose)
def _transpose(td: TensorDictBase, dim0: int, dim1: int) -> TensorDictBase:
    return td.transpose(dim0, dim1)


@implements(torch.masked_fill)
def _masked_fill(td: TensorDictBase, mask: torch.Tensor, value: Any) -> TensorDictBase:
    return td.masked_fill(mask, value)


def _like(fn: Callable) -> Callable:
    def handler(td: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        out = td._map_entries(
            lambda v: (
                fn(v, *args, **kwargs)
                if isinstance(v, torch.Tensor)
                else handler(v, *args, **kwargs)
                if not v._is_non_tensor
                else v
            ),
            td.batch_size,
            td._maybe_names(),
        )
        if kwargs.get("device") is not None:  # the leaves moved: so does the collection
            _set_device_tree(out, parse_device(kwargs["device"]))
        return keep_lock(td, out)

    return handler


for _fn in (
    torch.zeros_like,
    torch.ones_like,
    torch.empty_like,
    torch.full_like,
    torch.rand_like,
    torch.randn_like,
    torch.randint_like,
):
    TD_HANDLED_FUNCTIONS[_fn] = _like(_fn)


def pad(
    td: TensorDictBase, pad_size: Sequence[int], value: float = 0.0, inplace: bool = False, safe: bool = True
) -> TensorDictBase:
    """Pad batch dims: ``pad_size = [dim0_before, dim0_after, dim1_before, ...]`` from the first dim on.

    Tensors are padded with ``value``; non-tensor entries hold ``None`` in the padded slots.
    Negative sizes crop, as in ``torch.nn.functional.pad``. ``inplace`` / ``safe``: see
    :meth:`TensorDictBase.pad <tdict.TensorDict.pad>`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, pad
        >>> pad(TensorDict(a=torch.ones(2, 3), batch_size=[2]), [1, 0]).batch_size
        torch.Size([3])
    """
    if getattr(td, "_is_non_tensor", False):
        return _pad_non_tensor(td, pad_size, value, inplace)
    if inplace:
        return td.pad(pad_size, value, inplace=True)
    pairs, bs = _pad_pairs(td.batch_size, pad_size)
    return td._map_entries(lambda v: _pad_entry(v, pairs, value), bs, td._maybe_names())


def _pad_pairs(batch_size: torch.Size, pad_size: Sequence[int]) -> tuple:
    """``pad_size`` checked against ``batch_size``: its ``(before, after)`` pairs and the padded batch size."""
    pad_size = list(pad_size)
    if len(pad_size) % 2 or len(pad_size) // 2 > len(batch_size) or not all(isinstance(p, int) for p in pad_size):
        raise ValueError(
            f"pad: pad_size must hold two ints per padded batch dim (at most {len(batch_size)} dims), got {pad_size}."
        )
    pairs = [tuple(pad_size[i : i + 2]) for i in range(0, len(pad_size), 2)]
    bs = list(batch_size)
    for i, (before, after) in enumerate(pairs):
        bs[i] += before + after
        if bs[i] < 0:
            raise ShapeMismatchError(
                f"pad: negative output size, pad_size {pad_size} shrinks batch dim {i} of size {batch_size[i]} "
                f"below zero (to {bs[i]})."
            )
    return pairs, torch.Size(bs)


def _pad_non_tensor(td: Any, pad_size: Sequence[int], value: float, inplace: bool) -> Any:
    """``pad`` of a top-level NonTensorData / NonTensorStack: a NonTensorStack with ``None`` in the
    padded slots; ``inplace=True`` pads a NonTensorStack in place (a NonTensorData cannot)."""
    if inplace and not td._is_lazy:
        raise RuntimeError(
            "pad(inplace=True): padding turns a NonTensorData into a NonTensorStack, which cannot preserve "
            "the identity of the NonTensorData; pass inplace=False."
        )
    if inplace and td.is_locked:
        raise RuntimeError("pad(inplace=True): the NonTensorStack is locked; unlock_() it first.")
    pairs = _pad_pairs(td.batch_size, pad_size)[0]
    out = _pad_entry(td, pairs, value)
    if not inplace:
        return out
    td._origins, td._table = out._origins, out._table
    return td


def _pad_spec(pairs: list, ndim: int) -> list:
    """``F.pad``'s spec (last dim first) padding the leading dims of an ``ndim``-dim tensor by ``pairs``."""
    spec = [0, 0] * (ndim - len(pairs))
    for before, after in reversed(pairs):
        spec += [before, after]
    return spec


def _pad_entry(v: Any, pairs: list, value: float) -> Any:
    if type(v) in UNBATCHED_TYPES:
        return v  # the same tensor, as in tensordict
    if isinstance(v, torch.Tensor):
        return F.pad(v, _pad_spec(pairs, v.dim()), value=value)
    if not v._is_non_tensor:
        return pad(v, [p for pair in pairs for p in pair], value)
    from ..non_tensor_stack import NonTensorStack

    if v._is_lazy:
        origins, table = v._origins, list(v._table)
    else:
        origins, table = torch.zeros(v.batch_size, dtype=torch.long), [v.data]
    table.append(None)  # what the padded slots hold
    padded = F.pad(origins, _pad_spec(pairs, origins.dim()), value=len(table) - 1)
    return NonTensorStack._new(padded, table, v.device)


# ---------------------------------------------------------------------- shape ops as torch functions
@implements(torch.movedim, torch.moveaxis)
def _movedim(td: TensorDictBase, source: Any, destination: Any) -> TensorDictBase:
    return td.movedim(source, destination)


@implements(torch.swapdims, torch.swapaxes)
def _swapdims(td: TensorDictBase, dim0: Any = None, dim1: Any = None, **kwargs: Any) -> TensorDictBase:
    dim0, dim1 = kwargs.pop("axis0", dim0), kwargs.pop("axis1", dim1)  # torch.swapaxes' names
    if dim0 is None or dim1 is None or kwargs:
        raise TypeError(
            f"swapdims: expected two dims (dim0, dim1), got dim0={dim0}, dim1={dim1} and extra arguments {sorted(kwargs)}."
        )
    return td.swapdims(dim0, dim1)


@implements(torch.narrow)
def _narrow(td: TensorDictBase, dim: int, start: int, length: int) -> TensorDictBase:
    return td.narrow(dim, start, length)


@implements(torch.tile)
def _tile(td: TensorDictBase, dims: Sequence[int]) -> TensorDictBase:
    return td.tile(dims)


@implements(torch.broadcast_to)
def _broadcast_to(td: TensorDictBase, size: Sequence[int]) -> TensorDictBase:
    return td.broadcast_to(size)


def _atleast(method: str) -> Callable:
    def handler(*tds: Any) -> Any:
        items = tds[0] if len(tds) == 1 and isinstance(tds[0], (list, tuple)) else tds
        out = tuple(getattr(td, method)() if is_tensor_collection(td) else getattr(torch, method)(td) for td in items)
        return out[0] if len(tds) == 1 and not isinstance(tds[0], (list, tuple)) else out

    return handler


for _name in ("atleast_1d", "atleast_2d", "atleast_3d"):
    TD_HANDLED_FUNCTIONS[getattr(torch, _name)] = _atleast(_name)


@implements(torch.tensor_split)
def _tensor_split(td: TensorDictBase, indices_or_sections: Any = None, dim: int = 0, **kwargs: Any) -> tuple:
    if indices_or_sections is None:  # torch's keyword spellings
        for name in ("sections", "indices", "tensor_indices_or_sections"):
            if name in kwargs:
                indices_or_sections = kwargs.pop(name)
    if indices_or_sections is None or kwargs:
        raise TypeError(f"tensor_split: expected indices_or_sections and dim, got extra arguments {sorted(kwargs)}.")
    return td.tensor_split(indices_or_sections, dim)


@implements(torch.flip)
def _flip(td: TensorDictBase, dims: Any) -> TensorDictBase:
    return td.flip(dims)


@implements(torch.fliplr)
def _fliplr(td: TensorDictBase) -> TensorDictBase:
    return td.fliplr()


@implements(torch.flipud)
def _flipud(td: TensorDictBase) -> TensorDictBase:
    return td.flipud()


@implements(torch.rot90)
def _rot90(td: TensorDictBase, k: int = 1, dims: Sequence[int] = (0, 1)) -> TensorDictBase:
    return td.rot90(k, dims)


@implements(torch.roll)
def _roll(td: TensorDictBase, shifts: Any, dims: Any = None) -> TensorDictBase:
    return td.roll(shifts, dims)


# ---------------------------------------------------------------------- reductions as torch functions
# torch.sum(td, ...) is td.sum(...): dims are batch dims, the arguments those of the method.
@implements(torch.sum)
def _sum(td: TensorDictBase, *args: Any, **kwargs: Any) -> Any:
    return td.sum(*args, **kwargs)


@implements(torch.mean)
def _mean(td: TensorDictBase, *args: Any, **kwargs: Any) -> Any:
    """``torch.mean(td, dim=None, keepdim=False, *, dtype=None)`` as :meth:`TensorDict.mean`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(a=torch.arange(6.0).view(2, 3), batch_size=[2])
        >>> torch.mean(td, dim=0)["a"]
        tensor([1.5000, 2.5000, 3.5000])
    """
    return td.mean(*args, **kwargs)


def _with_correction(kwargs: dict) -> dict:
    """torch's ``unbiased=`` keyword as the method's ``correction=`` (torch's parser refuses both at once)."""
    if "unbiased" in kwargs:
        kwargs = dict(kwargs)
        kwargs["correction"] = int(bool(kwargs.pop("unbiased")))
    return kwargs


@implements(torch.std)
def _std(td: TensorDictBase, *args: Any, **kwargs: Any) -> Any:
    """``torch.std(td, dim, keepdim, *, correction)`` as :meth:`TensorDict.std` (``unbiased=`` maps to ``correction``).

    As in tensordict, positional arguments after ``td`` are the method's: ``(dim, keepdim)``.
    """
    return td.std(*args, **_with_correction(kwargs))


@implements(torch.var)
def _var(td: TensorDictBase, *args: Any, **kwargs: Any) -> Any:
    """``torch.var(td, dim, keepdim, *, correction)`` as :meth:`TensorDict.var` (see :func:`_std`)."""
    return td.var(*args, **_with_correction(kwargs))


@implements(torch.masked_select)
def _masked_select(td: Any, mask: Any, *, out: Any = None) -> TensorDictBase:
    """``torch.masked_select(td, mask)`` is ``td.masked_select(mask)``: the masked batch dims become one.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(a=torch.arange(6).view(3, 2), batch_size=[3])
        >>> torch.masked_select(td, torch.tensor([True, False, True]))["a"]
        tensor([[0, 1],
                [4, 5]])
    """
    if not is_tensor_collection(td):
        raise TypeError(f"masked_select: input must be a tensor collection, got {type(td).__name__}.")
    if out is not None:
        raise TypeError("masked_select: out= is not supported for tensor collections.")
    return td.masked_select(mask)


def _extremum(name: str) -> Callable:
    def handler(input: Any, other: Any, *, out: Any = None) -> Any:
        if out is not None:
            raise TypeError(f"{name}: out= is not supported for tensor collections; use {name}_ for in place.")
        if is_tensor_collection(input):
            return getattr(input, name)(other)
        return getattr(other, name)(input)  # the collection came second: the op is symmetric

    handler.__name__ = handler.__qualname__ = f"_{name}"
    return handler


TD_HANDLED_FUNCTIONS[torch.maximum] = _extremum("maximum")
TD_HANDLED_FUNCTIONS[torch.minimum] = _extremum("minimum")


# ---------------------------------------------------------------------- losses
_REDUCTIONS = ("none", "mean", "sum")


def _legacy_reduction(size_average: Any, reduce: Any) -> str:
    """The ``reduction`` torch derives from the deprecated ``size_average`` / ``reduce`` flags."""
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _loss(fn: Callable) -> Callable:
    name = fn.__name__

    def handler(
        input: Any,
        target: Any,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        weight: Any = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        if size_average is not None or reduce is not None:
            reduction = _legacy_reduction(size_average, reduce)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{name}: reduction must be one of {list(_REDUCTIONS)}, got {reduction!r}.")
        for arg, value in (("input", input), ("target", target)):
            if not is_tensor_collection(value):
                raise TypeError(
                    f"{name}: input and target must both be tensor collections with the same keys, got {arg} of type {type(value).__name__}."
                )
        others = [target]
        if is_tensor_collection(weight):
            others.append(weight)
        elif weight is not None:
            kwargs["weight"] = weight  # one tensor for every leaf

        def leaf(x: torch.Tensor, y: torch.Tensor, w: Any = None) -> torch.Tensor:
            return (
                fn(x, y, reduction=reduction, **kwargs)
                if w is None
                else fn(x, y, reduction=reduction, weight=w, **kwargs)
            )

        # per leaf: "none" keeps the batch dims, "mean" and "sum" give one scalar per leaf
        out = input.apply(leaf, *others, batch_size=None if reduction == "none" else ())
        return keep_lock(input, out)

    handler.__name__ = handler.__qualname__ = f"_{name}"
    handler.__doc__ = f"``F.{name}(input, target, reduction=...)`` leaf by leaf; ``mean``/``sum`` give a batch-less collection of scalars."
    return handler


for _fn in (F.l1_loss, F.mse_loss, F.smooth_l1_loss):
    TD_HANDLED_FUNCTIONS[_fn] = _loss(_fn)


# ---------------------------------------------------------------------- autograd
def _single_collection(value: Any, what: str) -> Any:
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(
                f"torch.autograd.grad on tensor collections takes a single {what} collection, got a sequence of {len(value)}."
            )
        value = value[0]
    if not is_tensor_collection(value):
        raise ValueError(
            f"torch.autograd.grad on tensor collections takes a tensor collection as {what}, got {type(value).__name__}."
        )
    return value


@implements(torch.autograd.grad)
def _grad(outputs: Any, inputs: Any, grad_outputs: Any = None, **kwargs: Any) -> Any:
    """``torch.autograd.grad(td_out, td_in, td_grad_out)``: gradients of every leaf of ``td_out``
    w.r.t. every leaf of ``td_in``, as a collection shaped like ``td_in``.

    ``grad_outputs`` (a collection with ``td_out``'s keys) may be omitted for scalar leaves; the
    other keyword arguments are torch's. Leaves without a gradient (``allow_unused=True``) are left
    out of the result.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> x = TensorDict(a=torch.tensor([1.0, 2.0], requires_grad=True), batch_size=[2])
        >>> y = x * x
        >>> torch.autograd.grad(y, x, torch.ones_like(y))["a"]
        tensor([2., 4.])
    """
    outputs = _single_collection(outputs, "outputs")
    inputs = _single_collection(inputs, "inputs")
    out_keys, out_leaves = [], []
    for key, value in outputs.items(True, True):
        if isinstance(value, torch.Tensor):
            out_keys.append(key)
            out_leaves.append(value)
    grad_leaves = None
    if grad_outputs is not None:
        grad_outputs = _single_collection(grad_outputs, "grad_outputs")
        grad_leaves = []
        for key in out_keys:
            value = grad_outputs.get(key, None)
            if not isinstance(value, torch.Tensor):
                raise KeyError(f"torch.autograd.grad: grad_outputs has no tensor at key {key!r}, which outputs has.")
            grad_leaves.append(value)
    in_leaves = inputs._tensor_leaves()[1]  # the leaves themselves (a lazy stack's members' leaves)
    grads = torch.autograd.grad(out_leaves, in_leaves, grad_leaves, **kwargs)
    by_leaf = {id(leaf): grad for leaf, grad in zip(in_leaves, grads)}
    # None (an unused leaf, with allow_unused=True) drops the key, as in tensordict
    return keep_lock(inputs, inputs.apply(lambda v: by_leaf[id(v)]))
