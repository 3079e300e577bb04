"""Proximal policy optimisation (Schulman et al. 2017), clipped surrogate: on-policy, actor and critic.

Each collected batch (``num_envs`` sub-envs x ``frames_per_batch / num_envs`` steps, time last)
gets its advantages by GAE over the whole batch, then ``epochs`` passes of shuffled minibatches
train the clipped surrogate, the value loss and the entropy bonus; the learning rate and the clip
range decay linearly to zero over the run (RL-zoo's ``lin_`` schedules). Expected: ``cartpole``
reaches the 500 maximum (threshold 475) in 100,000 frames (threshold crossed at 11,000 to 32,000
frames, 1.3 to 4.5 s on one core, seeds 0-3; 16 envs x 64 steps, 5 epochs: fewer gradient steps per
frame than RL-zoo's 8 x 32 steps and 20 epochs, which are in benchmarks/learning/settings.py);
``pendulum`` -200 or better in 300,000 frames; ``halfcheetah`` (HalfCheetah-v5, RL-zoo's setting in
full, observations and rewards normalised) above 3,000 in 1,000,000 frames (seed 0: 2,282 at the first
evaluation, 51,200 frames; 3,076 at 102,400; final 5,493; 34 minutes on one thread).

Run: ``python examples/train.py algo=ppo env=cartpole [algo.epochs=10 collector.frames_per_batch=2048 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import ClipPPOLoss, ValueEstimators
from rl_objectives.modules import MLP, OneHotCategorical, ProbabilisticActor, TanhNormal, ValueOperator
from rl_objectives.trainers import ReplayBufferTrainer, SelectKeys, UpdateWeights
from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from tdict.nn import AddStateIndependentNormalScale, TensorDictModule
from tdict.specs import OneHot
from torch import nn

from .common import finish, make_collector, make_eval_env, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import Normalization, make_env
from .networks import FAST, orthogonal_init


@dataclass
class PPOConfig:
    name: str = "ppo"
    lr: Optional[float] = None  # initial learning rate (decays linearly to 0 with anneal=True)
    gamma: Optional[float] = None
    lmbda: Optional[float] = None  # GAE's lambda
    clip_epsilon: Optional[float] = None  # initial clip range (decays linearly to 0 with anneal=True)
    entropy_coeff: Optional[float] = None
    critic_coeff: Optional[float] = None
    epochs: Optional[int] = None  # passes over each batch
    minibatch: Optional[int] = None  # frames per gradient step
    max_grad_norm: Optional[float] = None
    hidden: Optional[int] = None
    anneal: Optional[bool] = None  # linear decay of lr and clip range
    normalize: Optional[bool] = (
        None  # RL-zoo's normalize: observations and rewards by running statistics (recipes/envs.py)
    )
    activation: Optional[str] = None  # of the hidden layers: tanh or relu
    log_std_init: Optional[float] = None  # initial log standard deviation of a continuous policy
    # SB3's ortho_init: orthogonal weights, gain sqrt(2) in the hidden layers, 0.01 at the policy's
    # output (a near-uniform first policy) and 1 at the value's; off: torch's default initialisation
    ortho_init: Optional[bool] = None


Config = PPOConfig  # the recipe's entry in the ``algo`` config group

# RL-zoo's PPO hyper-parameters per task, but on cartpole our fastest setting to the threshold
PRESETS = {
    "cartpole": {
        "algo": {
            "lr": 3e-3,
            "gamma": 0.99,
            "lmbda": 0.95,
            "clip_epsilon": 0.2,
            "entropy_coeff": 0.0,
            "epochs": 5,
            "minibatch": 256,
            "hidden": 64,
        },
        "env": {"num_envs": 16},
        "collector": {"frames_per_batch": 1_024, "total_frames": 100_000},
        "logger": {"eval_every": 10_240},
    },
    "pendulum": {
        "algo": {
            "lr": 1e-3,
            "gamma": 0.9,
            "lmbda": 0.95,
            "clip_epsilon": 0.2,
            "entropy_coeff": 0.0,
            "epochs": 10,
            "minibatch": 64,
            "hidden": 64,
        },
        "env": {"num_envs": 4},
        "collector": {"frames_per_batch": 4_096, "total_frames": 300_000},
        "logger": {"eval_every": 20_480},
    },
    "halfcheetah": {  # constant lr and clip range, ReLU, log std -2, observations and rewards normalised
        "algo": {
            "lr": 2.0633e-5,
            "gamma": 0.98,
            "lmbda": 0.92,
            "clip_epsilon": 0.1,
            "entropy_coeff": 4.01762e-4,
            "epochs": 20,
            "minibatch": 64,
            "hidden": 256,
            "max_grad_norm": 0.8,
            "critic_coeff": 0.58096,
            "anneal": False,
            "normalize": True,
            "activation": "relu",
            "log_std_init": -2.0,
            "ortho_init": False,
        },
        "env": {"num_envs": 1},
        "collector": {"frames_per_batch": 512, "total_frames": 1_000_000},
        "logger": {"eval_every": 51_200},
    },
}
DEFAULTS = {
    "algo": {
        "lr": 3e-4,
        "gamma": 0.99,
        "lmbda": 0.95,
        "clip_epsilon": 0.2,
        "entropy_coeff": 0.0,
        "epochs": 10,
        "minibatch": 64,
        "hidden": 64,
        "critic_coeff": 0.5,
        "max_grad_norm": 0.5,
        "anneal": True,
        "normalize": False,
        "activation": "tanh",
        "log_std_init": 0.0,
        "ortho_init": True,
    },
    "collector": {"init_random_frames": 0},
}
THRESHOLDS = {"cartpole": 475.0, "pendulum": -200.0, "halfcheetah": 3000.0}


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _activation(name: str) -> type:
    if name not in ACTIVATIONS:
        raise ValueError(f"algo.activation must be one of {sorted(ACTIVATIONS)}, got {name!r}.")
    return ACTIVATIONS[name]


def make_actor(
    obs_dim: int,
    action_spec,
    hidden: int,
    activation: str = "tanh",
    log_std_init: float = 0.0,
    ortho_init: bool = True,
) -> ProbabilisticActor:
    """A categorical policy over one-hot actions, or a tanh-Gaussian with a state-independent scale."""
    act = _activation(activation)
    init = (lambda mlp: orthogonal_init(mlp, 0.01)) if ortho_init else (lambda mlp: mlp)
    if isinstance(action_spec, OneHot):
        logits = MLP(
            in_features=obs_dim, out_features=action_spec.shape[-1], num_cells=[hidden, hidden], activation_class=act
        )
        return ProbabilisticActor(
            TensorDictModule(init(logits), in_keys=["observation"], out_keys=["logits"]),
            in_keys=["logits"],
            spec=action_spec,
            distribution_class=OneHotCategorical,
            distribution_kwargs=FAST,
            return_log_prob=True,
        )
    act_dim = action_spec.shape[-1]
    body = nn.Sequential(
        init(MLP(in_features=obs_dim, out_features=act_dim, num_cells=[hidden, hidden], activation_class=act)),
        AddStateIndependentNormalScale(act_dim, init_value=log_std_init),
    )
    return ProbabilisticActor(
        TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.low, "high": action_spec.high, **FAST},
        return_log_prob=True,
    )


def make_critic(obs_dim: int, hidden: int, activation: str = "tanh", ortho_init: bool = True) -> ValueOperator:
    mlp = MLP(in_features=obs_dim, out_features=1, num_cells=[hidden, hidden], activation_class=_activation(activation))
    return ValueOperator(orthogonal_init(mlp, 1.0) if ortho_init else mlp, in_keys=["observation"])


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "ppo", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = make_actor(obs_dim, action_spec, algo.hidden, algo.activation, algo.log_std_init, algo.ortho_init)
    critic = make_critic(obs_dim, algo.hidden, algo.activation, algo.ortho_init)
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=algo.clip_epsilon,
        entropy_coeff=algo.entropy_coeff,
        entropy_bonus=algo.entropy_coeff > 0,
        critic_coeff=algo.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        log_explained_variance=False,  # ten reductions per minibatch for a diagnostic SB3 computes per rollout
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=algo.gamma, lmbda=algo.lmbda)
    optimizer = torch.optim.Adam(loss.parameters(), lr=algo.lr, eps=1e-5, fused=True)
    batch = cfg.collector.frames_per_batch
    n_batches = -(-cfg.collector.total_frames // batch)
    norm = Normalization(cfg.env, algo.gamma) if algo.normalize else None
    collector = make_collector(
        run, (lambda: norm.training(make_env(cfg.env))) if norm else (lambda: make_env(cfg.env)), actor
    )
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=optimizer,
        policy=actor,
        clip_norm=algo.max_grad_norm,
        optim_steps_per_batch=algo.epochs * (batch // algo.minibatch),
        eval_env=norm.evaluation(make_eval_env(run)) if norm else None,
    )

    # each batch: advantages over the whole batch (time order intact), then epochs of minibatches
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(batch), sampler=SamplerWithoutReplacement(), batch_size=algo.minibatch
    )

    @torch.no_grad()
    def advantages(batch_td):
        loss.value_estimator(batch_td)
        buffer.empty()

    trainer.register_op("batch_process", advantages)
    keys = loss.tensor_keys  # what the loss reads: the minibatches carry nothing else
    reads = [*actor.in_keys, keys.action, keys.sample_log_prob, keys.advantage, keys.value_target]
    SelectKeys(list(dict.fromkeys(reads))).register(trainer)
    ReplayBufferTrainer(buffer).register(trainer)  # minibatches without replacement: one epoch per pass
    UpdateWeights(collector, update_weights_interval=1).register(trainer)

    # lr and clip range decay linearly to 0 (the scheduler is saved with the checkpoint)
    decay = (lambda i: max(0.0, 1.0 - i / n_batches)) if algo.anneal else (lambda i: 1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, decay)
    trainer.register_module("lr_scheduler", scheduler)

    def step_schedules():
        scheduler.step()
        loss.clip_epsilon = max(algo.clip_epsilon * decay(scheduler.last_epoch), 1e-3)

    trainer.register_op("post_steps", step_schedules)
    resume_if_asked(run, trainer)
    loss.clip_epsilon = max(algo.clip_epsilon * decay(scheduler.last_epoch), 1e-3)  # where a resumed run left it

    print(
        f"PPO on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(
        run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name), wrap_env=norm.evaluation if norm else None
    )
