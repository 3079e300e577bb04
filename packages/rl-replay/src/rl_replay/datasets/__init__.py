"""Offline datasets: read-only replay buffers over local files converted once into memory-mapped form.

``OfflineDataset`` (base class), ``MinariExperienceReplay`` (a local Minari HDF5 dataset),
``D4RLExperienceReplay`` (a D4RL-format HDF5 file), ``register_dataset``/``load_dataset``.
Names load lazily; h5py is imported only when a loader reads a file (``pip install rl-replay[h5py]``).
Nothing here downloads.
"""

from __future__ import annotations

import importlib
from typing import Any, TYPE_CHECKING

_LAZY = {
    "OfflineDataset": "offline",
    "split_trajectories": "offline",
    "MinariExperienceReplay": "minari",
    "D4RLExperienceReplay": "d4rl",
    "register_dataset": "registry",
    "load_dataset": "registry",
    "registered_datasets": "registry",
}

if TYPE_CHECKING:  # type checkers and IDEs see these (`X as X`: re-exported); at run time __getattr__ loads them
    from .d4rl import (
        D4RLExperienceReplay as D4RLExperienceReplay,
    )
    from .minari import (
        MinariExperienceReplay as MinariExperienceReplay,
    )
    from .offline import (
        OfflineDataset as OfflineDataset,
        split_trajectories as split_trajectories,
    )
    from .registry import (
        load_dataset as load_dataset,
        register_dataset as register_dataset,
        registered_datasets as registered_datasets,
    )

# static, so that documentation tools read it (tests/integration/test_layout.py checks it against _LAZY)
__all__ = [
    "D4RLExperienceReplay",
    "MinariExperienceReplay",
    "OfflineDataset",
    "load_dataset",
    "register_dataset",
    "registered_datasets",
    "split_trajectories",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
