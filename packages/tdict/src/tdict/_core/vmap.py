"""``torch.vmap`` maps a collection's batch dims, as tensordict does.

A TensorDict, tensor class or lazy stack given to ``torch.vmap`` is one vmap input, not a tree
of tensors: ``in_dims``/``out_dims`` name one of its *batch* dims (negative dims count from the
last batch dim). Inside the function the batch size has that dim removed; on the way out the
mapped dim is inserted at ``out_dims`` into the batch size (``out_dims`` past the batch dims puts
it among the feature dims and keeps the batch size).

- A lazy stack mapped along another dim stays a lazy stack of mapped members.
- A lazy stack mapped along its stack dim becomes a :class:`_VmappedLazyStack` (the stack dim is
  hidden): reads stack the members and map the result, writes unmap the value and cut it into
  the members. On the way out it is a lazy stack again, stacked along ``out_dims``.
- An unmapped collection (``in_dims=None``) is passed as a structural copy, so that writes in
  the function never leave mapped tensors in the caller's collection.
- Non-tensor data and unbatched tensors are not mapped: they take the new batch size.

torch has no hook for this, so :func:`install` wraps the input/output steps of
``torch._functorch.vmap`` (``_process_batched_inputs``, ``_create_batched_inputs``,
``_unwrap_batched``, ``_flatten_chunks_output``); calls without a collection go to torch's own
code unchanged.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict(x=torch.arange(6.0).reshape(2, 3), batch_size=[2, 3])
    >>> out = torch.vmap(lambda t: t.set("y", t["x"] * 2), in_dims=1, out_dims=0)(td)
    >>> out.batch_size, out["y"].shape
    (torch.Size([3, 2]), torch.Size([3, 2]))
"""

from __future__ import annotations

from typing import Any, Callable, cast

import torch
import torch._functorch.vmap as _vmap_mod

try:  # internal names: a torch without them keeps its own vmap (collections then map as pytrees)
    from torch._functorch.predispatch import _add_batch_dim, _remove_batch_dim

    _HAS_BATCH_DIM_OPS = True
except ImportError:  # pragma: no cover - depends on the torch release
    _HAS_BATCH_DIM_OPS = False
from torch.utils._pytree import _broadcast_to_and_flatten, tree_flatten, tree_unflatten

from ..base import TensorDictBase
from ..lazy import LazyStackedTensorDict
from ..tensordict import TensorDict
from ..unbatched import UNBATCHED_TYPES
from ..errors import batch_mismatch_error

__all__ = ["install", "register_vmap_kind"]

_Tensor = torch.Tensor

# type -> "td" (``_tensordict`` entries, ``_new_unsafe``), "tc" (tensor class), "lazy" (lazy stack),
# "params" (TensorDictParams: mapped in as a TensorDict of its parameters, which the function sees),
# "hidden" (a lazy stack mapped along its stack dim, see _VmappedLazyStack)
_KINDS: dict[type, str] = {}


def register_vmap_kind(cls: type, kind: str) -> None:
    """Let ``torch.vmap`` map the batch dims of ``cls`` (kind ``"td"``, ``"tc"`` or ``"lazy"``, see :data:`_KINDS`)."""
    if kind not in ("td", "tc", "lazy", "params"):
        raise ValueError(f"register_vmap_kind: unknown kind {kind!r}, expected 'td', 'tc', 'lazy' or 'params'.")
    _KINDS[cls] = kind


def _is_vmap_leaf(obj: Any) -> bool:
    return type(obj) in _KINDS


