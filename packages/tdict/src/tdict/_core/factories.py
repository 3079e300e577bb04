"""New collections shaped like an existing one: ``replace`` and the ``new_*`` factories
(``new_zeros``, ``new_ones``, ``new_empty``, ``new_full``, ``new_tensor``)."""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, cast

import torch

from ..unbatched import UNBATCHED_TYPES
from .entries import _non_tensor, _probe
from .utils import NO_DEFAULT, is_tensor_collection, parse_batch_size, parse_device

if TYPE_CHECKING:
    from ..base import TensorDictBase


def _new_size(size: tuple, what: str) -> torch.Size:
    if len(size) == 1 and not isinstance(size[0], int):
        size = size[0]
    try:
        return parse_batch_size(size)
    except TypeError as err:
        raise TypeError(f"{what}: size must be ints or one sequence of ints, got {size!r}.") from err
    except ValueError:
        raise ValueError(f"{what}: size must be non-negative ints, got {list(size)}.") from None


_SCHEMA_STORAGES = (None, "memmap", "h5", "shared")


class FactoriesMixin:
    """``replace``, the ``new_*`` factories and ``from_schema``."""

    __slots__ = ()

    @classmethod
    def from_schema(
        cls, schema: Any, *, batch_size: Any = None, storage: str | None = None, device: Any = None, **kwargs: Any
    ) -> "TensorDictBase":
        """A zero-filled TensorDict pre-allocated from ``{key: (element_shape, dtype)}``: each entry
        is ``[*batch_size, *element_shape]``.

        ``storage``: ``None`` (in memory), ``"memmap"`` (memory-mapped files under ``prefix=``, a
        temporary folder without it), ``"h5"`` (a :class:`~tdict.PersistentTensorDict` written to
        ``filename=``) or ``"shared"`` (shared memory). tensordict's ``"zarr"``, ``"redis"`` and
        ``"dragonfly"`` backends are not provided.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict.from_schema({"obs": ([3], torch.float32), "done": ([], torch.bool)}, batch_size=[5])
            >>> td["obs"].shape, td["done"].dtype, bool(td["obs"].any())
            (torch.Size([5, 3]), torch.bool, False)
        """
        from ..tensordict import TensorDict

        if storage not in _SCHEMA_STORAGES:
            if storage in ("zarr", "redis", "dragonfly"):
                raise NotImplementedError(f"from_schema: the {storage!r} storage backend is not provided here.")
            raise ValueError(f"from_schema: Unknown storage backend {storage!r}; expected one of {_SCHEMA_STORAGES}.")
        if not hasattr(schema, "items"):
            raise TypeError(f"from_schema: schema must map keys to (shape, dtype), got {type(schema).__name__}.")
        batch = parse_batch_size(() if batch_size is None else batch_size)
        shapes = {}
        for key, spec in schema.items():
            try:
                shape, dtype = spec
                shapes[key] = (torch.Size([*batch, *shape]), dtype)
            except (TypeError, ValueError):
                raise TypeError(f"from_schema: schema[{key!r}] must be (element_shape, dtype), got {spec!r}.") from None
        if storage in ("memmap", "h5"):  # expanded zeros: nothing is allocated in memory
            source = {key: torch.zeros((), dtype=dtype).expand(shape) for key, (shape, dtype) in shapes.items()}
            if storage == "h5":
                from ..persistent import PersistentTensorDict

                if "filename" not in kwargs:
                    raise TypeError("from_schema: storage='h5' needs filename=<path of the HDF5 file>.")
                filename = kwargs.pop("filename")
                return PersistentTensorDict.from_dict(source, filename, batch_size=batch, device=device, **kwargs)
            return TensorDict(source, batch_size=batch).memmap_like(kwargs.pop("prefix", None), **kwargs)
        if kwargs:
            raise TypeError(f"from_schema: unexpected keyword arguments {sorted(kwargs)} for storage={storage!r}.")
        source = {key: torch.zeros(shape, dtype=dtype, device=device) for key, (shape, dtype) in shapes.items()}
        td = TensorDict(source, batch_size=batch, device=device)
        return td.share_memory_() if storage == "shared" else td

    # ------------------------------------------------------------------ new collections
    def replace(self, *args: Any, **kwargs: Any) -> "TensorDictBase":
        """A shallow copy with some entries replaced (one dict / collection and/or keywords).

        Returns ``self`` when nothing is replaced; ``self`` is never modified.
        """
        if len(args) > 1:
            raise TypeError(
                f"replace: takes at most one dict or collection of entries, got {len(args)} positional arguments."
            )
        source = args[0] if args else {}
        if not isinstance(source, dict) and not is_tensor_collection(source):
            raise TypeError(f"replace: expected a dict or a tensor collection of entries, got {type(source).__name__}.")
        if not kwargs and (not source if isinstance(source, dict) else source.is_empty()):
            return cast("TensorDictBase", self)
        result = self.copy()
        result.update(source)
        if kwargs:
            result.update(kwargs)
        return result

    def new_zeros(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        """A TensorDict of batch size ``size``, same structure and feature shapes, filled with 0.

        Keyword args as :meth:`torch.Tensor.new_zeros` (``dtype``, ``device``, ``requires_grad``,
        ``layout``, ``pin_memory``); ``dtype=None`` keeps each leaf's dtype. Non-tensor leaves
        are carried over with the new batch size; a :class:`NonTensorStack` whose elements differ
        cannot be, unless ``empty_lazy=True`` (which reaches the sub-collections): the stack is then
        emptied, i.e. replaced by a stack of the new batch size whose elements are placeholders
        to overwrite (each holds the stack's first payload). Also :meth:`new_ones`, :meth:`new_empty`,
        :meth:`new_full`.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> TensorDict(x=torch.ones(3, 2), batch_size=[3]).new_zeros(4, 5)["x"].shape
            torch.Size([4, 5, 2])
        """
        return self._new_filled(_new_size(size, "new_zeros"), "new_zeros", (), **kwargs)

    def new_ones(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        """Like :meth:`new_zeros`, filled with 1."""
        return self._new_filled(_new_size(size, "new_ones"), "new_ones", (), **kwargs)

    def new_empty(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        """Like :meth:`new_zeros`, with uninitialized tensor leaves."""
        return self._new_filled(_new_size(size, "new_empty"), "new_empty", (), **kwargs)

    def new_full(self, size: Any, fill_value: Any, **kwargs: Any) -> "TensorDictBase":
        """Like :meth:`new_zeros`, filled with ``fill_value`` (``size``: an int or one sequence of ints)."""
        return self._new_filled(_new_size((size,), "new_full"), "new_full", (fill_value,), **kwargs)

    def _new_filled(
        self,
        size: torch.Size,
        fn: str,
        extra: tuple,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
        path: tuple = (),
    ) -> "TensorDictBase":
        from ..tensordict import TensorDict

        n = self.batch_dims
        kwargs = {"dtype": dtype, "requires_grad": requires_grad, "layout": layout}
        if device is not NO_DEFAULT:
            kwargs["device"] = parse_device(device)
        if pin_memory is not None:
            kwargs["pin_memory"] = pin_memory
        out = {}
        for key, value in self._items_raw():
            if type(value) in UNBATCHED_TYPES:
                out[key] = value._with_batch_size(size)  # kept whole: it lacks the batch dims
            elif isinstance(value, torch.Tensor):
                out[key] = getattr(value, fn)(size + value.shape[n:], *extra, **kwargs)
            elif value._is_non_tensor:
                new_bs = size + value.batch_size[n:]
                if empty_lazy and value._is_lazy:  # a stack to be filled: placeholders, see the docstring
                    out[key] = value._emptied(new_bs)
                    continue
                try:
                    out[key] = value._with_batch_size(new_bs)
                except RuntimeError as err:
                    raise RuntimeError(
                        f"{fn}: key {path + (key,)!r}: {err} Exclude it first, or pass empty_lazy=True."
                    ) from None
            else:
                out[key] = value._new_filled(
                    size + value.batch_size[n:],
                    fn,
                    extra,
                    dtype=dtype,
                    device=device,
                    requires_grad=requires_grad,
                    layout=layout,
                    pin_memory=pin_memory,
                    empty_lazy=empty_lazy,
                    path=path + (key,),
                )
        names = self._maybe_names()
        if names is not None:
            names = [None] * (len(size) - n) + list(names) if len(size) >= n else list(names[n - len(size) :])
            names = names if any(nm is not None for nm in names) else None
        return TensorDict._new_unsafe(out, size, self.device if device is NO_DEFAULT else parse_device(device), names)

    def new_tensor(
        self,
        data: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        pin_memory: bool | None = None,
    ) -> "TensorDictBase":
        """A TensorDict of the same structure whose leaves are copies of ``data`` (a tensor: every
        leaf; a collection: the leaf under the same key), cast to each leaf's dtype unless ``dtype``.

        The batch size is ``data``'s shape (batch size); the device ``data``'s unless ``device``.
        """
        from ..tensordict import TensorDict

        collection = is_tensor_collection(data)
        if collection or isinstance(data, torch.Tensor):  # as torch.Tensor.new_tensor warns
            warnings.warn(
                "To copy construct from a tensor (or a tensor collection), prefer data.clone().detach(): "
                "new_tensor copies and detaches it.",
                UserWarning,
                stacklevel=2,
            )
        else:
            data = torch.as_tensor(data)
        if collection:  # every key checked before anything is built
            for key in self.keys(True, True):
                entry = _probe(self, key)
                if key not in data and not _non_tensor(entry) and type(entry) not in UNBATCHED_TYPES:
                    raise KeyError(
                        f"new_tensor: key {key!r} of self is missing from data (keys: {list(data.keys(True, True))})."
                    )
        dev = data.device if device is NO_DEFAULT else parse_device(device)

        def build(td: Any, src: Any, bs: torch.Size) -> Any:
            out = {}
            for key, value in td._items_raw():
                part = (None if src is None else src._get_str(key, None)) if collection else src
                if type(value) in UNBATCHED_TYPES:
                    out[key] = value._with_batch_size(bs)  # kept whole: it lacks the batch dims
                elif isinstance(value, torch.Tensor):
                    assert part is not None  # every tensor key of self was found in data above
                    t = part.detach().to(
                        device=dev if dev is not None else part.device, dtype=dtype or value.dtype, copy=True
                    )
                    out[key] = (t.pin_memory() if pin_memory else t).requires_grad_(requires_grad)
                elif value._is_non_tensor:
                    out[key] = part.copy() if part is not None and _non_tensor(part) else value._with_batch_size(bs)
                else:
                    out[key] = build(value, part, part.batch_size if collection and part is not None else bs)
            return TensorDict._new_unsafe(out, bs, dev)

        return build(self, data, data.batch_size if collection else data.shape)


__all__ = ["FactoriesMixin"]
