"""Independent PPO (IPPO, de Witt et al. 2020): ``mappo.py`` with a decentralised critic.

The one difference from MAPPO: each agent's value comes from its own observation only
(``MultiAgentMLP(centralised=False)``, parameters shared by the agents), so nothing in training
needs more than what one agent sees. The policy, the per-agent GAE, the clipped loss and the
epochs of minibatches are ``mappo.py``'s (read that file); so are the tuned values per task and the threshold.
Expected on ``navigation`` (VMAS, 3 agents, continuous actions, 100-step episodes): team
return (the mean of the agents') about 2.5 after 60,000 frames (threshold 1.5; a random policy
gets about -0.6), about 2 minutes on 2 cores.

Run: ``python examples/train.py algo=ippo env=navigation [algo.epochs=10 collector.total_frames=120000 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import mappo
from .config import TrainConfig


@dataclass
class IPPOConfig(mappo.MAPPOConfig):
    name: str = "ippo"
    centralised_critic: bool = False


Config = IPPOConfig  # the recipe's entry in the ``algo`` config group

PRESETS = mappo.PRESETS
DEFAULTS = mappo.DEFAULTS
THRESHOLDS = mappo.THRESHOLDS


def train(cfg: TrainConfig) -> float:
    return mappo.train(cfg)  # the config's centralised_critic=False makes the critic decentralised
