"""A name -> loader registry for offline datasets: ``register_dataset`` and ``load_dataset``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["load_dataset", "register_dataset", "registered_datasets"]

# name -> (loader, defaults); a loader is a callable or "module:attr" imported on first use
_REGISTRY: dict[str, tuple[Any, dict]] = {
    "minari": ("rl_replay.datasets.minari:MinariExperienceReplay", {}),
    "d4rl": ("rl_replay.datasets.d4rl:D4RLExperienceReplay", {}),
}


def register_dataset(name: str, loader_or_class: Callable | str, *, overwrite: bool = False, **defaults: Any) -> None:
    """Registers a dataset loader under ``name`` (later found by :func:`load_dataset`).

    Args:
        name: the registry name. A name also works as a prefix: ``load_dataset("name/some-id")``
            calls the loader with ``dataset_id="some-id"``.
        loader_or_class: a callable returning the dataset (e.g. an :class:`OfflineDataset`
            subclass), or a ``"module:attribute"`` string imported on first use.
        overwrite: replace an existing entry (else registering a taken name raises).
        **defaults: keyword arguments passed to the loader unless :func:`load_dataset` overrides them.

    Examples:
        >>> register_dataset("my-pairs", dict, kind="pairs", overwrite=True)
        >>> load_dataset("my-pairs", size=3)
        {'kind': 'pairs', 'size': 3}
    """
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"register_dataset: name must be a non-empty str without surrounding spaces, got {name!r}.")
    if not (callable(loader_or_class) or (isinstance(loader_or_class, str) and ":" in loader_or_class)):
        raise TypeError(
            f"register_dataset: loader_or_class must be a callable or a 'module:attribute' string, got {loader_or_class!r}."
        )
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"register_dataset: {name!r} is already registered; pass overwrite=True to replace it.")
    _REGISTRY[name] = (loader_or_class, dict(defaults))


def registered_datasets() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def _resolve(loader: Any) -> Callable:
    if isinstance(loader, str):
        module, _, attr = loader.partition(":")
        return getattr(importlib.import_module(module), attr)
    return loader


def load_dataset(name: str, **kwargs: Any) -> Any:
    """Builds the dataset registered as ``name`` (or ``prefix/dataset_id``) with ``kwargs`` over its defaults.

    ``load_dataset("d4rl", path="hopper.hdf5", batch_size=256)`` builds a
    :class:`D4RLExperienceReplay`; ``load_dataset("minari/door-human-v1", batch_size=32)`` a
    :class:`MinariExperienceReplay` for ``dataset_id="door-human-v1"``.

    Raises:
        KeyError: ``name`` is neither registered nor ``<registered prefix>/<id>``.

    Examples:
        >>> try:
        ...     load_dataset("no-such-dataset")
        ... except KeyError as err:
        ...     print("registered:" in str(err), "'d4rl'" in str(err), "'minari'" in str(err))
        True True True
    """
    if not isinstance(name, str):
        raise TypeError(f"load_dataset: name must be a str, got {type(name).__name__}.")
    entry = _REGISTRY.get(name)
    if entry is None and "/" in name:
        prefix, _, dataset_id = name.partition("/")
        entry = _REGISTRY.get(prefix)
        if entry is not None:
            if "dataset_id" in kwargs:
                raise ValueError(f"load_dataset: {name!r} already names the dataset_id; do not pass dataset_id= too.")
            kwargs = {"dataset_id": dataset_id, **kwargs}
    if entry is None:
        raise KeyError(f"load_dataset: unknown dataset {name!r}; registered: {registered_datasets()}")
    loader, defaults = entry
    return _resolve(loader)(**{**defaults, **kwargs})
