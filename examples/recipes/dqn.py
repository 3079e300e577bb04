"""Deep Q-network (Mnih et al. 2015, as Stable-Baselines3 runs it): off-policy, epsilon-greedy, a
target network copied every few frames.

Collect ``frames_per_batch`` frames (SB3's ``train_freq``) with an epsilon-greedy policy (uniformly
random actions during the ``init_random_frames`` warm-up, SB3's ``learning_starts``), write them
into the replay buffer, then take ``gradient_steps`` Adam steps on uniform samples: Huber loss on
``r + gamma * Q_target(s', a')``, gradient norm clipped at ``max_grad_norm``. Epsilon decays
linearly from ``eps_init`` to ``eps_end`` over the first ``exploration_fraction`` of the frames
(:class:`AnnealExploration`); the target network is copied whenever the collected frames cross a
multiple of ``target_update_interval`` (:class:`TargetNetUpdaterHook` counting frames, as SB3).

``cartpole`` takes RL-zoo's hyper-parameters and 50,000 frames, with five additions: double DQN
(``a' = argmax_a Q(s', a)``, not the target's own max), a learning rate decaying linearly to 0, 8
envs stepped together (each batch of 256 frames is 32 steps of 8 envs), 3-step transitions
(``buffer.n_steps=3``, recipes/nstep.py: three rewards summed, bootstrapped with ``gamma**3``) and
128-wide hidden layers instead of 256. With RL-zoo's settings alone the greedy policy does reach 500
during training, but it forgets: measured final returns 35 and 90 (seeds 0, 1), with the target's
max over-estimating Q up to 190 (returns are at most 100 with gamma 0.99). The 8 envs make a frame
cheaper and reach the threshold sooner (10,496 to 28,416 frames over seeds 0 to 3, against about
28,000 with one env). The 3-step transitions carry the reward three steps back per update: with
them 475 is first seen at 7,680 to 20,480 frames (seeds 0 to 3, two runs; about 28,000 with
one-step transitions), and the narrower network makes each of the 0.5 gradient steps per frame
about a quarter as costly in its middle layer; one seed in four ends at 253 to 358 (its policy
swinging late in the run), the others at 500. Expected: the 500 maximum (threshold 475) at the end
of the 50,000 frames, after 30 to 40 s of training on one core (25,000 gradient steps).

Run: ``python examples/train.py algo=dqn env=cartpole [algo.lr=2.3e-3 buffer=prioritized ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import DQNLoss, HardUpdate
from rl_objectives.modules import MLP, EGreedyModule, QValueActor
from rl_objectives.trainers import AnnealExploration, TargetNetUpdaterHook, UpdateWeights
from tdict.nn import TensorDictSequential
from tdict.specs import OneHot
from torch import nn

from .common import add_transition_buffer, finish, make_collector, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env


@dataclass
class DQNConfig:
    name: str = "dqn"
    lr: Optional[float] = None
    gamma: Optional[float] = None
    gradient_steps: Optional[int] = None  # gradient steps per collected batch (frames_per_batch is SB3's train_freq)
    target_update_interval: Optional[int] = None  # frames between two copies into the target network
    exploration_fraction: Optional[float] = None  # share of total_frames over which epsilon decays
    eps_init: Optional[float] = None
    eps_end: Optional[float] = None
    max_grad_norm: Optional[float] = None
    loss_function: Optional[str] = None  # "smooth_l1" (SB3's Huber loss), "l2" (TorchRL's default) or "l1"
    double_dqn: Optional[bool] = None  # the next action chosen by the online network, valued by the target one
    anneal_lr: Optional[bool] = None  # the learning rate decays linearly to 0 over the run (SB3's "lin_" schedule)
    hidden: Optional[int] = None  # width of the two hidden layers of the Q-network


Config = DQNConfig  # the recipe's entry in the ``algo`` config group

# RL-zoo's DQN hyper-parameters (hyperparams/dqn.yml; SB3's defaults where it sets none), plus double DQN,
# the learning-rate decay, 8 envs, 3-step transitions and 128-wide layers on cartpole (see the module docstring)
PRESETS = {
    "cartpole": {
        "algo": {
            "lr": 2.3e-3,
            "gamma": 0.99,
            "gradient_steps": 128,
            "target_update_interval": 10,
            "exploration_fraction": 0.16,
            "eps_end": 0.04,
            "hidden": 128,
            "double_dqn": True,
            "anneal_lr": True,
        },
        "env": {"num_envs": 8},
        "collector": {"frames_per_batch": 256, "total_frames": 50_000, "init_random_frames": 1_000},
        "buffer": {"size": 100_000, "batch_size": 64, "n_steps": 3},
        "logger": {"eval_every": 10_240},
    },
}
DEFAULTS = {
    "algo": {
        "lr": 1e-4,
        "gamma": 0.99,
        "gradient_steps": 1,
        "target_update_interval": 10_000,
        "exploration_fraction": 0.1,
        "eps_init": 1.0,
        "eps_end": 0.05,
        "max_grad_norm": 10.0,
        "loss_function": "smooth_l1",
        "double_dqn": False,
        "anneal_lr": False,
        "hidden": 64,
    },
    "collector": {"frames_per_batch": 4, "init_random_frames": 100},
    "buffer": {"size": 1_000_000, "batch_size": 32},
}
THRESHOLDS = {"cartpole": 475.0}


def make_qnet(obs_dim: int, action_spec, hidden: int) -> QValueActor:
    """Action values from an MLP; the greedy action is one-hot with the spec's dtype (int64 on cartpole)."""
    if not isinstance(action_spec, OneHot):
        raise ValueError(
            f"dqn: this recipe handles one-hot (discrete) actions, the task has {type(action_spec).__name__}."
        )
    mlp = MLP(
        in_features=obs_dim, out_features=action_spec.shape[-1], num_cells=[hidden, hidden], activation_class=nn.ReLU
    )
    return QValueActor(mlp, in_keys=["observation"], spec=action_spec)


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "dqn", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    qnet = make_qnet(obs_dim, action_spec, algo.hidden)  # greedy: evaluation and checkpoint
    egreedy = EGreedyModule(
        action_spec,
        eps_init=algo.eps_init,
        eps_end=algo.eps_end,
        annealing_num_steps=max(1, round(algo.exploration_fraction * cfg.collector.total_frames)),
    )
    explore = TensorDictSequential(qnet, egreedy)  # collection
    loss = DQNLoss(qnet, loss_function=algo.loss_function, double_dqn=algo.double_dqn, delay_value=True)
    loss.make_value_estimator(gamma=algo.gamma)
    collector = make_collector(run, lambda: make_env(cfg.env), explore, warmup=True)
    optimizer = torch.optim.Adam(loss.parameters(), lr=algo.lr, fused=True)
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=optimizer,
        policy=qnet,
        optim_steps_per_batch=algo.gradient_steps,
        clip_norm=algo.max_grad_norm,
    )
    add_transition_buffer(run, trainer)
    AnnealExploration(egreedy).register(trainer)  # epsilon follows the collected frames, warm-up included
    TargetNetUpdaterHook(
        HardUpdate(loss, value_network_update_interval=algo.target_update_interval), unit="frames"
    ).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)

    def decay_lr():  # SB3's "lin_" schedule, set before each training phase from the frames collected
        for group in optimizer.param_groups:
            group["lr"] = algo.lr * max(0.0, 1.0 - trainer.collected_frames / cfg.collector.total_frames)

    if algo.anneal_lr:
        trainer.register_op("pre_optim_steps", decay_lr)
    resume_if_asked(run, trainer)

    print(
        f"DQN on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, qnet, threshold=THRESHOLDS.get(cfg.env.name))
