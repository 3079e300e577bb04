"""Environments on rl-tdict: EnvBase, rollouts, transforms, batched envs and library wrappers.

Not implemented yet. This package will hold: EnvBase, rollout, step_mdp, check_env_specs, native
envs (Pendulum, CartPole, MuJoCo tasks), wrappers (Gymnasium, DM-Control, Brax, PettingZoo,
VMAS), transforms, SerialEnv/ParallelEnv, RandomPolicy.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
