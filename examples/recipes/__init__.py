"""Training recipes: one file per algorithm, each readable top to bottom, all on the shared Trainer.

Each recipe module has a config dataclass (``Config``, the ``algo`` group of ``examples/train.py``),
``PRESETS`` (tuned values per task), ``THRESHOLDS`` (the return its slow test asserts) and
``train(cfg) -> final eval return``. ``common.py`` holds what they share (run folder, loggers,
evaluation, checkpoints), ``envs.py`` the tasks, ``config.py`` the other config groups, ``nstep.py``
the n-step transitions of ``buffer.n_steps``. Recipes
import only the RL packages at module level; task libraries (Gymnasium, VMAS) load with their env.
"""

from __future__ import annotations

import importlib
import pkgutil

_SHARED = {"common", "config", "envs", "datasets", "networks", "nstep"}  # modules that are not recipes

# algo name -> recipe module: every module of this package that is not shared
RECIPES = {
    info.name: importlib.import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
    if info.name not in _SHARED and not info.name.startswith("_")
}
