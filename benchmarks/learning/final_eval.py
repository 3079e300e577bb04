"""The final evaluation both libraries share: one Gymnasium env, the same start states.

Each run's final policy plays ``FINAL_EPISODES`` episodes of the task's Gymnasium env with
deterministic actions, episode ``i`` reset with seed ``FINAL_SEED + i``; the mean return is the
run's final return. The same seeds give both libraries the same start states, so their final
returns are paired: the difference measures the policies, not the draw of the starts (one pendulum
episode returns about 0 to -350 depending on where it starts, so two unpaired means of 50 episodes
of equally good policies differ by several points).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
from settings import FINAL_EPISODES

FINAL_SEED = 20_000  # apart from the seeds of training and of the periodic evaluations


def mean_return(act: Callable[[np.ndarray], Any], gym_id: str, episodes: int = FINAL_EPISODES) -> float:
    """The mean undiscounted return of ``act`` (observation -> action) over ``episodes`` episodes of
    ``gym_id``, episode ``i`` starting from ``reset(seed=FINAL_SEED + i)``."""
    env = gym.make(gym_id)
    total = 0.0
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=FINAL_SEED + i)
            done = False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = terminated or truncated
    finally:
        env.close()
    return total / episodes
