"""apply, named_apply, apply_ and map: a function over every leaf of one or more collections."""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..unbatched import UNBATCHED_TYPES
from .utils import _MISSING, NO_DEFAULT, parse_device, unravel_key


if TYPE_CHECKING:
    from ..base import TensorDictBase


class ApplyMixin:
    """Leaf-wise function application (and ``map`` over a process pool)."""

    __slots__ = ()

    def apply(
        self,
        fn: Callable,
        *others: "TensorDictBase",
        batch_size: Sequence[int] | None = None,
        device: Any = NO_DEFAULT,
        names: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
        out: "TensorDictBase | None" = None,
        **constructor_kwargs,
    ) -> "TensorDictBase | None":
        """Apply ``fn`` to every leaf (and the matching leaves of ``others``).

        Returning ``None`` from ``fn`` drops the key; sub-collections left empty are dropped
        when ``filter_empty`` is true. ``inplace`` writes the results into ``self``; ``out`` (a
        collection) receives them instead, in place where it has the key, and is returned.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
            >>> td.apply(lambda x: x + 1)["a"]
            tensor([1., 1., 1.])
            >>> dest = TensorDict(a=torch.zeros(3), batch_size=[3])
            >>> td.apply(lambda x: x + 2, out=dest) is dest, dest["a"]
            (True, tensor([2., 2., 2.]))
        """
        if out is not None:
            if inplace:
                raise ValueError("apply: pass inplace=True or out=, not both.")
            result = self.apply(
                fn,
                *others,
                batch_size=batch_size,
                device=device,
                names=names,
                default=default,
                filter_empty=filter_empty,
                call_on_nested=call_on_nested,
                **constructor_kwargs,
            )
            return out if result is None else out.update(result, inplace=True)
        return self._apply(
            fn,
            others,
            None,
            (),
            batch_size,
            device,
            names,
            inplace,
            default,
            filter_empty,
            call_on_nested,
            constructor_kwargs,
        )

    def named_apply(
        self,
        fn: Callable,
        *others: "TensorDictBase",
        nested_keys: bool = False,
        batch_size: Sequence[int] | None = None,
        device: Any = NO_DEFAULT,
        names: Any = NO_DEFAULT,
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        filter_empty: bool | None = None,
        call_on_nested: bool = False,
        **constructor_kwargs,
    ) -> "TensorDictBase | None":
        """Like :meth:`apply`, with the key passed first: ``fn(key, leaf, *other_leaves)``."""
        return self._apply(
            fn,
            others,
            bool(nested_keys),
            (),
            batch_size,
            device,
            names,
            inplace,
            default,
            filter_empty,
            call_on_nested,
            constructor_kwargs,
        )

    def apply_(self, fn: Callable, *others: "TensorDictBase", **kwargs) -> "TensorDictBase":
        """In-place :meth:`apply`: leaves are replaced (or copied into) by ``fn``'s result."""
        return self._apply(
            fn, others, None, (), None, NO_DEFAULT, NO_DEFAULT, True, kwargs.get("default", NO_DEFAULT), None, False, {}
        )

    def _apply(
        self,
        fn,
        others,
        named,
        path,
        batch_size,
        device,
        names,
        inplace,
        default,
        filter_empty,
        call_on_nested,
        constructor_kwargs,
    ):
        # named: None for apply, False/True for named_apply (own key / full nested key); path: keys above self.
        from ..tensordict import TensorDict

        out_bs = self.batch_size if batch_size is None else torch.Size(batch_size)
        if names is NO_DEFAULT:
            names = self._maybe_names() if batch_size is None else None
        out_device = self.device if device is NO_DEFAULT else parse_device(device)
        n = len(out_bs) if batch_size is None else 0  # results must keep the batch dims (else the constructor checks)
        result = {}
        had_entries = False
        for key, value in self._items_raw():
            had_entries = True
            other_values = []
            for other in others:
                other_value = other._get_str(key, _MISSING)
                if other_value is _MISSING:
                    if default is NO_DEFAULT:
                        raise KeyError(
                            f"apply: key {path + (key,)!r} is missing from one of the other collections (pass default= to fill it)."
                        )
                    if isinstance(value, torch.Tensor) or call_on_nested or value._is_non_tensor:
                        other_value = default
                    else:  # a missing sub-collection: an empty one, so that default fills each leaf below
                        other_value = TensorDict._new_unsafe({}, value.batch_size)
                elif getattr(type(other_value), "_is_non_tensor", False) and not other_value._is_lazy:
                    other_value = other_value.data  # a tensor leaf meets a non-tensor one: fn gets its payload
                other_values.append(other_value)
            if isinstance(value, torch.Tensor) or call_on_nested:
                if batch_size is not None and type(value) in UNBATCHED_TYPES:
                    result[key] = value._with_batch_size(out_bs)  # fn changes the batch dims, which it lacks
                    continue
                if named is None:
                    new = fn(value, *other_values)
                else:
                    new = fn(unravel_key(path + (key,)) if named else key, value, *other_values)
                if new is not None:
                    shape = new.shape if isinstance(new, torch.Tensor) else new.batch_size
                    if n and shape != value.shape and shape[:n] != out_bs:  # same shape as the input: nothing to slice
                        raise RuntimeError(
                            f"apply: the result for key {path + (key,)!r} has shape {list(shape)}, which does not start with "
                            f"the batch size {list(out_bs)}; pass batch_size= when fn changes the batch dims."
                        )
                    result[key] = new
            elif value._is_non_tensor:
                result[key] = value if batch_size is None else value._with_batch_size(out_bs)
            else:
                new = value._apply(
                    fn,
                    other_values,
                    named,
                    path + (key,),
                    batch_size,
                    device,
                    NO_DEFAULT,
                    inplace,
                    default,
                    filter_empty,
                    call_on_nested,
                    constructor_kwargs,
                )
                if new is not None and not (filter_empty and new.is_empty()):
                    result[key] = new
        if inplace:
            for key, new in result.items():
                dest = self._get_str(key, None)
                if dest is new:
                    continue
                if (
                    isinstance(dest, torch.Tensor)
                    and isinstance(new, torch.Tensor)
                    and dest.shape == new.shape
                    and dest.dtype == new.dtype
                    and dest.device == new.device
                ):
                    dest.copy_(new)
                else:
                    self._set_str(key, new, inplace=False, validated=False, ignore_lock=True)
            return self
        if had_entries and not result and filter_empty is not False:
            return None
        if batch_size is None and not constructor_kwargs:
            return TensorDict._new_unsafe(result, out_bs, out_device, names)
        return TensorDict(result, batch_size=out_bs, device=out_device, names=names, **constructor_kwargs)

    def map(
        self,
        fn: Callable,
        dim: int = 0,
        num_workers: int | None = None,
        *,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool: Any = None,
        mp_start_method: str | None = None,
        **kwargs: Any,
    ) -> "TensorDictBase":
        """Apply ``fn`` to chunks of ``self`` along ``dim`` in a process pool and concatenate the results.

        ``fn`` must be picklable (a module-level function) and return a collection, a tensor or
        ``None``. ``kwargs``: ``out``, ``generator``, ``max_tasks_per_child``, ``worker_threads``,
        ``timeout`` (see :func:`tdict._core.map.map_chunks`).
        """
        from .map import map_chunks

        return map_chunks(
            self,
            fn,
            dim=dim,
            num_workers=num_workers,
            chunksize=chunksize,
            num_chunks=num_chunks,
            pool=pool,
            mp_start_method=mp_start_method,
            **kwargs,
        )
