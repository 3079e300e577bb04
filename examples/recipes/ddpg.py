"""Deep deterministic policy gradient (Lillicrap et al. 2016): off-policy, a deterministic actor, one Q-network.

The critic regresses onto ``r + gamma * Q'(s', pi'(s'))`` (target actor and target critic, moved by
Polyak averaging after every gradient step); the actor climbs ``Q(s, pi(s))``. The behaviour policy
adds Gaussian noise to the actor's action (RL-zoo's choice; the paper's Ornstein-Uhlenbeck noise is
``rl_objectives.modules.OrnsteinUhlenbeckProcessModule``). Collect one episode (random actions
during the warm-up), write it into the replay buffer, then take ``utd * frames_per_batch`` gradient
steps on uniform samples. The noise scale is in units of half the action range, as SB3 adds it to
actions rescaled to [-1, 1]. Expected: ``pendulum`` -200 or better (seeds 0, 1: -173, -145) with
RL-zoo's settings, 20,000 frames of which 10,000 random, in about 4.5 minutes on 2 shared cores.

Run: ``python examples/train.py algo=ddpg env=pendulum [algo.lr=1e-3 algo.hidden=[256,256] ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from rl_objectives import DDPGLoss, SoftUpdate
from rl_objectives.modules import AdditiveGaussianModule
from rl_objectives.trainers import TargetNetUpdaterHook
from tdict.nn import TensorDictSequential

from .common import finish, make_off_policy_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env
from .networks import q_critic, tanh_actor


@dataclass
class DDPGConfig:
    name: str = "ddpg"
    lr: Optional[float] = None  # Adam's learning rate, actor and critic
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target actor and critic
    utd: Optional[float] = None  # gradient steps per collected frame
    exploration_noise: Optional[float] = None  # std of the behaviour policy's Gaussian noise (x half the action range)
    hidden: Optional[List[int]] = None  # hidden layer widths of actor and critic


Config = DDPGConfig  # the recipe's entry in the ``algo`` config group

# per task: RL-zoo's hyper-parameters (hyperparams/ddpg.yml); one episode per batch with as many
# gradient steps (the zoo's older train_freq=(1, "episode"), gradient_steps=-1)
PRESETS = {
    "pendulum": {
        "algo": {"lr": 1e-3, "gamma": 0.98, "exploration_noise": 0.1, "hidden": [400, 300]},
        "env": {"num_envs": 1},
        "collector": {"frames_per_batch": 200, "total_frames": 20_000, "init_random_frames": 10_000},
        "buffer": {"size": 200_000, "batch_size": 256},
        "logger": {"eval_every": 2_000},
    },
}
# SB3's DDPG defaults
DEFAULTS = {
    "algo": {"lr": 1e-3, "gamma": 0.99, "tau": 0.005, "utd": 1.0, "exploration_noise": 0.1, "hidden": [400, 300]},
    "buffer": {"size": 1_000_000, "batch_size": 256},
}
THRESHOLDS = {"pendulum": -200.0}


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "ddpg", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched
    half_range = float((action_spec.high - action_spec.low).mean()) / 2  # noise unit: 2 on the pendulum, 1 on MuJoCo

    actor = tanh_actor(obs_dim, action_spec, algo.hidden)
    sigma = algo.exploration_noise * half_range
    policy = TensorDictSequential(actor, AdditiveGaussianModule(action_spec, sigma_init=sigma, sigma_end=sigma))
    # a target actor as well as a target critic (the paper, SB3; TorchRL's default has no target actor)
    loss = DDPGLoss(
        actor,
        q_critic(obs_dim, action_spec.shape[-1], algo.hidden),
        loss_function="l2",
        delay_actor=True,
        delay_value=True,
    )
    loss.make_value_estimator(gamma=algo.gamma)
    trainer = make_off_policy_trainer(run, loss, policy, actor, lr=algo.lr, utd=algo.utd)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=algo.tau)).register(trainer)
    resume_if_asked(run, trainer)

    print(
        f"DDPG on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
