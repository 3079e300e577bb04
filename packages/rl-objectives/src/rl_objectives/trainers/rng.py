"""The global random generators (torch, NumPy, Python's ``random``): seed, save and restore them.

A checkpoint that resumes a run exactly carries these states; :func:`rng_state` gives them as
plain data (tensors, lists, numbers) that ``torch.load(weights_only=True)`` reads back.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["check_rng_state", "rng_state", "seed_everything", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """The states of torch's (CPU and CUDA), NumPy's and Python's global generators, as plain data.

    Examples:
        >>> import random, torch
        >>> from rl_objectives.trainers import rng_state, set_rng_state
        >>> state = rng_state()
        >>> a, b = torch.rand(2), random.random()
        >>> set_rng_state(state)
        >>> bool((torch.rand(2) == a).all()), random.random() == b
        (True, True)
    """
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch in practice
        return state
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype("int64")),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restores what :func:`rng_state` returned (the generators it names)."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        npy = state["numpy"]
        np.random.set_state(
            (npy["kind"], npy["keys"].numpy().astype("uint32"), npy["pos"], npy["has_gauss"], npy["cached_gaussian"])
        )


def seed_everything(seed: int) -> None:
    """Seeds torch, NumPy (when installed) and Python's ``random`` with ``seed``."""
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return
    np.random.seed(seed % 2**32)


def check_rng_state(state: Any) -> None:
    """Raise ``ValueError`` unless ``state`` looks like what :func:`rng_state` returns."""
    ok = (
        isinstance(state, Mapping)
        and isinstance(state.get("torch"), torch.Tensor)
        and isinstance(state.get("python"), (list, tuple))
    )
    if not ok:
        raise ValueError(
            f"Trainer.load_state_dict: state['rng'] must come from rng_state() (torch and python entries), got {state!r}."
        )