def _is_collection(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensor_collection", False)


def _drop(seq: Any, pos: int) -> list:
    seq = list(seq)
    del seq[pos]
    return seq


def _names_without(td: Any, pos: int) -> list | None:
    names = td._maybe_names()
    if names is None:
        return None
    names = _drop(names, pos)
    return names if any(n is not None for n in names) else None


# ---------------------------------------------------------------------------- mapping in
def add_batch_dim(coll: Any, in_dim: int, level: int) -> Any:
    """``coll`` with batch dim ``in_dim`` (non-negative) mapped at vmap ``level``."""
    kind = _KINDS[type(coll)]
    if kind == "hidden":  # a stack mapped by an outer vmap: its dense view nests the levels in order
        return add_batch_dim(coll._dense(), in_dim, level)
    if kind == "tc":
        return type(coll)._from_tensordict(add_batch_dim(coll._tensordict, in_dim, level))
    if kind == "params":  # the parameters themselves (gradients flow to them), as a TensorDict
        return add_batch_dim(coll._param_td, in_dim, level)
    if kind == "lazy":
        return _add_lazy(coll, in_dim, level)
    batch_size = torch.Size(_drop(coll._batch_size, in_dim))
    entries = {}
    for key, value in coll._tensordict.items():
        if isinstance(value, _Tensor):
            if type(value) in UNBATCHED_TYPES:
                value = cast(Any, value)._with_batch_size(batch_size)
            else:
                value = _add_batch_dim(value, in_dim, level)
        elif type(value) in _KINDS:
            value = add_batch_dim(value, in_dim, level)
        elif _is_collection(value) and value._is_non_tensor:
            value = value._with_batch_size(batch_size)
        entries[key] = value
    out = type(coll)._new_unsafe(entries, batch_size, coll._device, _names_without(coll, in_dim))
    if coll._is_locked:
        out._set_lock(True)
    return out


def _add_lazy(lazy: Any, in_dim: int, level: int) -> Any:
    sd = lazy.stack_dim
    if in_dim == sd:
        members = [td.clone(False) for td in lazy.tensordicts]
        out = _VmappedLazyStack._hide(members, sd, level, type(lazy), lazy._batch_size)
    else:
        member_dim = in_dim if in_dim < sd else in_dim - 1
        new_sd = sd - 1 if in_dim < sd else sd
        members = [add_batch_dim(td, member_dim, level) for td in lazy.tensordicts]
        batch_size = None if members else torch.Size(_drop(lazy._batch_size, in_dim))
        out = type(lazy)._new_unsafe(members, new_sd, batch_size, lazy._stack_dim_name)
    if lazy._is_locked:
        out._set_lock(True)
    return out


# ---------------------------------------------------------------------------- mapping out
def remove_batch_dim(coll: Any, level: int, size: int, out_dim: int | None, name: str = "function") -> Any:
    """``coll`` with the dim of vmap ``level`` (``size`` long) put back at batch dim ``out_dim``."""
    kind = _KINDS.get(type(coll))
    if kind == "hidden":
        if coll._vmap_level == level:
            return coll._unhide(out_dim, name)
        return remove_batch_dim(coll._dense(), level, size, out_dim, name)
    if kind is None:  # a collection that is no vmap input (e.g. TensorDictParams) goes back as it is
        return coll
    if kind == "tc":
        return type(coll)._from_tensordict(remove_batch_dim(coll._tensordict, level, size, out_dim, name))
    ndim = len(coll.batch_size)
    if out_dim is None:
        _check_unbatched(coll, level, name)
        return coll
    if out_dim < -ndim - 1:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dim}): a {type(coll).__name__} with batch size {list(coll.batch_size)} "
            f"takes out_dims >= {-ndim - 1} (negative dims count from the end of the batch dims)."
        )
    if out_dim < 0:
        out_dim += ndim + 1
    if kind == "lazy":
        return _remove_lazy(coll, level, size, out_dim, name)
    old = coll._batch_size
    if out_dim <= ndim:
        batch_size = torch.Size(tuple(old[:out_dim]) + (size,) + tuple(old[out_dim:]))
        names = coll._maybe_names()
        if names is not None:
            names = list(names)
            names.insert(out_dim, None)
    else:  # past the batch dims: the leaves get the dim among their feature dims
        batch_size, names = old, coll._maybe_names()
    entries = {}
    for key, value in coll._tensordict.items():
        if isinstance(value, _Tensor):
            if type(value) in UNBATCHED_TYPES:
                value = cast(Any, value)._with_batch_size(batch_size)
            else:
                try:
                    value = _vmap_mod._maybe_remove_batch_dim(name, value, level, size, out_dim)
                except IndexError as err:
                    raise ValueError(
                        f"vmap({name}, ..., out_dims={out_dim}): entry {key!r} has {value.dim()} dims, too few to "
                        f"put the mapped dim at dim {out_dim}."
                    ) from err
        elif _is_collection(value):
            if value._is_non_tensor:
                value = cast(Any, value)._with_batch_size(batch_size)
            else:
                value = remove_batch_dim(value, level, size, out_dim, name)
        entries[key] = value
    out = type(coll)._new_unsafe(entries, batch_size, coll._device, names)
    if coll._is_locked:
        out._set_lock(True)
    return out


