"""Composite: a (nested) dictionary of specs sharing leading batch dims."""

from __future__ import annotations

from typing import Any, Iterator

import torch

from ..tensordict import TensorDict
from .base import _dest_device, _device, _shape_args, _size, _spec_shape

__all__ = ["Composite"]


def _is_key(key: Any) -> bool:
    return isinstance(key, str) or (isinstance(key, tuple) and len(key) > 0 and all(isinstance(k, str) for k in key))


def _flat(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


_MISSING = object()


class Composite:
    """A dictionary of specs (leaf specs or nested Composites) sharing the batch shape ``shape``.

    Keys may be nested (``spec["a", "b"]``). ``rand``/``zero``/``one`` build a :class:`tdict.TensorDict`
    of batch size ``shape + self.shape`` (nested Composites give nested TensorDicts); the key list is
    precomputed so generation does no validation.

    An entry may be ``None``: a placeholder for a spec not known yet, as in TorchRL. It is listed by
    ``keys``/``items``/``in`` and printed as ``None``; ``rand``/``zero``/``one`` leave it out, ``is_in``
    and ``project`` ignore it, shape ops, ``to`` and ``clone`` keep it ``None``, and ``encode``
    refuses a value for it.

    Args:
        specs: a mapping of keys to specs (dicts are turned into nested Composites).
        shape: the batch shape every sub-spec's shape starts with (default ``()``).
        device: the device of the sub-specs (sub-specs are moved there).
        **kwargs: more key/spec pairs.

    Examples:
        >>> from tdict.specs import Composite, Unbounded
        >>> spec = Composite(obs=None, action=Unbounded(shape=(2,)))
        >>> spec.keys(), spec["obs"], list(spec.rand().keys())
        (['obs', 'action'], None, ['action'])
        >>> import torch
        >>> from tdict.specs import Bounded, Categorical, Composite, Unbounded
        >>> spec = Composite(obs=Unbounded(shape=(4, 3)), action=Categorical(2, shape=(4,)),
        ...                  next={"reward": Bounded(-1.0, 1.0, shape=(4,))}, shape=(4,))
        >>> td = spec.rand((2,))
        >>> td.batch_size, td["next", "reward"].shape
        (torch.Size([2, 4]), torch.Size([2, 4]))
        >>> spec.is_in(td), spec.keys(include_nested=True, leaves_only=True)
        (True, ['obs', 'action', ('next', 'reward')])
    """

    _is_spec = True

    def __init__(
        self, specs: Any = None, shape: Any = None, device: Any = None, batch_size: Any = None, **kwargs: Any
    ) -> None:
        if shape is None:
            shape = batch_size
        self.shape = _spec_shape(shape, "Composite")
        self.device = _device(device)
        self._specs: dict[str, Any] = {}
        self._locked = False
        self._items: tuple | None = None
        entries = dict(specs) if specs is not None else {}
        entries.update(kwargs)
        for key, value in entries.items():
            self.set(key, value)

    # ---- attributes ------------------------------------------------------------------------
    @property
    def batch_size(self) -> torch.Size:
        """The batch shape (same as ``shape``)."""
        return self.shape

    @property
    def ndim(self) -> int:
        """The number of batch dims."""
        return len(self.shape)

    def ndimension(self) -> int:
        """The number of batch dims."""
        return len(self.shape)

    @property
    def is_locked(self) -> bool:
        """Whether setting and deleting keys is forbidden (see :meth:`lock_`)."""
        return self._locked

    def _leaf_items(self) -> tuple:
        items = self._items
        if items is None:  # placeholders (None entries) generate and check nothing
            items = self._items = tuple((k, v) for k, v in self._specs.items() if v is not None)
        return items

    # ---- dict API --------------------------------------------------------------------------
    def _check_unlocked(self, what: str, key: Any) -> None:
        if self._locked:
            raise RuntimeError(f"Composite is locked: cannot {what} key {key!r} (call unlock_() first)")

    def set(self, key: Any, spec: Any) -> "Composite":
        """Set ``key`` (nested keys create intermediate Composites); the spec's shape must start with ``self.shape``.

        ``spec`` may be ``None``: a placeholder entry (see the class docstring).
        """
        key = _flat(key)
        if len(key) > 1:
            sub = self._specs.get(key[0])
            if sub is None:
                self._check_unlocked("set", key)
                sub = Composite(shape=self.shape, device=self.device)
                self._specs[key[0]] = sub
                self._items = None
            elif not isinstance(sub, Composite):
                raise KeyError(
                    f"Composite.set: {key[0]!r} holds a {type(sub).__name__}, not a Composite, so {key!r} cannot be set"
                )
            sub.set(key[1:], spec)
            return self
        name = key[0]
        self._check_unlocked("set", name)
        if spec is None:
            self._specs[name] = None
            self._items = None
            return self
        if isinstance(spec, dict):
            spec = Composite(spec, shape=self.shape, device=self.device)
        if not getattr(type(spec), "_is_spec", False):
            raise TypeError(
                f"Composite.set: the spec for key {name!r} must be a spec (TensorSpec, Composite, Stacked...) or None, got {type(spec).__name__}"
            )
        n = len(self.shape)
        if spec.shape[:n] != self.shape:
            raise ValueError(
                f"Composite.set: the spec for key {name!r} has shape {tuple(spec.shape)}, which does not start with the Composite shape {tuple(self.shape)}"
            )
        if self.device is not None and spec.device != self.device:
            spec = spec.to(self.device)
        self._specs[name] = spec
        self._items = None
        return self

    __setitem__ = set

    def get(self, key: Any, default: Any = KeyError) -> Any:
        """The sub-spec at a (nested) key; ``default`` when absent, if given.

        Raises:
            KeyError: ``key`` is absent and no ``default`` was given.
        """
        key = _flat(key)
        node: Any = self
        for i, k in enumerate(key):
            if getattr(node, "_is_stacked_composite", False):  # stacked members: stack their sub-specs
                rest = key[i:]
                if rest in node:
                    return node[rest]
            if not isinstance(node, Composite) or k not in node._specs:
                if default is KeyError:
                    raise KeyError(
                        f"Composite: key {key[: i + 1]!r} not found; keys are {sorted(map(str, self.keys(True)))}"
                    )
                return default
            node = node._specs[k]
        return node

    def __getitem__(self, key: Any) -> Any:
        """A sub-spec for a (nested) key, or the Composite indexed along its batch dims."""
        if _is_key(key):
            return self.get(key)
        return self._index(key)

    def __delitem__(self, key: Any) -> None:
        key = _flat(key)
        parent = self.get(key[:-1]) if len(key) > 1 else self
        if not isinstance(parent, Composite) or key[-1] not in parent._specs:
            raise KeyError(f"Composite: key {key!r} not found")
        parent._check_unlocked("delete", key)
        del parent._specs[key[-1]]
        parent._items = None

    def pop(self, key: Any, default: Any = KeyError) -> Any:
        """Remove the sub-spec at ``key`` and return it (``default`` when absent, if given; else ``KeyError``)."""
        out = self.get(key, default)
        if key in self:
            del self[key]
        return out

    def __contains__(self, key: Any) -> bool:
        return _is_key(key) and self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """Keys (nested ones as tuples when ``include_nested``; only leaf specs when ``leaves_only``)."""
        return [k for k, _ in self.items(include_nested, leaves_only)]

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """``(key, spec)`` pairs, with the same options as :meth:`keys`."""
        out = []
        for k, v in self._specs.items():
            is_comp = isinstance(v, Composite) or getattr(v, "_is_stacked_composite", False)
            if not (leaves_only and is_comp):
                out.append((k, v))
            if include_nested and is_comp:
                out.extend(((k, *_flat(sk)), sv) for sk, sv in v.items(True, leaves_only))
        return out

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """The sub-specs, with the same options as :meth:`keys`."""
        return [v for _, v in self.items(include_nested, leaves_only)]

    def update(self, other: Any) -> "Composite":
        """Set every entry of ``other`` (nested Composites are merged recursively)."""
        for k, v in other.items() if isinstance(other, (dict, Composite)) else other:
            cur = self._specs.get(k) if isinstance(k, str) else None
            if isinstance(cur, Composite) and isinstance(v, (Composite, dict)):
                cur.update(v)
            else:
                self.set(k, v)
        return self

    def select(self, *keys: Any, strict: bool = True) -> "Composite":
        """A new Composite with only ``keys`` (missing keys raise unless ``strict=False``)."""
        out = self.empty()
        for key in keys:
            sub = self.get(key, _MISSING if not strict else KeyError)
            if sub is not _MISSING:
                out.set(key, sub)
        return out

    def exclude(self, *keys: Any) -> "Composite":
        """A new Composite without ``keys`` (the others are shared, not copied)."""
        out = self._shallow()
        for key in keys:
            if key in out:
                fk = _flat(key)
                if len(fk) > 1:  # copy the branch before deleting so self is untouched
                    parent = out
                    for k in fk[:-1]:
                        parent._specs[k] = parent._specs[k]._shallow()
                        parent = parent._specs[k]
                del out[key]
        return out

    def _shallow(self) -> "Composite":
        out = self.empty()
        out._specs = dict(self._specs)
        return out

    def empty(self) -> "Composite":
        """An empty Composite with the same shape and device."""
        return Composite(shape=self.shape, device=self.device)

    def is_empty(self) -> bool:
        """Whether no leaf spec is held (nested Composites that are empty do not count)."""
        return all(isinstance(v, Composite) and v.is_empty() for v in self._specs.values())

    def lock_(self) -> "Composite":
        """Forbid setting or deleting keys (recursively)."""
        self._locked = True
        for v in self._specs.values():
            if isinstance(v, Composite):
                v.lock_()
        return self

    def unlock_(self) -> "Composite":
        """Allow setting and deleting keys again (recursively)."""
        self._locked = False
        for v in self._specs.values():
            if isinstance(v, Composite):
                v.unlock_()
        return self

    # ---- generation (hot path: no validation) ----------------------------------------------
    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> TensorDict:
        """Random TensorDict of batch size ``shape + self.shape`` (every leaf drawn from ``generator`` when given)."""
        if shape or type(shape) is int:  # an int 0 is a batch of 0
            lead = _size(shape)
            return TensorDict._new_unsafe(
                {k: s.rand(lead, generator=generator) for k, s in self._leaf_items()}, lead + self.shape, self.device
            )
        return TensorDict._new_unsafe(
            {k: s.rand(generator=generator) for k, s in self._leaf_items()}, self.shape, self.device
        )

    def zero(self, shape: Any = ()) -> TensorDict:
        """Zero-filled TensorDict of batch size ``shape + self.shape``."""
        if shape or type(shape) is int:  # an int 0 is a batch of 0
            lead = _size(shape)
            return TensorDict._new_unsafe(
                {k: s.zero(lead) for k, s in self._leaf_items()}, lead + self.shape, self.device
            )
        return TensorDict._new_unsafe({k: s.zero() for k, s in self._leaf_items()}, self.shape, self.device)

    zeros = zero

    def one(self, shape: Any = ()) -> TensorDict:
        """One-filled TensorDict of batch size ``shape + self.shape``."""
        lead = _size(shape)
        return TensorDict._new_unsafe({k: s.one(lead) for k, s in self._leaf_items()}, lead + self.shape, self.device)

    ones = one

    # ---- validation ------------------------------------------------------------------------
    def _violation(self, td: Any) -> tuple[tuple, str] | None:
        for k, spec in self._leaf_items():
            try:
                val = td.get(k, None) if hasattr(td, "get") else None
            except Exception:
                val = None
            if val is None:
                return (k,), "key is missing"
            bad = spec._violation(val)
            if bad is None:
                continue
            if isinstance(bad, str):  # leaf spec
                return (k,), bad
            if len(bad) == 3:  # StackedComposite: (member, key path, reason)
                return (k, *bad[1]), f"member {bad[0]}: {bad[2]}"
            return (k, *bad[0]), bad[1]
        return None

    def is_in(self, td: Any) -> bool:
        """Whether every key of the spec is in ``td`` with a value inside its spec."""
        return self._violation(td) is None

    def assert_is_in(self, td: Any) -> None:
        """Raise ``AssertionError`` naming the first key whose value is missing or out of spec."""
        bad = self._violation(td)
        if bad is not None:
            key = bad[0][0] if len(bad[0]) == 1 else bad[0]
            raise AssertionError(f"Composite: key {key!r}: {bad[1]}")

    def project(self, td: Any) -> Any:
        """Projects the spec'd entries of ``td`` that fall outside their specs, in place (nested
        entries and lazy stacks' members included), and returns ``td``, as TorchRL 0.14 does.

        Entries without a spec are kept; the tensors themselves are not written into: a projected
        entry is replaced by the projected tensor.
        """
        for k, spec in self._leaf_items():
            val = td.get(k, None)
            if val is None:
                continue
            new = spec.project(val)
            if new is not val:
                td.set(k, new)
        return td

    def encode(self, vals: Any, *, ignore_device: bool = False) -> TensorDict:
        """Encode a (nested) dict of numpy / Python values into a TensorDict of batch size ``self.shape``.

        Raises:
            KeyError: a key of ``vals`` has no entry in the spec.
            RuntimeError: a value is ``None``, or its entry is a placeholder (``None``) spec.
        """
        out = {}
        for k, v in vals.items():
            spec = self._specs.get(k, _MISSING)
            if spec is _MISSING:
                raise KeyError(f"Composite.encode: key {k!r} has no spec; keys are {sorted(self._specs)}")
            if v is None:
                raise RuntimeError(f"Composite.encode: the value of key {k!r} is None; encode needs a value per key")
            if spec is None:
                raise RuntimeError(
                    f"Composite.encode: key {k!r} holds a placeholder (None) spec, so its value cannot be encoded"
                )
            out[k] = spec.encode(v, ignore_device=ignore_device)
        return TensorDict(out, batch_size=self.shape, device=None if ignore_device else self.device)

    def to_numpy(self, td: Any, safe: bool = True) -> dict:
        """A nested dict of numpy arrays."""
        if safe:
            self.assert_is_in(td)
        return {k: spec.to_numpy(td.get(k), safe=False) for k, spec in self._leaf_items()}

    # ---- shape ops -------------------------------------------------------------------------
    def _map(self, shape: Any, fn) -> "Composite":
        out = Composite(shape=shape, device=self.device)
        out._specs = {k: None if v is None else fn(v) for k, v in self._specs.items()}
        return out

    def _dim(self, dim: int) -> int:
        n = len(self.shape)
        if not -n <= dim < n:
            raise IndexError(f"Composite: dim {dim} out of range for batch shape {tuple(self.shape)}")
        return dim + n if dim < 0 else dim

    def expand(self, *shape: Any) -> "Composite":
        """Expand the batch shape to ``shape`` (which ends with the current one); sub-specs follow."""
        shape = _shape_args(shape)
        n = len(self.shape)
        if len(shape) < n or any(s != -1 and s != c and c != 1 for s, c in zip(shape[len(shape) - n :], self.shape)):
            raise ValueError(f"Composite.expand: cannot expand batch shape {tuple(self.shape)} to {tuple(shape)}")
        shape = torch.Size(
            shape[: len(shape) - n] + tuple(c if s == -1 else s for s, c in zip(shape[len(shape) - n :], self.shape))
        )
        return self._map(shape, lambda v: v.expand(shape + v.shape[n:]))

    def reshape(self, *shape: Any) -> "Composite":
        """Reshape the batch shape (``-1`` allowed); the sub-specs' trailing dims are kept."""
        shape = torch.empty(self.shape, device="meta").reshape(_shape_args(shape)).shape
        n = len(self.shape)
        return self._map(shape, lambda v: v.reshape(shape + v.shape[n:]))

    view = reshape

    def unsqueeze(self, dim: int) -> "Composite":
        """Insert a singleton batch dim at ``dim``."""
        n = len(self.shape)
        if not -n - 1 <= dim <= n:
            raise IndexError(f"Composite.unsqueeze: dim {dim} out of range for batch shape {tuple(self.shape)}")
        dim = dim + n + 1 if dim < 0 else dim
        return self._map(self.shape[:dim] + (1,) + self.shape[dim:], lambda v: v.unsqueeze(dim))

    def squeeze(self, dim: int | None = None) -> "Composite":
        """Remove singleton batch dims (all, or only ``dim``)."""
        if dim is None:
            out = self
            for d in reversed(range(len(self.shape))):
                if self.shape[d] == 1:
                    out = out.squeeze(d)
            return out
        dim = self._dim(dim)
        if self.shape[dim] != 1:
            return self
        return self._map(self.shape[:dim] + self.shape[dim + 1 :], lambda v: v.squeeze(dim))

    def unbind(self, dim: int = 0) -> tuple["Composite", ...]:
        """Split along batch dim ``dim`` into a tuple of Composites."""
        dim = self._dim(dim)
        parts = {k: None if v is None else v.unbind(dim) for k, v in self._specs.items()}
        shape = self.shape[:dim] + self.shape[dim + 1 :]
        out = []
        for i in range(self.shape[dim]):
            c = Composite(shape=shape, device=self.device)
            c._specs = {k: None if p is None else p[i] for k, p in parts.items()}
            out.append(c)
        return tuple(out)

    def _index(self, index: Any) -> "Composite":
        if index is Ellipsis or (isinstance(index, tuple) and any(i is Ellipsis for i in index)):
            raise IndexError("Composite: Ellipsis indices are not supported")
        shape = torch.empty(self.shape, device="meta")[index].shape
        return self._map(shape, lambda v: v[index])

    def to(self, dest: Any) -> "Composite":
        """A copy with every sub-spec moved to the device ``dest``, or cast to the dtype ``dest``.

        A dtype cast keeps the Composite's device; ``self`` is returned when ``dest`` is ``None`` or the
        device it already has. The copy is unlocked.

        Raises:
            ValueError: ``dest`` is neither a dtype, a device (``str``, ``int``, :class:`torch.device`)
                nor ``None`` (TorchRL's error type).

        Examples:
            >>> import torch
            >>> from tdict.specs import Bounded, Categorical, Composite
            >>> spec = Composite(obs=Bounded(0, 1, shape=(2,)), act=Categorical(3), nothing=None)
            >>> cast = spec.to(torch.float64)
            >>> cast["obs"].dtype, cast["act"].dtype, cast["nothing"], cast.device
            (torch.float64, torch.float64, None, None)
            >>> spec.to("cpu").device
            device(type='cpu')
        """
        if dest is None:
            return self
        if isinstance(dest, torch.dtype):
            return self._map(self.shape, lambda v: v.to(dest))
        try:
            dev = _dest_device(dest, "Composite.to")
        except TypeError as err:
            raise ValueError(str(err)) from None
        if self.device is not None and dev == self.device:
            return self
        out = self._map(self.shape, lambda v: v.to(dev))
        out.device = dev
        return out

    def cpu(self) -> "Composite":
        """Move to the CPU: ``self.to("cpu")``."""
        return self.to("cpu")

    def cardinality(self) -> int:
        """Number of distinct values: the product of the sub-specs' cardinalities (0 when empty, as in TorchRL;
        placeholder entries are left out)."""
        n = 0
        for v in self._specs.values():
            if v is not None:  # placeholders count for nothing, as in TorchRL
                n = (n or 1) * v.cardinality()
        return n

    def enumerate(self) -> TensorDict:
        """Every combination of the leaves' values: a TensorDict of batch size ``(N, *shape)``.

        Leaves vary in key order, the last one fastest (``N`` is :meth:`cardinality`); placeholder
        (``None``) entries are left out.

        Examples:
            >>> from tdict.specs import Categorical, Composite, OneHot
            >>> td = Composite(a=Categorical(2), b=OneHot(3)).enumerate()
            >>> td.batch_size, td["a"].tolist()
            (torch.Size([6]), [0, 0, 0, 1, 1, 1])
        """
        keys = [k for k, v in self.items(True, True) if v is not None]  # placeholders vary nothing
        if not keys:
            raise ValueError("Composite.enumerate: the spec has no leaves.")
        values = [self[key].enumerate() for key in keys]
        grids = torch.meshgrid(*[torch.arange(v.shape[0], device=v.device) for v in values], indexing="ij")
        out = TensorDict({}, batch_size=(grids[0].numel(), *self.shape), device=self.device)
        for key, value, grid in zip(keys, values, grids):
            out.set(key, value[grid.reshape(-1)])
        return out

    def index(self, index: Any, tensor_to_index: Any) -> Any:
        """Not supported for Composite specs: always raises ``NotImplementedError``."""
        raise NotImplementedError("`index` is not implemented for Composite specs.")

    def clone(self) -> "Composite":
        """A copy of every sub-spec, unlocked."""
        out = self._map(self.shape, lambda v: v.clone())
        out._locked = False
        return out

    def __eq__(self, other: Any) -> bool:
        if type(other) is not Composite:
            return False
        if self.shape != other.shape or self.device != other.device or self._specs.keys() != other._specs.keys():
            return False
        return all(v == other._specs[k] for k, v in self._specs.items())

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable, like TensorSpec)

    def __repr__(self) -> str:
        inner = ",\n".join(f"    {k}: " + repr(v).replace("\n", "\n    ") for k, v in self._specs.items())
        return f"Composite(\n{inner},\n    shape={tuple(self.shape)}, device={self.device})"
