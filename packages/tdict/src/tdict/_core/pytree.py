"""pytree registration: ``torch.utils._pytree``, ``torch.func`` and ``torch.vmap`` see collections as trees.

A :class:`~tdict.TensorDict` flattens into its entries (tensors and nested TensorDicts, in key
order); the context holds the keys, batch size, device and names. Non-tensor entries
(:class:`~tdict.NonTensorData`, :class:`~tdict.NonTensorStack`) are no pytree leaves: they ride
in the context, so ``tree_map`` and ``vmap`` only ever see tensors (as in tensordict). An
:class:`~tdict.UnbatchedTensor` rides in the context too (re-tagged with the rebuilt batch
size), so ``vmap`` never maps its dims.

Batch size after a transform
----------------------------
``unflatten`` does not trust the stored batch size blindly: ``vmap`` hands the function leaves
with the mapped dim removed and hands back outputs with a dim inserted at ``out_dims``, and
``jacrev``/``jacfwd`` add a basis dim. The context keeps the shape of one reference tensor leaf
(plus the functorch level at flatten time) and ``unflatten`` compares it with the new one:

- same number of dims: the batch size is the new leading dims (a resized batch dim, e.g. the
  concatenated chunks of ``vmap(..., chunk_size=n)``, is followed);
- one dim less: if the leaf is a ``BatchedTensor`` of a vmap level entered after flattening, its
  batch dim says exactly which dim went away (``vmap`` ``in_dims``); otherwise the batch size is
  kept when it still fits (``tree_map(lambda x: x.sum(-1), td)``), else the first dim whose
  removal explains the new shape is dropped;
- one dim more: the first position that explains the new shape; inside (or just after) the
  batch dims it grows the batch size (``vmap`` ``out_dims``, jacobian basis dims).

Every entry is then checked against the result; if they disagree, the batch size falls back to
the longest leading shape all entries share. Names follow removed/inserted dims.

``torch.vmap`` does not flatten collections through this registration: :mod:`tdict._core.vmap`
makes a TensorDict, tensor class or lazy stack one vmap input whose ``in_dims``/``out_dims`` name
a batch dim (lazy stacks included, along their stack dim too). The inference above still serves
``tree_map``, ``jacrev``/``jacfwd`` and trees rebuilt by torch itself (``vmap(..., chunk_size=n)``
concatenation of plain outputs, ``autograd.Function`` vmap rules). A NonTensorStack is not split
along the mapped dim (each call sees it whole). Under ``torch.compile`` Dynamo cannot trace
functorch's batch-dim introspection, so a TensorDict rebuilt inside a compiled function gets its
batch size from shapes alone: right unless the leaves still start with the old batch size once
the mapped dim is gone (batch ``[4]`` with ``[4, 4]`` leaves keeps batch ``[4]`` there).

``unflatten`` never validates: like a dict, the node holds whatever leaves it is given (torch
builds trees of ints with ``tree_unflatten([0] * n, spec)``; ``tree_map`` may return shapes).
Such a TensorDict is a bare container: read it with ``get``, not with methods that expect tensors.

Registered here: TensorDict and LazyStackedTensorDict (its members are the children). Tensor classes register one class at a time
(:func:`register_tensorclass_type`, called by ``tdict.tensorclass``); a TensorDict subclass
registers with :func:`register_tensordict_type`.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch._C._functorch as _functorch
from torch.utils._pytree import SUPPORTED_NODES, GetAttrKey, MappingKey, SequenceKey, register_pytree_node

from ..lazy import LazyStackedTensorDict
from ..tensordict import TensorDict
from ..unbatched import UNBATCHED_TYPES
from . import vmap as _vmap

__all__ = [
    "PYTREE_REGISTERED_LAZY_TDS",
    "PYTREE_REGISTERED_TDS",
    "register_lazy_stack_type",
    "register_tensorclass_type",
    "register_tensordict_type",
]

_Tensor = torch.Tensor
_is_batched = _functorch.is_batchedtensor
_get_level = _functorch.maybe_get_level
_get_bdim = _functorch.maybe_get_bdim
_current_level = _functorch.maybe_current_level
_is_compiling = torch.compiler.is_compiling


def _is_collection(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensor_collection", False)


def _shape(value: Any) -> torch.Size | None:
    if isinstance(value, _Tensor):
        return value.shape
    if _is_collection(value):
        return value.batch_size
    return None


class _TDContext:
    """Pytree context of a TensorDict.

    Equality (which ``tree_map(f, td1, td2)`` and spec comparisons use) looks at the structure
    only: class, keys, batch size, device, names. The reference leaf (``ref``: a path to the
    first tensor leaf, through nested TensorDicts and tensor classes, else to a child collection;
    ``ref_shape``: its shape or batch size), the functorch level at flatten time and the
    non-tensor payloads are hints for ``unflatten`` and do not take part.
    """

    __slots__ = (
        "cls",
        "keys",
        "child_keys",
        "batch_size",
        "device",
        "names",
        "non_tensor",
        "ref",
        "ref_shape",
        "level",
    )

    def __init__(self, cls, keys, child_keys, batch_size, device, names, non_tensor, ref, ref_shape, level):
        self.cls = cls
        self.keys = keys
        self.child_keys = child_keys
        self.batch_size = batch_size
        self.device = device
        self.names = names
        self.non_tensor = non_tensor
        self.ref = ref
        self.ref_shape = ref_shape
        self.level = level

    def _structure(self) -> tuple:
        return (self.cls, self.keys, self.child_keys, tuple(self.batch_size), self.device, self.names)

    def __eq__(self, other: Any) -> bool:
        return type(other) is _TDContext and self._structure() == other._structure()

    def __hash__(self) -> int:
        return hash(self._structure())

    def __repr__(self) -> str:
        return (
            f"{self.cls.__name__}Context(keys={list(self.keys)}, batch_size={list(self.batch_size)}, "
            f"device={self.device}, names={None if self.names is None else list(self.names)})"
        )


# ---------------------------------------------------------------------------- TensorDict
def _entries(value: Any) -> dict | None:
    """The entry dict of a TensorDict, or of a tensor class's inner TensorDict; else None."""
    if isinstance(value, TensorDict):
        return value._tensordict
    inner = getattr(value, "_tensordict", None)
    return inner._tensordict if isinstance(inner, TensorDict) else None


