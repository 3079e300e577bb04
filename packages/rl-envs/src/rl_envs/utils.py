"""``torchrl.envs.utils``'s names: the exploration type and the step helpers.

The exploration type is the interaction type of ``tdict.nn`` under TorchRL's other name (as in
TorchRL, where ``ExplorationType`` is ``InteractionType``): ``set_exploration_type(RANDOM)`` makes
probabilistic policies sample, ``DETERMINISTIC`` makes them act greedily.

Examples:
    >>> from rl_envs.utils import ExplorationType, exploration_type, set_exploration_type
    >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
    ...     exploration_type()
    <InteractionType.DETERMINISTIC: 'deterministic'>
"""

from __future__ import annotations

from tdict.nn import InteractionType as ExplorationType
from tdict.nn import interaction_type as exploration_type
from tdict.nn import set_interaction_type as set_exploration_type

from .checks import check_env_specs
from .mdp import step_mdp

__all__ = ["ExplorationType", "check_env_specs", "exploration_type", "set_exploration_type", "step_mdp"]