def _remove_lazy(lazy: Any, level: int, size: int, out_dim: int, name: str) -> Any:
    sd = lazy.stack_dim
    if out_dim <= sd:
        new_sd, member_dim = sd + 1, out_dim
    else:
        new_sd, member_dim = sd, out_dim - 1
    members = [remove_batch_dim(td, level, size, member_dim, name) for td in lazy.tensordicts]
    batch_size = None
    if not members:
        old = lazy._batch_size
        batch_size = old if out_dim > len(old) else torch.Size(tuple(old[:out_dim]) + (size,) + tuple(old[out_dim:]))
    out = type(lazy)._new_unsafe(members, new_sd, batch_size, lazy._stack_dim_name)
    if lazy._is_locked:
        out._set_lock(True)
    return out


def _check_unbatched(coll: Any, level: int, name: str) -> None:
    """``out_dims=None``: like torch, no leaf may still be mapped."""
    for value in coll.values(True, True):
        if isinstance(value, _Tensor):
            _vmap_mod._maybe_remove_batch_dim(name, value, level, 0, None)


# ---------------------------------------------------------------------------- lazy stack mapped along its stack dim
class _VmappedLazyStack(LazyStackedTensorDict):
    """A lazy stack inside ``vmap`` whose stack dim is the mapped dim (hidden from ``batch_size``).

    The members stay apart and unmapped: ``get`` stacks them and maps the stack dim, ``set`` unmaps
    the value and cuts it along the stack dim. Member-wise ops (``clone``, ``select``, arithmetic)
    keep the dim hidden; ``apply``, indexing and shape ops work on the dense mapped view.
    """

    __slots__ = ("_vmap_level", "_vmap_cls")

    @classmethod
    def _hide(cls, members: list, stack_dim: int, level: int, orig: type, full: torch.Size) -> "_VmappedLazyStack":
        return cls._build(members, stack_dim, torch.Size(_drop(full, stack_dim)), level, orig)

    @classmethod
    def _build(cls, members: list, stack_dim: int, hidden: torch.Size, level: int, orig: type) -> "_VmappedLazyStack":
        out = cast(_VmappedLazyStack, cls._new_unsafe(members, stack_dim, hidden))
        out._vmap_level = level
        out._vmap_cls = orig
        return out

    def _unhide(self, out_dim: int | None, name: str) -> Any:
        ndim = len(self._batch_size) + 1
        if out_dim is None:
            raise ValueError(
                f"vmap({name}, ...): `{name}` returned a lazy stack mapped along its stack dim, which needs an "
                "int out_dims (got None)."
            )
        if not -ndim <= out_dim < ndim:
            raise ValueError(
                f"vmap({name}, ..., out_dims={out_dim}): the lazy stack mapped along its stack dim stacks its "
                f"{len(self.tensordicts)} members again, so out_dims must be in [{-ndim}, {ndim})."
            )
        out_dim %= ndim
        full = (
            None
            if self.tensordicts
            else torch.Size(tuple(self._batch_size[:out_dim]) + (0,) + tuple(self._batch_size[out_dim:]))
        )
        out = self._vmap_cls._new_unsafe(list(self.tensordicts), out_dim, full)
        if self._is_locked:
            out._set_lock(True)
        return out

    # -- structure
    def _like(self, tds: list, stack_dim: int | None = None) -> "_VmappedLazyStack":
        hidden = tds[0].batch_size if tds else self._batch_size
        return type(self)._build(tds, self.stack_dim, hidden, self._vmap_level, self._vmap_cls)

    @property
    def names(self) -> list:
        tds = self.tensordicts
        return tds[0].names if tds else [None] * len(self._batch_size)

    @names.setter
    def names(self, value: Any) -> None:
        for td in self.tensordicts:
            td.names = value

    def insert(self, index: int, tensordict: TensorDictBase) -> None:
        raise RuntimeError("Cannot insert into a lazy stack inside torch.vmap when its stack dim is the mapped dim.")

    def _leaf_shape(self, key: str) -> torch.Size | None:
        shapes = {tuple(s) for s in (_member_leaf_shape(td, key) for td in self.tensordicts) if s is not None}
        return torch.Size(shapes.pop()) if len(shapes) == 1 else None

    # -- reads: stack the members, then map the stack dim
    def _combine(self, key: Any, vals: list) -> Any:
        first = vals[0]
        if isinstance(first, _Tensor):
            out = LazyStackedTensorDict._combine(self, key, vals)
            if type(first) in UNBATCHED_TYPES:
                return out._with_batch_size(self._batch_size)
            return _add_batch_dim(out, self.stack_dim, self._vmap_level)
        if _is_collection(first) and not first._is_non_tensor:
            LazyStackedTensorDict._combine(self, key, vals)  # same checks (batch sizes, kinds)
            out = self._like(vals)
            out._is_locked = self._is_locked
            return out
        return LazyStackedTensorDict._combine(self, key, vals)

    def _dense(self, layout: torch.layout = torch.strided, prefix: tuple = ()) -> TensorDict:
        entries = {}
        for key, value in self._items_raw():
            entries[key] = value._dense(layout, prefix + (key,)) if isinstance(value, _VmappedLazyStack) else value
        return TensorDict._new_unsafe(entries, self._batch_size, self.device, self._maybe_names())

    # -- writes: unmap the value, then cut it along the stack dim
    def _full(self, value: torch.Tensor) -> torch.Tensor:
        """A tensor with the hidden batch size, unmapped: the stack dim is back (expanded if it was not mapped)."""
        return _remove_batch_dim(value, self._vmap_level, len(self.tensordicts), self.stack_dim)

    def _split_collection(self, value: TensorDictBase) -> Any:
        if (
            type(value) is _VmappedLazyStack
            and value._vmap_level == self._vmap_level
            and value.stack_dim == self.stack_dim
            and len(value.tensordicts) == len(self.tensordicts)
        ):
            return value.tensordicts
        bs = self._batch_size
        if value.batch_size[: len(bs)] != bs:
            return None
        n = len(self.tensordicts)
        if type(value) not in _KINDS:  # non-tensor data, unmapped collections: every member sees it whole
            return [value] * n
        full = remove_batch_dim(value, self._vmap_level, n, self.stack_dim)
        if isinstance(full, LazyStackedTensorDict) and full.stack_dim == self.stack_dim:
            return full.tensordicts
        return full.unbind(self.stack_dim)

    def _split_value(self, key: Any, value: Any) -> Any:
        if isinstance(value, _Tensor) and type(value) not in UNBATCHED_TYPES:
            bs = self._batch_size
            if value.shape[: len(bs)] != bs:
                raise batch_mismatch_error(key, value, bs, " of the lazy stack")
            return self._full(value).unbind(self.stack_dim)
        if isinstance(value, dict) and not _is_collection(value):
            value = TensorDict(value, batch_size=self._batch_size, device=self.device)
        if _is_collection(value):
            parts = self._split_collection(cast(TensorDictBase, value))
            if parts is None:
                raise batch_mismatch_error(key, value, self._batch_size, " of the lazy stack")
            return parts
        return LazyStackedTensorDict._split_value(self, key, value)

    def _member_operands(self, other: torch.Tensor) -> tuple:
        return self._full(self._batch_operand(other).expand(self._batch_size)).unbind(self.stack_dim)

    # -- ops that would see the members unmapped: work on the dense mapped view
    def _apply(self, fn, others, named, path, batch_size, device, names, inplace, default, filter_empty, *rest):
        return TensorDictBase._apply(
            self, fn, others, named, path, batch_size, device, names, inplace, default, filter_empty, *rest
        )

    def _index(self, index: Any) -> Any:
        return self._dense()._index(index)

    def _set_at_index(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "Indexed writes into a lazy stack inside torch.vmap are not supported when its stack dim is the mapped "
            "dim: set whole keys (td.set(key, value)) instead."
        )

    _set_masked = _set_at_index

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        return self._dense()