def _first_tensor(entries: dict) -> tuple | None:
    """``(path, shape)`` of the first tensor leaf below ``entries`` (depth first), or None."""
    for key, value in entries.items():
        if isinstance(value, _Tensor):
            return (key,), value.shape
        sub = _entries(value)
        if sub is not None:
            found = _first_tensor(sub)
            if found is not None:
                return (key,) + found[0], found[1]
    return None


def _td_flatten(td: TensorDict) -> tuple[list, _TDContext]:
    entries = td._tensordict
    children = []
    child_keys = []
    non_tensor = None
    ref = ref_shape = fallback = None
    for key, value in entries.items():
        if isinstance(value, _Tensor):
            if type(value) in UNBATCHED_TYPES:  # rides in the context: vmap must not map its dims
                if non_tensor is None:
                    non_tensor = []
                non_tensor.append((key, value))
                continue
            if ref is None:
                ref, ref_shape = (len(children),), value.shape
        elif not _is_collection(value):
            pass  # an arbitrary pytree leaf, e.g. from tree_unflatten([0] * n, spec)
        elif value._is_non_tensor:
            if non_tensor is None:
                non_tensor = []
            non_tensor.append((key, value))
            continue
        elif ref is None:
            sub = _entries(value)
            found = None if sub is None else _first_tensor(sub)
            if found is not None:
                ref, ref_shape = (len(children),) + found[0], found[1]
            elif fallback is None:
                fallback = len(children), value.batch_size
        children.append(value)
        child_keys.append(key)
    if ref is None and fallback is not None:
        # no tensor leaf anywhere below (e.g. only lazy stacks): follow a child's batch size
        ref, ref_shape = (fallback[0],), fallback[1]
    keys = tuple(entries)
    child_keys = keys if non_tensor is None else tuple(child_keys)
    names = td._names
    ctx = _TDContext(
        type(td),
        keys,
        child_keys,
        td._batch_size,
        td._device,
        None if names is None else tuple(names),
        None if non_tensor is None else tuple(non_tensor),
        ref,
        ref_shape,
        # Dynamo cannot trace functorch introspection: under torch.compile, shapes alone decide
        None if _is_compiling() else _current_level(),
    )
    return children, ctx


def _td_flatten_with_keys(td: TensorDict) -> tuple[list, _TDContext]:
    children, ctx = _td_flatten(td)
    return [(MappingKey(k), v) for k, v in zip(ctx.child_keys, children)], ctx


