"""Modules, value estimators, losses and trainers on rl-tdict.

Not implemented yet. This package will hold: rl_objectives.modules (nets, actors, critics,
distributions, exploration, LSTM/GRU, multi-agent, world models), value estimators, losses,
target updaters, rl_objectives.trainers (Trainer, hooks, loggers, configs).

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
