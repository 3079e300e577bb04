"""Soft actor-critic (Haarnoja et al. 2018): off-policy, a tanh-Gaussian actor, twin Q-networks, a
learnt temperature.

Collect a batch with the current policy (random actions during the warm-up), write it into the
replay buffer, then take ``utd * frames_per_batch`` gradient steps on uniform samples, each followed
by a Polyak update of the target critics. Expected: ``pendulum`` -200 or better in 12,000 frames
(about a minute on 2 cores); ``halfcheetah`` (HalfCheetah-v5) above 3,000 in 100,000 frames
(seed 0: 5,597, 3,000 crossed at 50,000 frames; 33 minutes on one thread); ``satellite`` (pointing
with slew macros) above -220 in 8,000 macro steps (seed 0: -209 at the end, -192 at best; about
2 minutes), where random goal attitudes score about -280 and slewing straight to the target -175.

Run: ``python examples/train.py algo=sac env=pendulum [algo.lr=3e-4 collector.total_frames=20000 ...]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import SACLoss, SoftUpdate
from rl_objectives.trainers import TargetNetUpdaterHook

from .common import finish, make_off_policy_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env
from .networks import q_critic, tanh_gaussian_actor


@dataclass
class SACConfig:
    name: str = "sac"
    lr: Optional[float] = None
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target critics
    alpha_init: Optional[float] = None  # initial temperature (learnt)
    utd: Optional[float] = None  # gradient steps per collected frame
    hidden: Optional[int] = None  # width of the two hidden layers of actor and critics
    # the temperature's entropy target, in nats of the env's action (None: SACLoss's "auto", -dim(A));
    # SB3 measures -dim(A) on actions scaled to [-1, 1]: on the pendulum's [-2, 2], -1 + log 2 here
    target_entropy: Optional[float] = None
    # evaluate (and keep) an exponential moving average of the actor's weights, updated after every
    # gradient step with this decay (None: the actor itself); collection always uses the live actor
    actor_ema: Optional[float] = None


Config = SACConfig  # the recipe's entry in the ``algo`` config group

# per task: what RL-zoo tunes, and a faster setting where ours measures faster to the threshold
PRESETS = {
    "pendulum": {
        "algo": {"lr": 5e-4, "gamma": 0.99, "tau": 0.01, "utd": 0.5, "hidden": 64, "alpha_init": 0.2},
        "env": {"num_envs": 8},
        "collector": {"frames_per_batch": 64, "total_frames": 12_000, "init_random_frames": 1_000},
        "buffer": {"size": 100_000, "batch_size": 256},
        "logger": {"eval_every": 2_000},
    },
    # the policy picks the goal attitude of each 1 s slew macro (relative to the target): 20 per episode
    "satellite": {
        "algo": {"lr": 1e-3, "gamma": 0.95, "tau": 0.01, "utd": 1.0, "hidden": 64, "alpha_init": 0.1},
        "env": {"num_envs": 8},
        "collector": {"frames_per_batch": 32, "total_frames": 8_000, "init_random_frames": 512},
        "buffer": {"size": 100_000, "batch_size": 256},
        "logger": {"eval_every": 1_000},
    },
    "halfcheetah": {
        "algo": {"lr": 3e-4, "gamma": 0.99, "tau": 0.005, "utd": 1.0, "hidden": 256},
        "env": {"num_envs": 1},
        "collector": {"frames_per_batch": 1_000, "total_frames": 100_000, "init_random_frames": 10_000},
        "buffer": {"size": 1_000_000, "batch_size": 256},
        "logger": {"eval_every": 10_000},
    },
}
DEFAULTS = {"algo": {"lr": 3e-4, "gamma": 0.99, "tau": 0.005, "utd": 1.0, "hidden": 256, "alpha_init": 1.0}}
# satellite: slewing straight to the target scores about -175, random goal attitudes about -280
THRESHOLDS = {"pendulum": -200.0, "halfcheetah": 3000.0, "satellite": -220.0}


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "sac", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = tanh_gaussian_actor(obs_dim, action_spec, [algo.hidden, algo.hidden])
    loss = SACLoss(
        actor,
        q_critic(obs_dim, action_spec.shape[-1], [algo.hidden, algo.hidden]),
        num_qvalue_nets=2,
        alpha_init=algo.alpha_init,
        action_spec=action_spec,
        loss_function="l2",
        target_entropy="auto" if algo.target_entropy is None else algo.target_entropy,
    )
    loss.make_value_estimator(gamma=algo.gamma)
    eval_actor = actor if algo.actor_ema is None else copy.deepcopy(actor).requires_grad_(False)
    trainer = make_off_policy_trainer(run, loss, actor, eval_actor, lr=algo.lr, utd=algo.utd)
    if algo.actor_ema is not None:
        average, live, weight = list(eval_actor.parameters()), list(actor.parameters()), 1.0 - algo.actor_ema

        @torch.no_grad()  # outside autograd: the average must not join the trained actor's graph
        def update_average() -> None:
            torch._foreach_lerp_(average, live, weight)

        trainer.register_op("post_optim", update_average)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=algo.tau)).register(trainer)
    resume_if_asked(run, trainer)

    print(
        f"SAC on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, eval_actor, threshold=THRESHOLDS.get(cfg.env.name))