def _td_unflatten(values: Iterable[Any], ctx: _TDContext) -> TensorDict:
    values = list(values)
    batch_size, names = _infer_batch_size(values, ctx)
    device = ctx.device
    if device is not None:
        for value in values:
            if (isinstance(value, _Tensor) or _is_collection(value)) and value.device != device:
                device = None  # e.g. tree_map(lambda x: x.to("meta"), td)
                break
    if ctx.non_tensor is None:
        source = dict(zip(ctx.child_keys, values))
    else:
        moved = batch_size != ctx.batch_size
        extra = {k: v._with_batch_size(batch_size) if moved else v for k, v in ctx.non_tensor}
        children = iter(values)
        source = {k: extra[k] if k in extra else next(children) for k in ctx.keys}
    # No validation: like a dict, the node holds whatever leaves it is given (torch builds trees
    # of ints with tree_unflatten([0] * n, spec), tree_map may return shapes, None...).
    return ctx.cls._new_unsafe(source, batch_size, device, None if names is None else list(names))


def _infer_batch_size(values: list, ctx: _TDContext) -> tuple[torch.Size, tuple | None]:
    batch_size, names = ctx.batch_size, ctx.names
    ref = ctx.ref
    if ref is not None:
        leaf = values[ref[0]]
        for part in ref[1:]:
            sub = _entries(leaf)
            leaf = None if sub is None else sub.get(part)
        new = _shape(leaf)
        if new is not None and new != ctx.ref_shape:
            batch_size, names = _adjust(batch_size, names, ctx.ref_shape, new, leaf, ctx.level)
    n = len(batch_size)
    for value in values:
        shape = _shape(value)
        if shape is not None and shape[:n] != batch_size:
            return _common_prefix(values, n), None
    return batch_size, names


def _adjust(
    batch_size: torch.Size, names: tuple | None, old: torch.Size, new: torch.Size, leaf: Any, level: int | None
):
    """The batch size (and names) after the reference (a tensor leaf, else a collection) went from shape ``old`` to ``new``."""
    k = len(batch_size)
    diff = len(new) - len(old)
    if diff == 0:
        return (batch_size, names) if new[:k] == batch_size else (torch.Size(new[:k]), names)
    if diff == -1:
        if (
            isinstance(leaf, _Tensor)
            and not _is_compiling()
            and _is_batched(leaf)
            and (level is None or _get_level(leaf) > level)
        ):
            pos = _get_bdim(leaf)  # vmap in_dims: the exact dim that was mapped
        elif new[:k] == batch_size:
            return batch_size, names
        else:
            pos = _first_removal(old, new)
        if pos is None or pos >= k:
            return batch_size, names
        return torch.Size(batch_size[:pos] + batch_size[pos + 1 :]), _without(names, pos)
    if diff == 1:
        pos = _first_insertion(old, new)
        if pos is None or pos > k:
            return batch_size, names
        return torch.Size(new[: k + 1]), _with_none(names, pos)
    return batch_size, names


def _first_removal(old: torch.Size, new: torch.Size) -> int | None:
    for pos in range(len(old)):
        if old[:pos] == new[:pos] and old[pos + 1 :] == new[pos:]:
            return pos
    return None


def _first_insertion(old: torch.Size, new: torch.Size) -> int | None:
    for pos in range(len(new)):
        if new[:pos] == old[:pos] and new[pos + 1 :] == old[pos:]:
            return pos
    return None


def _without(names: tuple | None, pos: int) -> tuple | None:
    if names is None:
        return None
    names = names[:pos] + names[pos + 1 :]
    return names if any(n is not None for n in names) else None


def _with_none(names: tuple | None, pos: int) -> tuple | None:
    return None if names is None else names[:pos] + (None,) + names[pos:]


def _common_prefix(values: list, limit: int) -> torch.Size:
    shapes = [s for s in map(_shape, values) if s is not None]
    if not shapes:
        return torch.Size(())
    first = shapes[0]
    n = min(limit, *(len(s) for s in shapes))
    i = 0
    while i < n and all(s[i] == first[i] for s in shapes):
        i += 1
    return torch.Size(first[:i])


def _td_to_dumpable(ctx: _TDContext) -> dict:
    if ctx.non_tensor is not None:
        raise TypeError(
            f"Cannot serialize the pytree spec of a TensorDict holding non-tensor entries {[k for k, _ in ctx.non_tensor]}."
        )
    return {
        "keys": list(ctx.keys),
        "batch_size": [int(s) for s in ctx.batch_size],
        "device": None if ctx.device is None else str(ctx.device),
        "names": None if ctx.names is None else list(ctx.names),
    }


