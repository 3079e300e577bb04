"""Twin delayed DDPG (Fujimoto et al. 2018): off-policy, a deterministic actor, twin Q-networks.

Three changes to DDPG: the target is the minimum of two critics (clipped double Q), the target action
gets clipped Gaussian noise (target policy smoothing), and the actor and the target networks move
once every ``policy_delay`` critic updates (delayed policy updates). The behaviour policy adds
Gaussian noise to the actor's action. Collect a batch (random actions during the warm-up), write
it into the replay buffer, then take ``utd * frames_per_batch`` critic steps on uniform samples.
Noise scales are in units of half the action range, as SB3 adds them to actions rescaled to
[-1, 1]. Expected: ``pendulum`` -200 or better in 12,000 frames (8 envs, 1,000 random frames, one
update per frame, 64-wide networks: the threshold at 3,904 frames, in 10 s on one core, seeds 0,
1); with RL-zoo's settings (one 200-frame episode per batch, 20,000 frames of which 10,000 random,
[400, 300]: benchmarks/learning/settings.py) 5 to 7 minutes on 2 shared cores; ``halfcheetah``
(HalfCheetah-v5) is RL-zoo's setting on a budget cut from 1,000,000 to 100,000 frames with a
threshold of 2,000 (seed 0: 2,404 at 40,000 frames, final 5,665; 24 minutes on one thread).

Run: ``python examples/train.py algo=td3 env=pendulum [algo.policy_delay=2 algo.hidden=[256,256] ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch
from rl_objectives import SoftUpdate, TD3Loss
from rl_objectives.modules import AdditiveGaussianModule
from tdict import TensorDict
from tdict.nn import TensorDictSequential
from torch import nn

from .common import finish, make_off_policy_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env
from .networks import q_critic, tanh_actor


@dataclass
class TD3Config:
    name: str = "td3"
    lr: Optional[float] = None  # Adam's learning rate, actor and critics
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target networks, at each actor update
    utd: Optional[float] = None  # critic updates per collected frame
    policy_delay: Optional[int] = None  # critic updates per actor (and target) update
    exploration_noise: Optional[float] = None  # std of the behaviour policy's Gaussian noise (x half the action range)
    target_noise: Optional[float] = None  # std of the target policy smoothing noise (x half the action range)
    target_noise_clip: Optional[float] = None  # that noise is clipped to +-this (x half the action range)
    hidden: Optional[List[int]] = None  # hidden layer widths of actor and critics


Config = TD3Config  # the recipe's entry in the ``algo`` config group

# per task: the fastest setting we measured to the threshold on the pendulum (RL-zoo's, with one
# episode per batch and as many gradient steps, is in benchmarks/learning/settings.py); RL-zoo's
# hyper-parameters (hyperparams/td3.yml) on HalfCheetah
PRESETS = {
    "pendulum": {
        "algo": {"lr": 1e-3, "gamma": 0.98, "tau": 0.01, "utd": 1.0, "exploration_noise": 0.1, "hidden": [64, 64]},
        "env": {"num_envs": 8},
        "collector": {"frames_per_batch": 64, "total_frames": 12_000, "init_random_frames": 1_000},
        "buffer": {"size": 100_000, "batch_size": 256},
        "logger": {"eval_every": 2_000},
    },
    "halfcheetah": {  # the zoo trains 1,000,000 frames: a shorter budget, a lower bar
        "algo": {"lr": 1e-3, "gamma": 0.99, "exploration_noise": 0.1, "hidden": [400, 300]},
        "env": {"num_envs": 1},
        "collector": {"frames_per_batch": 1_000, "total_frames": 100_000, "init_random_frames": 10_000},
        "buffer": {"size": 1_000_000, "batch_size": 256},
        "logger": {"eval_every": 10_000},
    },
}
# SB3's TD3 defaults (and the paper's)
DEFAULTS = {
    "algo": {
        "lr": 1e-3,
        "gamma": 0.99,
        "tau": 0.005,
        "utd": 1.0,
        "policy_delay": 2,
        "exploration_noise": 0.1,
        "target_noise": 0.2,
        "target_noise_clip": 0.5,
        "hidden": [400, 300],
    },
    "buffer": {"size": 1_000_000, "batch_size": 256},
}
THRESHOLDS = {"pendulum": -200.0, "halfcheetah": 2000.0}


class DelayedPolicyLoss(nn.Module):
    """TD3's delayed policy updates around ``TD3Loss``: the critics' loss at every call, the actor's
    at every ``policy_delay``-th call only. In between the actor's parameters get no gradient, so
    Adam leaves them (and their moments) alone. The call count is a buffer: checkpoints carry it."""

    def __init__(self, loss: TD3Loss, policy_delay: int) -> None:
        super().__init__()
        self.td3, self.policy_delay = loss, policy_delay
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def actor_turn(self) -> bool:
        return int(self.calls) % self.policy_delay == 0

    def forward(self, batch: TensorDict) -> TensorDict:
        self.calls += 1
        loss_qvalue, info = self.td3.value_loss(batch)
        out = TensorDict(loss_qvalue=loss_qvalue, pred_value=info["pred_value"], target_value=info["target_value"])
        if self.actor_turn():
            out["loss_actor"], _ = self.td3.actor_loss(batch)
        return out


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "td3", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched
    half_range = float((action_spec.high - action_spec.low).mean()) / 2  # noise unit: 2 on the pendulum, 1 on MuJoCo

    actor = tanh_actor(obs_dim, action_spec, algo.hidden)
    sigma = algo.exploration_noise * half_range
    policy = TensorDictSequential(actor, AdditiveGaussianModule(action_spec, sigma_init=sigma, sigma_end=sigma))
    td3 = TD3Loss(
        actor,
        q_critic(obs_dim, action_spec.shape[-1], algo.hidden),
        action_spec=action_spec,
        num_qvalue_nets=2,
        policy_noise=algo.target_noise * half_range,
        noise_clip=algo.target_noise_clip * half_range,
        loss_function="l2",
    )
    td3.make_value_estimator(gamma=algo.gamma)
    loss = DelayedPolicyLoss(td3, algo.policy_delay)
    trainer = make_off_policy_trainer(run, loss, policy, actor, lr=algo.lr, utd=algo.utd)
    target_update = SoftUpdate(td3, tau=algo.tau)

    def update_targets() -> None:  # target actor and critics move with the actor
        if loss.actor_turn():
            target_update.step()

    trainer.register_op("post_optim", update_targets)
    resume_if_asked(run, trainer)

    print(
        f"TD3 on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
