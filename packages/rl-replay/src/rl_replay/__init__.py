"""Replay buffers on rl-tdict: storages, samplers, writers, sum/min trees and offline datasets.

Not implemented yet. This package will hold: ReplayBuffer family, storages, samplers, writers,
sum/min trees, HER, n-step, checkpointing, offline datasets.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
