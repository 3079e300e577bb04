"""Wrappers of third-party simulators (each behind its extra: ``rl-envs[gymnasium]``...).

The Atari pipeline and the Brax wrappers are re-exported here (loaded on first use, so ale-py, jax and
brax stay optional).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import load_lazy

# name -> module that defines it (imported on first use)
_LAZY = {
    "AtariEnv": "atari",
    "make_atari_env": "atari",
    "BraxEnv": "brax",
    "BraxWrapper": "brax",
}

if TYPE_CHECKING:  # type checkers and IDEs see these (`X as X`: re-exported); at run time __getattr__ loads them
    from .atari import (
        AtariEnv as AtariEnv,
        make_atari_env as make_atari_env,
    )
    from .brax import (
        BraxEnv as BraxEnv,
        BraxWrapper as BraxWrapper,
    )

__all__ = ["AtariEnv", "BraxEnv", "BraxWrapper", "make_atari_env"]


def __getattr__(name: str) -> Any:
    return load_lazy(__name__, globals(), _LAZY, name)


def __dir__() -> list:
    return __all__