def _dense_method(name: str) -> Callable:
    def method(self: _VmappedLazyStack, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._dense(), name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the dense mapped view."
    return method


for _name in (
    "unbind",
    "split",
    "unsqueeze",
    "squeeze",
    "permute",
    "flatten",
    "unflatten",
    "reshape",
    "expand",
    "flip",
    "roll",
    "rot90",
    "narrow",
    "tile",
    "tensor_split",
    "pad",
    "densify",
):
    setattr(_VmappedLazyStack, _name, _dense_method(_name))


_KINDS[_VmappedLazyStack] = "hidden"


def _member_leaf_shape(td: Any, key: str) -> torch.Size | None:
    if isinstance(td, LazyStackedTensorDict):
        return td._leaf_shape(key)
    value = td._get_str(key, None)
    return value.shape if isinstance(value, _Tensor) else None


# ---------------------------------------------------------------------------- torch.vmap steps
_ORIG: dict[str, Callable] = {}


def _flatten(tree: Any) -> tuple[list, Any, bool]:
    flat, spec = tree_flatten(tree, is_leaf=_is_vmap_leaf)
    return flat, spec, any(type(x) in _KINDS for x in flat)


def _process_batched_inputs(in_dims: Any, args: tuple, func: Callable) -> tuple:
    flat_args, args_spec, has_collection = _flatten(args)
    if not has_collection or not isinstance(in_dims, (int, tuple)) or not args:
        return _ORIG["_process_batched_inputs"](in_dims, args, func)
    name = _vmap_mod._get_name(func)
    flat_in_dims = _broadcast_to_and_flatten(in_dims, args_spec)
    if flat_in_dims is None:
        raise ValueError(
            f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with the structure of "
            f"`inputs`. in_dims has structure {tree_flatten(in_dims)[1]} but inputs has structure {args_spec} "
            "(a TensorDict takes one in_dim: an int or None)."
        )
    sizes = []
    for i, (arg, in_dim) in enumerate(zip(flat_args, flat_in_dims)):
        if in_dim is None:
            continue
        if not isinstance(in_dim, int):
            raise ValueError(
                f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={in_dim} for an input but in_dim must "
                "be either an integer dimension or None."
            )
        if type(arg) in _KINDS:
            ndim = len(arg.batch_size)
            if not -ndim <= in_dim < ndim:
                raise ValueError(
                    f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={in_dim} for a "
                    f"{type(arg).__name__} with batch size {list(arg.batch_size)}: in_dims of a tensor collection "
                    f"name one of its batch dims, so expected {-ndim} <= in_dim < {ndim}."
                )
            in_dim %= ndim
            sizes.append(arg.batch_size[in_dim])
        elif isinstance(arg, _Tensor):
            ndim = arg.dim()
            if not -ndim <= in_dim < ndim:
                raise ValueError(
                    f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={in_dim} for some input, but that "
                    f"input is a Tensor of dimensionality {ndim} so expected in_dim to satisfy "
                    f"-{ndim} <= in_dim < {ndim}."
                )
            in_dim %= max(ndim, 1)
            sizes.append(arg.size(in_dim))
        else:
            raise ValueError(
                f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={in_dim} for an input but the input is "
                f"of type {type(arg)}. We cannot vmap over non-Tensor arguments, please use None as the respective "
                "in_dim"
            )
        flat_in_dims[i] = in_dim
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes {sizes} for the "
            "mapped dimension"
        )
    return sizes[0], flat_in_dims, flat_args, args_spec


