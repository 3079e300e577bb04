"""The tasks the recipes train on, by the name ``env=<name>`` takes.

Native tasks (``pendulum``, ``cartpole``) are ``rl_envs`` envs vectorised over a batch dim (a single
``cartpole`` is Gymnasium's ``CartPole-v1`` when Gymnasium is installed: cheaper at batch 1);
``pendulum_pixels`` is ``pendulum`` whose ``"observation"`` is a 16 x 16 grayscale image of the pole
(:func:`render_pendulum`, torch ops: no display); ``halfcheetah`` is Gymnasium's ``HalfCheetah-v5`` (needs ``rl-envs[gymnasium]`` and ``mujoco``);
``satellite`` is the native :class:`~rl_envs.native.mujoco.SatelliteEnv` pointed with slew macro
actions (one policy step = one ``SatelliteMacroAction``; needs ``mujoco``); ``navigation`` and ``balance`` are VMAS multi-agent tasks (``rl-envs[vmas]``) whose agents sit
under the ``"agents"`` group. Every env gets a ``StepCounter`` time limit, so that episodes end
with ``truncated`` and evaluations see whole episodes. :class:`Normalization` is RL-zoo's
``normalize: true`` (SB3's ``VecNormalize``) for the recipes that ask for it. VMAS tasks also get the limit inside VMAS
(so that the agents' own ``("agents", "done")`` flags, which per-agent losses read, mark it too) and
the team's reward at the root, ``("next", "reward")``: the mean of the agents' rewards, which
evaluation, logs and QMIX read (TorchRL's QMIX example takes the same mean).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from rl_envs import (
    CartPoleEnv,
    ClipTransform,
    NormalizeReward,
    PendulumEnv,
    StepCounter,
    TransformedEnv,
    UnaryTransform,
    VecNorm,
)

from .config import EnvConfig


def _pendulum(n: int, discrete: bool, max_steps: int) -> Any:
    return PendulumEnv(batch_size=[n])


PIXELS = 16  # side of pendulum_pixels' images


def render_pendulum(observation: torch.Tensor, size: int = PIXELS) -> torch.Tensor:
    """Pendulum observations ``[*B, 3]`` (``cos th, sin th, thdot``) -> grayscale images ``[*B, 1, size, size]``
    in [0, 1]: the pole, a line from the image's centre to radius ``0.4 size`` (up when upright, ``th = 0``),
    anti-aliased over about a pixel. The angular velocity is not drawn: the agent infers it from successive images."""
    cos, sin = observation[..., 0:1, None], observation[..., 1:2, None]  # [*B, 1, 1]
    coords = torch.arange(size, dtype=observation.dtype, device=observation.device) + 0.5 - size / 2
    x, y = coords.view(1, size), coords.view(size, 1)  # pixel centres, y down
    tip_x, tip_y = 0.4 * size * sin, -0.4 * size * cos
    along = ((x * tip_x + y * tip_y) / (0.16 * size * size)).clamp(0.0, 1.0)  # the nearest point of the pole
    dist = torch.sqrt((x - along * tip_x).square() + (y - along * tip_y).square())
    return (1.5 - dist).clamp(0.0, 1.0).unsqueeze(-3)


def _pendulum_pixels(n: int, discrete: bool, max_steps: int) -> Any:
    # Pendulum whose "observation" is a PIXELS x PIXELS image of the pole (rendered with torch ops, no display)
    render = UnaryTransform(in_keys=["observation"], out_keys=["observation"], fn=render_pendulum)
    return TransformedEnv(PendulumEnv(batch_size=[n]), render)


def _cartpole(n: int, discrete: bool, max_steps: int) -> Any:
    if n == 1:  # one env: Gymnasium's Python step costs a fifth of a batched torch step at batch 1
        try:
            from rl_envs import GymEnv

            return GymEnv("CartPole-v1")
        except ImportError:
            pass
    return CartPoleEnv(batch_size=[n])  # one-hot actions, as GymEnv("CartPole-v1")


def _gym(env_id: str) -> Callable[[int, bool, int], Any]:
    def make(n: int, discrete: bool, max_steps: int) -> Any:
        from rl_envs import DoubleToFloat, GymEnv

        try:
            env = GymEnv(env_id, num_envs=n)
        except ImportError as err:
            raise ImportError(
                f"env {env_id} needs Gymnasium's MuJoCo tasks: pip install 'rl-envs[gymnasium]' mujoco "
                f"(`hatch run train` has them). {err}"
            ) from err
        return TransformedEnv(env, DoubleToFloat())  # MuJoCo observations are float64; the networks float32

    return make


def _satellite(n: int, discrete: bool, max_steps: int) -> Any:
    # one policy step is one slew macro of 10 low-level steps (1 s; fewer once on target): the policy
    # picks the goal attitude; the episode ends at the env's own 200 low-level steps
    from rl_envs import MacroPrimitiveTransform
    from rl_envs.native.mujoco import SatelliteEnv, SatelliteMacroAction

    macro = MacroPrimitiveTransform(SatelliteMacroAction, max_duration=10, fixed_duration=True)
    return TransformedEnv(SatelliteEnv(num_envs=n), macro)


def _team_reward(agents_reward: Any) -> Any:
    return agents_reward.mean(-1)  # [N, n_agents] -> [N]


def _vmas(scenario: str, **kwargs: Any) -> Callable[[int, bool, int], Any]:
    def make(n: int, discrete: bool, max_steps: int) -> Any:
        from rl_envs import UnaryTransform, VmasEnv

        env = VmasEnv(scenario, num_envs=n, continuous_actions=not discrete, max_steps=max_steps, **kwargs)
        return TransformedEnv(env, UnaryTransform(in_keys=[("agents", "reward")], out_keys=["reward"], fn=_team_reward))

    return make


# name -> (builder(num_envs, discrete_actions, time limit), time limit in steps)
TASKS: dict[str, tuple[Callable[[int, bool, int], Any], int]] = {
    "pendulum": (_pendulum, 200),
    "pendulum_pixels": (_pendulum_pixels, 200),
    "cartpole": (_cartpole, 500),
    "halfcheetah": (_gym("HalfCheetah-v5"), 1000),
    "hopper": (_gym("Hopper-v5"), 1000),
    "satellite": (_satellite, 200),
    "navigation": (_vmas("navigation", n_agents=3), 100),
    "balance": (_vmas("balance", n_agents=3), 100),
}


def time_limit(cfg: EnvConfig) -> int:
    """The episode length cap of the task (``cfg.max_steps`` when given)."""
    return cfg.max_steps or TASKS[check_task(cfg.name)][1]


def check_task(name: str) -> str:
    if name not in TASKS:
        raise ValueError(f"env={name!r} is not a known task; choose one of {sorted(TASKS)}.")
    return name


def make_env(cfg: EnvConfig, num_envs: int | None = None, *, discrete: bool = False) -> Any:
    """``num_envs`` (default ``cfg.num_envs``) copies of the task, with its time limit."""
    builder, _ = TASKS[check_task(cfg.name)]
    env = builder(num_envs or cfg.num_envs, discrete, time_limit(cfg))
    return TransformedEnv(env, StepCounter(time_limit(cfg)))


class Normalization:
    """RL-zoo's ``normalize: true`` (SB3's ``VecNormalize``) for the task ``cfg`` describes.

    Training envs standardise observations with running statistics (every observation so far, float64)
    and clip them to ``[-clip, clip]``, and divide rewards by the running std of the ``gamma``-discounted
    return (:class:`~rl_envs.NormalizeReward`, clipped likewise). Evaluation envs read the same
    observation statistics, frozen, and keep the task's own rewards, so evaluations report real returns.
    The statistics live in the training env's transforms, so the checkpoint (the collector's env state)
    holds them and a resumed run restores them for both.
    """

    def __init__(self, cfg: EnvConfig, gamma: float, clip: float = 10.0) -> None:
        self.gamma, self.clip = gamma, clip
        stats = VecNorm.build_td_for_shared_vecnorm(make_env(cfg, 1), ["observation"])
        self.stats = stats.double().share_memory_()  # float64 sums: a million steps without rounding drift

    def _observations(self, env: Any, *, frozen: bool) -> Any:
        norm = VecNorm(in_keys=["observation"], shared_td=self.stats, decay=1.0, eps=1e-8)
        env.append_transform(norm.freeze() if frozen else norm)
        return env.append_transform(ClipTransform(in_keys=["observation"], low=-self.clip, high=self.clip))

    def training(self, env: Any) -> Any:
        """``env`` (a task from :func:`make_env`) with normalised observations and rewards, updating the statistics."""
        return self._observations(env, frozen=False).append_transform(NormalizeReward(gamma=self.gamma, clip=self.clip))

    def evaluation(self, env: Any) -> Any:
        """``env`` with observations normalised by the training statistics (frozen); rewards untouched."""
        return self._observations(env, frozen=True)
