"""Composite: a (nested) dictionary of specs sharing leading batch dims."""

from __future__ import annotations

import weakref
from typing import Any, Iterator, Sequence

import torch

from ..tensordict import TensorDict
from .base import _batch_index, _dest_device, _device, _shape_args, _size, _spec_shape

__all__ = ["Composite"]


def _is_key(key: Any) -> bool:
    return isinstance(key, str) or (isinstance(key, tuple) and len(key) > 0 and all(isinstance(k, str) for k in key))


def _flat(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


_MISSING = object()


def _unravel(key: Any) -> Any:
    """A nested key in its flat form: nested tuples flattened, a 1-tuple as its string."""
    if isinstance(key, str):
        return key
    if not isinstance(key, tuple):
        return key
    flat: list = []
    for k in key:
        u = _unravel(k)
        if isinstance(u, tuple):
            flat.extend(u)
        else:
            flat.append(u)
    return flat[0] if len(flat) == 1 else tuple(flat)


class _KeyList(list):
    """The list :meth:`Composite.keys` returns: ``in`` accepts any spelling of a nested key
    (``("a",)`` for ``"a"``, ``("a", ("b",))`` for ``("a", "b")``), as TorchRL's keys view does."""

    def __contains__(self, key: Any) -> bool:
        if list.__contains__(self, key):
            return True
        flat = _unravel(key)
        return flat is not key and list.__contains__(self, flat)


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
    _promotable = True  # set() gives a Composite with fewer dims the parent's shape (see set)
    domain = "composite"
    _FORBIDDEN = frozenset({"shape", "device", "dtype", "space"})  # attribute names, never keys (as in TorchRL)

    def __init__(
        self,
        specs: Any = None,
        shape: Any = None,
        device: Any = None,
        batch_size: Any = None,
        *,
        names: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        if shape is None:
            shape = batch_size
        elif batch_size is not None:
            raise TypeError("Composite: pass shape or batch_size, not both")
        if specs is not None and not isinstance(specs, (dict, Composite)):
            raise TypeError(f"Composite: specs must be a dict or a Composite of specs, got {type(specs).__name__}")
        self._shape = _spec_shape(shape, "Composite")
        self.device = _device(device)
        self._specs: dict[str, Any] = {}
        self._locked = False
        self._lock_parents: list[weakref.ref] = []  # Composites whose recursive lock_ locked this one
        self._items: tuple | None = None
        self._names: list | None = None
        entries = dict(specs.items()) if specs is not None else {}
        entries.update(kwargs)
        for key, value in entries.items():
            self[key] = value
        if names is not None:
            self.names = names

    # ---- attributes ------------------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        """The batch shape every entry's shape starts with.

        Setting it checks every entry first: a nested Composite whose shape does not start with the
        new one gets it (recursively), a leaf spec that does not raises ``ValueError``; nothing is
        changed when one does not fit.

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(a=Unbounded(shape=(3, 2)), b=Composite(shape=(3,)), shape=(3,))
            >>> spec.shape = ()
            >>> spec.shape, spec["b"].shape
            (torch.Size([]), torch.Size([3]))
            >>> spec.shape = (4,)
            Traceback (most recent call last):
            ...
            ValueError: Composite.shape: the spec at key 'a' has shape (3, 2), which does not start with the new shape (4,)
        """
        return self._shape

    @shape.setter
    def shape(self, value: Any) -> None:
        new = _spec_shape(value, "Composite")
        if self._locked:
            raise RuntimeError("Cannot modify shape of locked composite spec.")
        self._check_shape(new)
        self._apply_shape(new)

    def _check_shape(self, new: torch.Size) -> None:
        n = len(new)
        for key, spec in self._specs.items():
            if spec is None or spec.shape[:n] == new:
                continue
            if isinstance(spec, Composite):
                spec._check_shape(new)
            else:
                raise ValueError(
                    f"Composite.shape: the spec at key {key!r} has shape {tuple(spec.shape)}, which does not start "
                    f"with the new shape {tuple(new)}"
                )

    def _apply_shape(self, new: torch.Size) -> None:
        n = len(new)
        for spec in self._specs.values():
            if isinstance(spec, Composite) and spec.shape[:n] != new:
                spec._apply_shape(new)
        if self._names is not None and len(self._names) != n:
            self._names = None
        self._shape = new

    @property
    def batch_size(self) -> torch.Size:
        """The batch shape (same as ``shape``)."""
        return self._shape

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self.shape = value

    @property
    def ndim(self) -> int:
        """The number of batch dims."""
        return len(self._shape)

    def ndimension(self) -> int:
        """The number of batch dims."""
        return len(self._shape)

    @property
    def names(self) -> list:
        """The names of the batch dims (``None`` for an unnamed dim); generated TensorDicts carry them.

        Setting a list of ``ndim`` names (or ``None`` to clear them) also names the leading dims of the
        nested Composites.

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(obs=Unbounded(shape=(4, 2, 3)), shape=(4, 2), names=["batch", "time"])
            >>> spec.names, spec.rand().names
            (['batch', 'time'], ['batch', 'time'])
            >>> Composite(shape=(4,)).names
            [None]
        """
        names = self._names
        return [None] * len(self._shape) if names is None else list(names)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        if value is None:
            self._names = None
            return
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(f"Composite.names: expected a sequence of names (str or None), got {value!r}")
        value = list(value)
        if len(value) != len(self._shape):
            raise ValueError(f"Expected {len(self._shape)} names, but got {len(value)} names: {value}")
        bad = [v for v in value if v is not None and not isinstance(v, str)]
        if bad:
            raise TypeError(f"Composite.names: each name must be a str or None, got {bad[0]!r}")
        self._names = value
        for spec in self._specs.values():
            if isinstance(spec, Composite) and spec.ndim >= len(value):
                spec.names = value + spec.names[len(value) :]

    def _has_names(self) -> bool:
        return self._names is not None

    def _erase_names(self) -> None:
        self._names = None

    def _td_names(self, lead: int = 0) -> list | None:
        """The names for a generated TensorDict with ``lead`` extra leading dims (``None`` when unnamed)."""
        names = self._names
        if names is None:
            return None
        return [None] * lead + names if lead else names

    def refine_names(self, *names: Any) -> "Composite":
        """Name the unnamed batch dims (in place); a named dim keeps its name. ``...`` stands for the dims
        left out. Returns ``self``.

        Raises:
            RuntimeError: a name differs from the one the dim already has.

        Examples:
            >>> from tdict.specs import Composite
            >>> Composite(shape=(3, 4, 5)).refine_names("a", ..., "c").names
            ['a', None, 'c']
        """
        if len(names) == 1 and isinstance(names[0], (list, tuple)):
            names = tuple(names[0])
        if sum(n is Ellipsis for n in names) > 1:
            raise ValueError("Composite.refine_names: at most one Ellipsis is allowed")
        if any(n is Ellipsis for n in names):
            i = names.index(Ellipsis)
            fill = len(self._shape) - len(names) + 1
            if fill < 0:
                raise ValueError(f"Composite.refine_names: {len(names) - 1} names for {len(self._shape)} dims")
            names = names[:i] + (None,) * fill + names[i + 1 :]
        if len(names) != len(self._shape):
            raise ValueError(f"Expected {len(self._shape)} names, but got {len(names)} names: {list(names)}")
        current = self.names
        merged = []
        for cur, new in zip(current, names):
            if cur is not None and new is not None and cur != new:
                raise RuntimeError(f"refine_names: cannot coerce Composite names {current} with {list(names)}.")
            merged.append(cur if new is None else new)
        self.names = merged
        return self

    @property
    def is_locked(self) -> bool:
        """Whether setting and deleting keys is forbidden (see :meth:`lock_`)."""
        return self._locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        if value:
            self.lock_()
        else:
            self.unlock_()

    @property
    def locked(self) -> bool:
        """Same as :attr:`is_locked`."""
        return self._locked

    def _leaf_items(self) -> tuple:
        items = self._items
        if items is None:  # placeholders (None entries) generate and check nothing
            items = self._items = tuple((k, v) for k, v in self._specs.items() if v is not None)
        return items

    # ---- dict API --------------------------------------------------------------------------
    def _check_unlocked(self, what: str, key: Any) -> None:
        if self._locked:
            raise RuntimeError(f"Cannot modify a locked Composite. (cannot {what} key {key!r}; call unlock_() first)")

    def set(self, key: Any, spec: Any) -> "Composite":
        """Set ``key`` (nested keys create intermediate Composites); the spec's shape must start with ``self.shape``.

        ``spec`` may be ``None``: a placeholder entry (see the class docstring), or a dict (a nested
        Composite). A Composite or :class:`NonTensor` spec with fewer dims, whose shape ``self.shape``
        starts with, is copied and given ``self.shape`` (as in TorchRL); a spec on another device is
        moved to ``self.device`` when that is set.

        Raises:
            AttributeError: ``key`` is ``"shape"``, ``"device"``, ``"dtype"`` or ``"space"`` (names of attributes).
            TypeError: ``key`` is not a string or a tuple of strings, or ``spec`` is not a spec.
            ValueError: the spec's shape does not start with ``self.shape``.
            RuntimeError: the Composite is locked.

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(shape=(2,))
            >>> spec["a", "b"] = Unbounded(shape=(2, 3))
            >>> spec["c"] = Composite(d=Unbounded(shape=(2,)))  # shape () is promoted to (2,)
            >>> spec["a"].shape, spec["c"].shape
            (torch.Size([2]), torch.Size([2]))
        """
        if not _is_key(key):
            raise TypeError(f"Composite.set: keys are strings or tuples of strings, got {key!r} ({type(key).__name__})")
        key = _flat(key)
        if len(key) > 1:
            sub = self._specs.get(key[0])
            if sub is None:
                self._check_unlocked("set", key)
                if key[0] in self._FORBIDDEN:
                    raise AttributeError(f"Composite[{key[0]!r}] cannot be set: {key[0]!r} is an attribute name")
                sub = Composite(shape=self._shape, device=self.device)
                sub.set(key[1:], spec)  # checked before the new branch is attached
                self._specs[key[0]] = sub
                self._items = None
                return self
            if getattr(type(sub), "_is_stacked_composite", False):  # set in every member (StackedComposite.set)
                self._check_unlocked("set", key)
                sub.set(key[1:], spec)
                self._items = None
                return self
            if not isinstance(sub, Composite):
                raise KeyError(
                    f"Composite.set: {key[0]!r} holds a {type(sub).__name__}, not a Composite, so {key!r} cannot be set"
                )
            sub.set(key[1:], spec)
            return self
        name = key[0]
        if name in self._FORBIDDEN:
            raise AttributeError(f"Composite[{name!r}] cannot be set: {name!r} is an attribute name")
        self._check_unlocked("set", name)
        if spec is None:
            self._specs[name] = None
            self._items = None
            return self
        if isinstance(spec, dict):
            spec = Composite(spec, shape=self._shape, device=self.device)
        if not getattr(type(spec), "_is_spec", False):
            raise TypeError(
                f"Composite.set: the spec for key {name!r} must be a spec (TensorSpec, Composite, Stacked...) or None, got {type(spec).__name__}"
            )
        n = len(self._shape)
        if spec.shape[:n] != self._shape:
            if (
                getattr(spec, "_promotable", False)
                and len(spec.shape) < n
                and self._shape[: len(spec.shape)] == spec.shape
            ):
                spec = spec.clone()
                spec.shape = self._shape
            else:
                raise ValueError(
                    f"Composite.set: the spec for key {name!r} has shape {tuple(spec.shape)}, which does not start with the Composite shape {tuple(self._shape)}"
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
        if not _is_key(key):
            raise TypeError(f"Composite: keys are strings or tuples of strings, got {key!r} ({type(key).__name__})")
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

    def separates(self, *keys: Any, default: Any = None) -> "Composite | None":
        """Remove ``keys`` from ``self`` and return them as a new Composite (``None`` when none was there).

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(a=Unbounded(), b=Unbounded())
            >>> out = spec.separates("a", "missing")
            >>> out.keys(), spec.keys()
            (['a'], ['b'])
        """
        out = None
        for key in keys:
            value = self.pop(key, default)
            if value is not None:
                if out is None:
                    out = Composite(shape=self._shape, device=self.device)
                out[key] = value
        return out

    def __contains__(self, key: Any) -> bool:
        return _is_key(key) and self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """Keys (nested ones as tuples when ``include_nested``; only leaf specs when ``leaves_only``), as a list.

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(a=Composite(b=Unbounded()))
            >>> spec.keys(True), ("a", ("b",)) in spec.keys(True), ("a",) in spec.keys()
            (['a', ('a', 'b')], True, True)
        """
        return _KeyList(k for k, _ in self.items(include_nested, leaves_only))

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

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether there is no entry at all; with ``recurse``, whether there is no leaf spec (placeholders and
        empty nested Composites do not count), as in TorchRL.

        Examples:
            >>> from tdict.specs import Composite
            >>> spec = Composite(a=Composite(), b=None)
            >>> spec.is_empty(), spec.is_empty(recurse=True)
            (False, True)
        """
        if recurse:
            return all(v is None or (isinstance(v, Composite) and v.is_empty(True)) for v in self._specs.values())
        return not self._specs

    def lock_(self, recurse: bool | None = None) -> "Composite":
        """Forbid setting or deleting keys; with ``recurse`` (the default) the nested Composites too.

        A Composite locked by a recursive ``lock_`` of a parent stays locked until every such parent
        is unlocked (``unlock_`` of the child alone raises ``RuntimeError``), as in TorchRL.

        Examples:
            >>> from tdict.specs import Composite
            >>> inner = Composite()
            >>> outer = Composite(inner=inner).lock_()
            >>> inner.locked
            True
            >>> inner.unlock_()
            Traceback (most recent call last):
            ...
            RuntimeError: Cannot unlock a Composite that is part of a locked graph: unlock the locked parent Composite first.
            >>> _ = outer.unlock_()
            >>> inner.locked
            False
        """
        if self._locked:
            return self
        self._propagate_lock(True if recurse is None else recurse, [])
        return self

    def _propagate_lock(self, recurse: bool, parents: list) -> None:
        self._locked = True
        known = self._lock_parents
        self._lock_parents = known + [p for p in parents if not any(p is q for q in known)]
        if recurse:
            chain = parents + [weakref.ref(self)]
            for v in self._specs.values():
                if isinstance(v, Composite):
                    v._propagate_lock(True, chain)

    def __getstate__(self) -> dict:
        # the parents that locked this one travel as plain references (weak ones cannot be pickled)
        state = self.__dict__.copy()
        state["_lock_parents"] = [p for p in (ref() for ref in self._lock_parents) if p is not None]
        return state

    def __setstate__(self, state: dict) -> None:
        state["_lock_parents"] = [weakref.ref(p) for p in state.get("_lock_parents", ())]
        self.__dict__.update(state)

    def _locked_parent(self) -> bool:
        """Whether a Composite that locked this one recursively is alive and still locked (else forget them)."""
        for ref in self._lock_parents:
            parent = ref()
            if parent is not None and parent._locked:
                return True
        self._lock_parents = []
        return False

    def unlock_(self, recurse: bool | None = None) -> "Composite":
        """Allow setting and deleting keys again; with ``recurse`` (the default) the nested Composites too.

        Raises:
            RuntimeError: this Composite (or, with ``recurse``, a nested one) was locked by the recursive
                ``lock_`` of a parent that is still locked; nothing is unlocked then.
        """
        recurse = True if recurse is None else recurse
        touched: list[Composite] = [self]
        if recurse:
            stack: list[Composite] = [self]
            while stack:
                for v in stack.pop()._specs.values():
                    if isinstance(v, Composite) and not any(v is t for t in touched):
                        touched.append(v)
                        stack.append(v)
        states = [t._locked for t in touched]
        for t in touched:
            t._locked = False
        if any(t._locked_parent() for t in touched):
            for t, state in zip(touched, states):
                t._locked = state
            raise RuntimeError(
                "Cannot unlock a Composite that is part of a locked graph: unlock the locked parent Composite first."
            )
        return self

    def clear_device_(self) -> "Composite":
        """Erase the device of this Composite and of the nested ones (leaves keep theirs); returns ``self``.

        Examples:
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(a=Unbounded(), device="cpu").clear_device_()
            >>> spec.device, spec["a"].device
            (None, device(type='cpu'))
        """
        self.device = None
        for v in self._specs.values():
            if v is not None:
                v.clear_device_()
        return self

    def type_check(self, value: Any, selected_keys: Any = None) -> None:
        """Check the dtypes of ``value`` (a TensorDict, or a tensor with ``selected_keys`` its key) against the
        specs, raising ``TypeError`` at the first mismatch; placeholder entries are skipped.

        Examples:
            >>> import torch
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = Composite(obs=Unbounded(shape=(2,)))
            >>> spec.type_check(spec.rand())
            >>> spec.type_check(torch.zeros(2, dtype=torch.int64), "obs")
            Traceback (most recent call last):
            ...
            TypeError: value.dtype=torch.int64 but Unbounded.dtype=torch.float32 (key 'obs')
        """
        if isinstance(value, torch.Tensor):
            if not isinstance(selected_keys, str):
                raise TypeError(
                    f"Composite.type_check: a tensor value needs its key as selected_keys (a str), got {selected_keys!r}"
                )
            value, selected_keys = {selected_keys: value}, [selected_keys]
        elif isinstance(selected_keys, str):
            selected_keys = [selected_keys]
        for key, spec in self._specs.items():
            if spec is None or (selected_keys is not None and key not in selected_keys):
                continue
            spec.type_check(value[key], key)

    def memoize_encode(self, mode: bool = True) -> None:
        """Accepted for TorchRL compatibility (recursively); :meth:`encode` caches nothing here."""
        if not isinstance(mode, bool):
            raise TypeError(f"Composite.memoize_encode: mode must be a bool, got {type(mode).__name__}")
        for v in self._specs.values():
            if v is not None:
                v.memoize_encode(mode)

    def erase_memoize_cache(self) -> None:
        """Accepted for TorchRL compatibility: there is no encode cache to clear."""

    # ---- generation (hot path: no validation) ----------------------------------------------
    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> TensorDict:
        """Random TensorDict of batch size ``shape + self.shape`` (every leaf drawn from ``generator`` when given)."""
        if shape or type(shape) is int:  # an int 0 is a batch of 0
            lead = _size(shape)
            return TensorDict._new_unsafe(
                {k: s.rand(lead, generator=generator) for k, s in self._leaf_items()},
                lead + self._shape,
                self.device,
                None if self._names is None else self._td_names(len(lead)),
            )
        return TensorDict._new_unsafe(
            {k: s.rand(generator=generator) for k, s in self._leaf_items()}, self._shape, self.device, self._names
        )

    sample = rand

    def zero(self, shape: Any = ()) -> TensorDict:
        """Zero-filled TensorDict of batch size ``shape + self.shape``."""
        if shape or type(shape) is int:  # an int 0 is a batch of 0
            lead = _size(shape)
            return TensorDict._new_unsafe(
                {k: s.zero(lead) for k, s in self._leaf_items()},
                lead + self._shape,
                self.device,
                None if self._names is None else self._td_names(len(lead)),
            )
        return TensorDict._new_unsafe(
            {k: s.zero() for k, s in self._leaf_items()}, self._shape, self.device, self._names
        )

    zeros = zero

    def one(self, shape: Any = ()) -> TensorDict:
        """One-filled TensorDict of batch size ``shape + self.shape``."""
        lead = _size(shape)
        return TensorDict._new_unsafe(
            {k: s.one(lead) for k, s in self._leaf_items()}, lead + self._shape, self.device, self._td_names(len(lead))
        )

    ones = one

    def rand_update(self, td: Any) -> Any:
        """Write a random value of every entry into ``td`` (in place) and return it."""
        return td.update(self.rand(td.batch_size[: td.ndim - self.ndim]))

    def zeros_update(self, td: Any) -> Any:
        """Write zeros for every entry into ``td`` (in place) and return it."""
        return td.update(self.zero(td.batch_size[: td.ndim - self.ndim]))

    def ones_update(self, td: Any) -> Any:
        """Write ones for every entry into ``td`` (in place) and return it."""
        return td.update(self.one(td.batch_size[: td.ndim - self.ndim]))

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
                raise KeyError(f"The Composite instance with keys {list(self._specs)} has no key {k!r} to encode")
            if v is None:
                raise RuntimeError(f"Composite.encode: the value of key {k!r} is None; encode needs a value per key")
            if spec is None:
                raise RuntimeError(
                    f"Composite.encode: key {k!r} holds a placeholder (None) spec, so its value cannot be encoded"
                )
            try:
                out[k] = spec.encode(v, ignore_device=ignore_device)
            except RuntimeError as err:
                raise RuntimeError(
                    f"Composite.encode: encoding key {k!r} raised a RuntimeError. Scroll up to know more ({err})"
                ) from err
        return TensorDict(out, batch_size=self.shape, device=None if ignore_device else self.device)

    def to_numpy(self, td: Any, safe: bool | None = None) -> dict:
        """A nested dict of numpy arrays (checked with :meth:`assert_is_in` first when ``safe`` is true)."""
        if safe:
            self.assert_is_in(td)
        return {k: spec.to_numpy(td.get(k), safe=False) for k, spec in self._leaf_items()}

    # ---- shape ops -------------------------------------------------------------------------
    def _map(self, shape: Any, fn, names: list | None = None) -> "Composite":
        out = Composite(shape=shape, device=self.device)
        out._specs = {k: None if v is None else fn(v) for k, v in self._specs.items()}
        if names is not None and any(n is not None for n in names):
            out._names = names
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
        names = None if self._names is None else [None] * (len(shape) - n) + self._names
        return self._map(shape, lambda v: v.expand(shape + v.shape[n:]), names)

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
        names = None if self._names is None else self._names[:dim] + [None] + self._names[dim:]
        return self._map(self.shape[:dim] + (1,) + self.shape[dim:], lambda v: v.unsqueeze(dim), names)

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
        names = None if self._names is None else self._names[:dim] + self._names[dim + 1 :]
        return self._map(self.shape[:dim] + self.shape[dim + 1 :], lambda v: v.squeeze(dim), names)

    def unbind(self, dim: int = 0) -> tuple["Composite", ...]:
        """Split along batch dim ``dim`` into a tuple of Composites."""
        dim = self._dim(dim)
        parts = {k: None if v is None else v.unbind(dim) for k, v in self._specs.items()}
        shape = self.shape[:dim] + self.shape[dim + 1 :]
        names = None if self._names is None else self._names[:dim] + self._names[dim + 1 :]
        if names is not None and all(n is None for n in names):
            names = None
        out = []
        for i in range(self.shape[dim]):
            c = Composite(shape=shape, device=self.device)
            c._specs = {k: None if p is None else p[i] for k, p in parts.items()}
            c._names = names
            out.append(c)
        return tuple(out)

    def _index(self, index: Any) -> "Composite":
        index = _batch_index(index, self._shape)
        shape = torch.empty(self._shape, device="meta")[index].shape
        return self._map(shape, lambda v: v[index], self._index_names(index))

    def _index_names(self, index: tuple) -> list | None:
        """The batch-dim names after indexing with ``index`` (names are dropped when that is unclear)."""
        names = self._names
        if names is None:
            return None
        if not all(isinstance(i, (int, slice)) for i in index):
            return None
        return [n for n, i in zip(names, index + (slice(None),) * len(names)) if not isinstance(i, int)]

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
            return self._map(self.shape, lambda v: v.to(dest), self._names)
        try:
            dev = _dest_device(dest, "Composite.to")
        except TypeError as err:
            raise ValueError(str(err)) from None
        dev = _device(dev)
        if self.device is not None and dev == self.device:
            return self
        out = self._map(self.shape, lambda v: v.to(dev), self._names)
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
        out = self._map(self.shape, lambda v: v.clone(), self._names)
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