def _create_batched_inputs(flat_in_dims: list, flat_args: list, vmap_level: int, args_spec: Any) -> Any:
    if not any(type(x) in _KINDS for x in flat_args):
        return _ORIG["_create_batched_inputs"](flat_in_dims, flat_args, vmap_level, args_spec)
    batched = []
    for in_dim, arg in zip(flat_in_dims, flat_args):
        if type(arg) in _KINDS:
            arg = arg.clone(False) if in_dim is None else add_batch_dim(arg, in_dim, vmap_level)
        elif in_dim is not None:
            arg = _add_batch_dim(arg, in_dim, vmap_level)
        batched.append(arg)
    return tree_unflatten(batched, args_spec)


def _unwrap_batched(batched_outputs: Any, out_dims: Any, vmap_level: int, batch_size: int, func: Callable) -> Any:
    flat, spec, has_collection = _flatten(batched_outputs)
    if not has_collection and not any(type(x) in UNBATCHED_TYPES for x in flat):
        return _ORIG["_unwrap_batched"](batched_outputs, out_dims, vmap_level, batch_size, func)
    name = _vmap_mod._get_name(func)
    flat_out_dims = None
    if type(batched_outputs) in _KINDS:
        if isinstance(out_dims, int) or out_dims is None:
            flat_out_dims = [out_dims]
        elif isinstance(out_dims, tuple) and len(out_dims) == 1:
            flat_out_dims = list(out_dims)
    else:
        flat_out_dims = _broadcast_to_and_flatten(out_dims, spec)
    if flat_out_dims is None:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with the structure of "
            f"`outputs`. out_dims has structure {tree_flatten(out_dims)[1]} but outputs has structure {spec} "
            "(a TensorDict takes one out_dim: an int or None)."
        )
    outputs = []
    for value, out_dim in zip(flat, flat_out_dims):
        if type(value) in _KINDS:
            outputs.append(remove_batch_dim(value, vmap_level, batch_size, out_dim, name))
        elif type(value) in UNBATCHED_TYPES:  # returned whole: only its batch size gets the mapped dim
            outputs.append(_unbatched_out(value, batch_size, out_dim, name))
        else:
            outputs.append(_vmap_mod._maybe_remove_batch_dim(name, value, vmap_level, batch_size, out_dim))
    return tree_unflatten(outputs, spec)


