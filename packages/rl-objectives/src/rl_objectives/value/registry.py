"""The value-estimator registry: which class implements each kind of estimator, and its defaults.

Every estimator class registers itself against a :class:`ValueEstimators` member (or a member of
any other ``Enum``) with :func:`register_value_estimator`; ``make_value_estimator`` of the losses,
:func:`build_value_estimator` and :func:`dispatch_value_estimator` all build estimators from here,
so a new estimator needs no change to any loss. Kinds are also found by name, case-insensitively
(``"gae"``, ``"TDLambda"``), for configuration files.

Examples:
    >>> from rl_objectives.value import GAE, ValueEstimators
    >>> from rl_objectives.value.registry import default_value_kwargs, get_value_estimator_entry
    >>> get_value_estimator_entry("gae").cls is GAE
    True
    >>> default_value_kwargs(ValueEstimators.TDLambda)
    {'gamma': 0.99, 'lmbda': 0.95}
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import ValueEstimators

__all__ = [
    "VALUE_ESTIMATOR_REGISTRY",
    "ValueEstimatorEntry",
    "build_value_estimator",
    "default_value_kwargs",
    "dispatch_value_estimator",
    "get_value_estimator_entry",
    "register_value_estimator",
]


@dataclass
class ValueEstimatorEntry:
    """One kind of estimator: its class and the hyper-parameters it is built with by default."""

    cls: type
    default_kwargs: dict[str, Any] = field(default_factory=dict)


# kind (an Enum member) -> entry; filled by the estimator classes as they are defined
VALUE_ESTIMATOR_REGISTRY: dict[Any, ValueEstimatorEntry] = {}


def register_value_estimator(value_type: enum.Enum, *, default_kwargs: Mapping[str, Any] | None = None) -> Callable:
    """Class decorator: the decorated estimator class implements ``value_type``, built with
    ``default_kwargs`` unless the caller overrides them (registering a kind again replaces it).

    Examples:
        >>> import enum
        >>> from rl_objectives.value import GAE
        >>> class MyKinds(enum.Enum):
        ...     SLOW_GAE = "slow GAE"
        >>> @register_value_estimator(MyKinds.SLOW_GAE, default_kwargs={"gamma": 0.999, "lmbda": 0.9})
        ... class SlowGAE(GAE):
        ...     pass
        >>> get_value_estimator_entry("slow_gae").cls is SlowGAE
        True
        >>> _ = VALUE_ESTIMATOR_REGISTRY.pop(MyKinds.SLOW_GAE)
    """
    if not isinstance(value_type, enum.Enum):
        raise TypeError(
            f"register_value_estimator: value_type must be an Enum member (e.g. a ValueEstimators member), got "
            f"{type(value_type).__name__}."
        )

    def register(cls: type) -> type:
        VALUE_ESTIMATOR_REGISTRY[value_type] = ValueEstimatorEntry(cls, dict(default_kwargs or {}))
        return cls

    return register


def _kind(value_type: Any) -> enum.Enum:
    """``value_type`` as a registry key: an Enum member, or a name (or ``ValueEstimators`` value) of one."""
    if isinstance(value_type, enum.Enum):
        return value_type
    if isinstance(value_type, str):
        wanted = value_type.lower()
        for kind in (*ValueEstimators, *VALUE_ESTIMATOR_REGISTRY):
            if kind.name.lower() == wanted or (isinstance(kind.value, str) and kind.value.lower() == wanted):
                return kind
        known = sorted({k.name.lower() for k in (*ValueEstimators, *VALUE_ESTIMATOR_REGISTRY)})
        raise KeyError(f"Unknown value estimator alias {value_type!r}; known: {known}.")
    raise TypeError(
        f"value_type must be a registered enum value or a string alias, got {type(value_type).__name__} "
        f"({value_type!r})."
    )


def get_value_estimator_entry(value_type: Any) -> ValueEstimatorEntry:
    """The registry entry of ``value_type`` (an Enum member or its name, case-insensitive).

    Raises:
        KeyError: an unknown name.
        TypeError: neither an Enum member nor a str.
        NotImplementedError: an Enum member no class is registered for.
    """
    kind = _kind(value_type)
    if kind not in VALUE_ESTIMATOR_REGISTRY and isinstance(kind, ValueEstimators):
        from . import advantages  # noqa: F401  (its classes register the built-in kinds)
    entry = VALUE_ESTIMATOR_REGISTRY.get(kind)
    if entry is None:
        raise NotImplementedError(
            f"No value estimator is registered for {kind!r}; register a class with @register_value_estimator({kind!s})."
        )
    return entry


def default_value_kwargs(value_type: Any) -> dict[str, Any]:
    """The hyper-parameters ``value_type`` is built with by default (a fresh dict)."""
    return dict(get_value_estimator_entry(value_type).default_kwargs)


def build_value_estimator(loss_module: Any, value_type: Any, **hyperparams: Any) -> Any:
    """An estimator of kind ``value_type`` for ``loss_module``: the registered class, built with its
    default hyper-parameters overridden by ``hyperparams``.

    Unless given, ``value_network`` is the loss's ``critic_network`` or ``value_network`` (``None``
    when it has neither: the values are then read from the data), and V-trace's ``actor_network``
    the loss's ``actor_network``.

    Examples:
        >>> from torch import nn
        >>> from tdict.nn import TensorDictModule
        >>> critic = TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["state_value"])
        >>> gae = build_value_estimator(object(), "gae", value_network=critic, lmbda=0.9)
        >>> type(gae).__name__, gae.value_network is critic, float(gae.lmbda)
        ('GAE', True, 0.9)
    """
    from .advantages import VTrace

    entry = get_value_estimator_entry(value_type)
    kwargs = {**entry.default_kwargs, **hyperparams}
    if "value_network" not in kwargs:
        kwargs["value_network"] = _network_of(loss_module, "critic_network", "value_network")
    if issubclass(entry.cls, VTrace) and "actor_network" not in kwargs:
        kwargs["actor_network"] = _network_of(loss_module, "actor_network")
    return entry.cls(**kwargs)


def _network_of(loss_module: Any, *names: str) -> Any:
    for name in names:
        network = getattr(loss_module, name, None)
        if network is not None:
            return network
    return None


def dispatch_value_estimator(
    loss_module: Any,
    value_type: Any,
    *,
    supported: Iterable[Any],
    tensor_keys: Mapping[str, Any] | None = None,
    **hyperparams: Any,
) -> Any:
    """Build the estimator of kind ``value_type`` for ``loss_module`` (see :func:`build_value_estimator`;
    the loss's ``gamma`` attribute, when it has one, is the default discount), after checking that
    the loss supports that kind, and install it as ``loss_module.value_estimator``. ``tensor_keys``:
    keys given to the estimator's ``set_keys`` once installed (they override the loss's). Returns
    the estimator.

    Raises:
        NotImplementedError: ``value_type`` is not one of ``supported``.
    """
    kind = _kind(value_type)
    supported = [_kind(s) for s in supported]
    if kind not in supported:
        raise NotImplementedError(
            f"Value type {kind.name} is not implemented for loss {type(loss_module).__name__}. Supported value types: "
            f"{sorted(s.name for s in supported)}."
        )
    gamma = getattr(loss_module, "gamma", None)
    if gamma is not None:
        hyperparams.setdefault("gamma", gamma)
    estimator = build_value_estimator(loss_module, kind, **hyperparams)
    loss_module.value_type = kind
    loss_module.value_estimator = estimator  # a loss gives it the keys they share
    if tensor_keys:
        estimator.set_keys(**tensor_keys)  # then the caller's, which win
    return estimator
