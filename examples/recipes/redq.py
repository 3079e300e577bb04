"""Randomized ensembled double Q-learning (Chen et al. 2021): SAC with many critics and many updates per frame.

An ensemble of ``num_critics`` Q-networks is trained towards one target: the minimum over a random
subset of ``subset`` target critics, minus the entropy term; the tanh-Gaussian actor climbs the mean
of all the critics, and the temperature is learnt as in SAC. The ensemble keeps the estimate's bias
low enough for a high update-to-data ratio (``utd`` gradient steps per collected frame), hence few
frames. Collect a batch with the current policy (random actions during the warm-up), write it into
the replay buffer, then take ``utd * frames_per_batch`` gradient steps; the actor and the temperature
move at every step, as in TorchRL's REDQ (the paper moves them once per ``utd`` critic steps).

RL-zoo has no REDQ entry. The paper's settings (N=10 critics, a subset of M=2, UTD G=20, Adam 3e-4,
batch 256, tau 0.005, gamma 0.99, 2 x 256 units, 5,000 random frames, target entropy -|A|) are
scaled to the pendulum here: N, M, batch, tau, gamma and the target entropy kept; UTD 5, 2 x 64
units, lr 1e-3 (RL-zoo's SAC on Pendulum-v1), 500 random frames, 2,500 frames in all (10,000
gradient steps over ten critics: about the compute of TD3's 10,000 over two 400-300 ones).
Expected: ``pendulum`` -200 or better (seeds 0, 1: -172, -149) in 2,500 frames, a fifth of SAC's,
in 4 to 6 minutes on 2 shared cores.

Run: ``python examples/train.py algo=redq env=pendulum [algo.utd=20 algo.num_critics=10 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rl_objectives import REDQLoss, SoftUpdate
from rl_objectives.trainers import TargetNetUpdaterHook

from .common import finish, make_off_policy_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env
from .networks import q_critic, tanh_gaussian_actor


@dataclass
class REDQConfig:
    name: str = "redq"
    lr: Optional[float] = None
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target critics
    utd: Optional[float] = None  # gradient steps per collected frame (the paper's G)
    num_critics: Optional[int] = None  # ensemble size (the paper's N)
    subset: Optional[int] = None  # target critics drawn per update (the paper's M)
    alpha_init: Optional[float] = None  # initial temperature (learnt)
    hidden: Optional[int] = None  # width of the two hidden layers of actor and critics


Config = REDQConfig  # the recipe's entry in the ``algo`` config group

# the paper's settings scaled to the pendulum (see the module docstring)
PRESETS = {
    "pendulum": {
        "algo": {"lr": 1e-3, "utd": 5.0, "hidden": 64},
        "env": {"num_envs": 1},
        "collector": {"frames_per_batch": 50, "total_frames": 2_500, "init_random_frames": 500},
        "buffer": {"size": 100_000, "batch_size": 256},
        "logger": {"eval_every": 1_000},
    },
}
# the paper's settings
DEFAULTS = {
    "algo": {
        "lr": 3e-4,
        "gamma": 0.99,
        "tau": 0.005,
        "utd": 20.0,
        "num_critics": 10,
        "subset": 2,
        "alpha_init": 1.0,
        "hidden": 256,
    },
    "buffer": {"size": 1_000_000, "batch_size": 256},
}
THRESHOLDS = {"pendulum": -200.0}


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "redq", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = tanh_gaussian_actor(obs_dim, action_spec, [algo.hidden, algo.hidden])
    # the paper's MSE, and its unbounded temperature (REDQLoss clamps alpha to [0.1, 10] by default)
    loss = REDQLoss(
        actor,
        q_critic(obs_dim, action_spec.shape[-1], [algo.hidden, algo.hidden]),
        num_qvalue_nets=algo.num_critics,
        sub_sample_len=algo.subset,
        loss_function="l2",
        alpha_init=algo.alpha_init,
        min_alpha=None,
        max_alpha=None,
        action_spec=action_spec,
    )
    loss.make_value_estimator(gamma=algo.gamma)
    trainer = make_off_policy_trainer(run, loss, actor, actor, lr=algo.lr, utd=algo.utd)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=algo.tau)).register(trainer)
    resume_if_asked(run, trainer)

    print(
        f"REDQ ({algo.num_critics} critics, subsets of {algo.subset}, UTD {algo.utd:g}) on {cfg.env.num_envs} x "
        f"{cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