def _td_from_dumpable(cls: type):
    def load(data: dict) -> _TDContext:
        keys = tuple(data["keys"])
        names = data["names"]
        device = data["device"]
        return _TDContext(
            cls,
            keys,
            keys,
            torch.Size(data["batch_size"]),
            None if device is None else torch.device(device),
            None if names is None else tuple(names),
            None,
            None,
            None,
            None,
        )

    return load


def register_tensordict_type(cls: type) -> None:
    """Register a TensorDict subclass (``_tensordict`` storage, ``_new_unsafe``) as a pytree node."""
    if cls in SUPPORTED_NODES:
        return
    _vmap.register_vmap_kind(cls, "td")
    register_pytree_node(
        cls,
        _td_flatten,
        _td_unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        to_dumpable_context=_td_to_dumpable,
        from_dumpable_context=_td_from_dumpable(cls),
        flatten_with_keys_fn=_td_flatten_with_keys,
    )


# ---------------------------------------------------------------------------- other collections
def register_lazy_stack_type(cls: type) -> None:
    """Register a lazy stack class: it flattens into its members (``tensordicts``).

    The context is ``(cls, stack_dim, stack_dim_name, member batch dims, batch size)``;
    ``cls._new_unsafe(members, stack_dim, batch_size, stack_dim_name)`` rebuilds the stack.

    ``torch.vmap`` maps a lazy stack's batch dims itself (:mod:`tdict._core.vmap`); a pytree rebuild
    whose members gained or lost batch dims raises (the stack dim could not be placed).
    """
    if cls in SUPPORTED_NODES:
        return
    _vmap.register_vmap_kind(cls, "lazy")

    def flatten(obj: Any) -> tuple[list, tuple]:
        tds = list(obj.tensordicts)
        member_dims = len(obj.batch_size) - 1
        return tds, (cls, obj.stack_dim, obj._stack_dim_name, member_dims, obj.batch_size if not tds else None)

    def flatten_with_keys(obj: Any) -> tuple[list, tuple]:
        children, ctx = flatten(obj)
        return [(SequenceKey(i), v) for i, v in enumerate(children)], ctx

    def unflatten(values: Iterable[Any], ctx: tuple) -> Any:
        klass, stack_dim, name, member_dims, empty_batch_size = ctx
        tds = list(values)
        for td in tds:
            if _is_collection(td) and td.batch_dims != member_dims:
                raise RuntimeError(
                    f"{klass.__name__}: a member's batch size went from {member_dims} to {td.batch_dims} dims while "
                    "rebuilding the lazy stack from its pytree (a tree transform that adds or removes leading dims "
                    "of the leaves?): densify it first with lazy.to_tensordict()."
                )
        return klass._new_unsafe(tds, stack_dim, empty_batch_size, name)

    register_pytree_node(cls, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys)


def register_tensorclass_type(cls: type) -> None:
    """Register a tensor class: an instance flattens into one child, its inner TensorDict.

    Call it once per class (``tensorclass._process_class``); registering again is a no-op.
    ``cls._from_tensordict(td)`` rebuilds the instance, and batch-size inference is the inner
    TensorDict's.
    """
    if cls in SUPPORTED_NODES:
        return
    _vmap.register_vmap_kind(cls, "tc")

    def flatten(obj: Any) -> tuple[list, type]:
        return [obj._tensordict], cls

    def flatten_with_keys(obj: Any) -> tuple[list, type]:
        return [(GetAttrKey("_tensordict"), obj._tensordict)], cls

    def unflatten(values: Iterable[Any], klass: type) -> Any:
        (td,) = values
        return klass._from_tensordict(td)

    register_pytree_node(cls, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys)


# the TensorDict and lazy-stack classes registered as pytree nodes here (tensordict's public names;
# tensor classes and TypedTensorDict subclasses register themselves when they are defined)
PYTREE_REGISTERED_TDS = (TensorDict,)
PYTREE_REGISTERED_LAZY_TDS = (LazyStackedTensorDict,)
for _cls in PYTREE_REGISTERED_TDS:
    register_tensordict_type(_cls)
for _cls in PYTREE_REGISTERED_LAZY_TDS:
    register_lazy_stack_type(_cls)
_vmap.install()
