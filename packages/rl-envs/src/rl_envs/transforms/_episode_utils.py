"""Helpers shared by the episode and reward transforms: the parent env and reset masks."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase
from tdict import NestedKey

from .base import Transform

_ENV_ONLY = "{} only works inside an env (reset/step); it has no meaning on a plain TensorDict."


def _need_parent(transform: Transform) -> Any:
    parent = transform.parent
    if parent is None:
        raise RuntimeError(f"{type(transform).__name__} needs a parent env: use it inside a TransformedEnv.")
    return parent


def _prefix(key: NestedKey) -> tuple:
    return () if isinstance(key, str) else tuple(key[:-1])


def _join(prefix: tuple, name: NestedKey) -> NestedKey:
    """``name`` (a string or a nested key) under ``prefix``; a one-part result is a plain string."""
    path = (*prefix, *((name,) if isinstance(name, str) else name))
    return path[0] if len(path) == 1 else path


def _mask(tensordict: TensorDictBase | None, key: NestedKey, shape: torch.Size, device: Any) -> torch.Tensor:
    """The reset mask (all True when absent), shaped like ``shape``."""
    mask = tensordict.get(key, None) if tensordict is not None else None
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    return mask.reshape(shape)