def _unbatched_out(value: Any, size: int, out_dim: int | None, name: str) -> Any:
    """An UnbatchedTensor returned by the mapped function: the same tensor (it holds no mapped dim),
    with the mapped dim (``size`` long) put back at ``out_dim`` of its batch size."""
    inner = value.batch_size
    if out_dim is None:
        return value
    ndim = len(inner)
    if not -ndim - 1 <= out_dim <= ndim:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dim}): an UnbatchedTensor with batch size {list(inner)} takes "
            f"out_dims in [{-ndim - 1}, {ndim}]."
        )
    if out_dim < 0:
        out_dim += ndim + 1
    return value._with_batch_size(torch.Size(tuple(inner[:out_dim]) + (size,) + tuple(inner[out_dim:])))


def _flatten_chunks_output(chunks_output: list) -> tuple:
    # chunks are concatenated with torch.cat: collections are cat whole (a lazy stack's members add up)
    if not any(_flatten(out)[2] for out in chunks_output):
        return _ORIG["_flatten_chunks_output"](chunks_output)
    flat_chunks, spec = [], None
    for out in chunks_output:
        flat, out_spec, _ = _flatten(out)
        flat_chunks.append(flat)
        spec = out_spec if spec is None else spec
    return list(zip(*flat_chunks)), spec


def install() -> None:
    """Wrap torch's vmap input/output steps (idempotent); a torch release without them is left as it is."""
    names = ("_process_batched_inputs", "_create_batched_inputs", "_unwrap_batched", "_flatten_chunks_output")
    if not _HAS_BATCH_DIM_OPS or not all(hasattr(_vmap_mod, name) for name in names):
        return
    for name, fn in (
        ("_process_batched_inputs", _process_batched_inputs),
        ("_create_batched_inputs", _create_batched_inputs),
        ("_unwrap_batched", _unwrap_batched),
        ("_flatten_chunks_output", _flatten_chunks_output),
    ):
        current = getattr(_vmap_mod, name)
        if current is fn:
            continue
        _ORIG[name] = current
        setattr(_vmap_mod, name, fn)
