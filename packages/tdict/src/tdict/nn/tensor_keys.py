"""Renamable keys: the TensorDict keys an object reads and writes, changed with ``set_keys``.

A class lists its keys in ``default_keys`` (name -> default key). Each instance gets its own
:class:`TensorKeys` under ``tensor_keys`` (``loss.tensor_keys.reward``), changed only through
``set_keys(reward="my_reward")``, which checks every name and key before changing anything and
then calls the hook ``_on_keys_set`` so the owner can react (forward the keys to a helper, drop a
cache).

Examples:
    >>> from tdict.nn import TensorKeysMixin
    >>> class Scorer(TensorKeysMixin):
    ...     default_keys = {"reward": "reward", "score": ("out", "score")}
    >>> scorer = Scorer().set_keys(reward=("next", "reward"))
    >>> scorer.tensor_keys.reward, scorer.tensor_keys.score
    (('next', 'reward'), ('out', 'score'))
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Collection, Iterable, Mapping
from typing import Any, ClassVar

from .._core.utils import is_nested_key, unravel_key
from ..errors import KeyValueError

__all__ = ["TensorKeys", "TensorKeysMixin"]


class TensorKeys:
    """The keys in use, one attribute per name; read-only (change them with the owner's ``set_keys``).

    ``vars(tensor_keys)`` gives them as a dict.

    Examples:
        >>> keys = TensorKeys({"reward": "reward", "done": ("next", "done")})
        >>> keys.done
        ('next', 'done')
        >>> vars(keys)
        {'reward': 'reward', 'done': ('next', 'done')}
        >>> keys.reward = "r"
        Traceback (most recent call last):
        ...
        AttributeError: TensorKeys are read-only: change 'reward' with set_keys(reward=...).
    """

    def __init__(self, keys: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        self.__dict__.update(keys)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"TensorKeys are read-only: change {name!r} with set_keys({name}=...).")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"TensorKeys are read-only: {name!r} cannot be deleted.")

    def __getattr__(self, name: str) -> Any:  # only reached when ``name`` is not a key name
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"no key named {name!r}; the key names are {sorted(self.__dict__)}.")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorKeys) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # mutable through set_keys

    def __repr__(self) -> str:
        return f"TensorKeys({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


def _dataclass_defaults(keys: type) -> dict[str, Any]:
    """name -> default key of a dataclass listing keys as fields (``None`` for a field without a default)."""
    defaults = {}
    for field in dataclasses.fields(keys):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = field.default_factory()
        else:
            defaults[field.name] = None
    return defaults


class TensorKeysMixin:
    """Gives a class ``tensor_keys`` and ``set_keys`` from its ``default_keys`` (TorchRL's loss keys).

    Class attributes:
        default_keys: key name -> default key (a str or a tuple of str). A name whose default is
            ``None`` is off by default, and can be set back to ``None``.
        deprecated_key_names: old name -> current name; ``set_keys`` accepts the old name with a
            ``DeprecationWarning``.
        accepts_key_lists: ``True`` when every name also accepts a non-empty list of keys (a
            composite policy's per-head keys), or the collection of the names that do.

    A key is stored unravelled (``("a",)`` -> ``"a"``). Override ``_on_keys_set(changed)``
    (``changed``: name -> new key) to react to ``set_keys``.

    Examples:
        >>> class Loss(TensorKeysMixin):
        ...     default_keys = {"action": "action", "log_prob": "action_log_prob"}
        ...     accepts_key_lists = ("log_prob",)
        ...     def _on_keys_set(self, changed):
        ...         print("changed:", changed)
        >>> loss = Loss().set_keys(log_prob=["head_0", ("head_1", "log_prob")])
        changed: {'log_prob': ['head_0', ('head_1', 'log_prob')]}
        >>> loss.set_keys(value="v")
        Traceback (most recent call last):
        ...
        tdict.errors.KeyValueError: Loss.set_keys: unknown key name(s) ['value']; accepted: ['action', 'log_prob'].
        >>> loss.set_keys(action=3)
        Traceback (most recent call last):
        ...
        ValueError: Loss.set_keys: got action=3; action must be a str or a tuple of str.
    """

    default_keys: ClassVar[Mapping[str, Any]] = {}
    deprecated_key_names: ClassVar[Mapping[str, str]] = {}
    accepts_key_lists: ClassVar[bool | Collection[str]] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # TorchRL's form: the keys as the fields of a dataclass, ``_AcceptedKeys`` or ``default_keys`` itself
        declared = cls.__dict__.get("default_keys", cls.__dict__.get("_AcceptedKeys"))
        if isinstance(declared, type) and dataclasses.is_dataclass(declared):
            cls.default_keys = _dataclass_defaults(declared)

    @property
    def tensor_keys(self) -> TensorKeys:
        """The keys in use, by name (``self.tensor_keys.reward``); see :meth:`set_keys`."""
        keys = self.__dict__.get("_tensor_keys")
        if keys is None:  # built on first use: no __init__ to cooperate with
            where = f"{type(self).__name__}.default_keys"
            defaults = {name: self._checked_key(where, name, key) for name, key in self.default_keys.items()}
            keys = self.__dict__["_tensor_keys"] = TensorKeys(defaults)
        return keys

    def set_keys(self, **keys: Any) -> Any:
        """Rename the keys read or written (``set_keys(reward="my_reward")``); returns ``self``.

        Every name and key is checked before anything changes, then ``_on_keys_set`` is called.

        Raises:
            KeyValueError: an unknown name, listing the accepted ones (a ``KeyError`` and a
                ``ValueError``: TorchRL raises the one or the other depending on the class).
            ValueError: a value that is not a key.
        """
        owner = type(self).__name__
        for old in sorted(set(keys) & set(self.deprecated_key_names)):
            new = self.deprecated_key_names[old]
            if new in keys:
                raise ValueError(f"{owner}.set_keys: got both {old!r} and {new!r} (its new name); give {new!r} only.")
            warnings.warn(
                f"{owner}.set_keys: {old!r} is deprecated, use {new!r} (TorchRL's name).",
                DeprecationWarning,
                stacklevel=2,
            )
            keys = {(new if name == old else name): value for name, value in keys.items()}
        unknown = sorted(set(keys) - set(self.default_keys))
        if unknown:
            raise KeyValueError(
                f"{owner}.set_keys: unknown key name(s) {unknown}; accepted: {sorted(self.default_keys)}."
            )
        changed = {name: self._checked_key(f"{owner}.set_keys", name, key) for name, key in keys.items()}
        self.tensor_keys.__dict__.update(changed)
        self._on_keys_set(changed)
        return self

    def _on_keys_set(self, changed: dict[str, Any]) -> None:
        """Called by :meth:`set_keys` after the keys changed (``changed``: name -> new key)."""

    def _checked_key(self, where: str, name: str, key: Any) -> Any:
        """``key`` unravelled, or ``ValueError`` naming ``where`` and ``name``."""
        lists = self.accepts_key_lists
        several = lists is True or (not isinstance(lists, bool) and name in lists)
        if several and isinstance(key, list) and key and all(is_nested_key(k) for k in key):
            return [unravel_key(k) for k in key]
        if is_nested_key(key):
            return unravel_key(key)
        if key is None and self.default_keys.get(name, ...) is None:
            return None
        expected = "a str or a tuple of str"
        if several:
            expected += ", or a non-empty list of keys"
        if self.default_keys.get(name, ...) is None:
            expected += ", or None (off)"
        raise ValueError(f"{where}: got {name}={key!r}; {name} must be {expected}.")
