"""Multi-agent PPO with a centralised critic (MAPPO, Yu et al. 2022), as TorchRL's multi-agent PPO tutorial.

Every agent acts from its own observation with one shared policy network (``MultiAgentMLP``,
``share_params=True``, decentralised); the critic (``centralised=True``) reads all the agents'
observations and gives each agent a value. ``ClipPPOLoss`` needs no multi-agent class: with its keys
under the ``"agents"`` group it estimates one GAE advantage per agent (each agent's reward and done
flags, time along the root's last batch dim) and one log-prob ratio per agent. Each batch is then
trained as in ``ppo.py``: ``epochs`` passes of shuffled minibatches. ``ippo.py`` is this recipe with a
decentralised critic. Expected on ``navigation`` (VMAS, 3 agents, continuous actions, 100-step
episodes; a frame is one step of the team): team return (the mean of the agents') about 2.5 after
60,000 frames (threshold 1.5; a random policy gets about -0.6), about 2 minutes on 2 cores.

Run: ``python examples/train.py algo=mappo env=navigation [algo.epochs=10 collector.total_frames=120000 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import ClipPPOLoss, ValueEstimators
from rl_objectives.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal, ValueOperator
from rl_objectives.trainers import ReplayBufferTrainer, UpdateWeights
from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from tdict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from .common import finish, make_collector, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env

AGENTS = "agents"  # the VMAS group holding every agent's observation, action, reward and done flags


@dataclass
class MAPPOConfig:
    name: str = "mappo"
    lr: Optional[float] = None
    gamma: Optional[float] = None
    lmbda: Optional[float] = None  # GAE's lambda
    clip_epsilon: Optional[float] = None
    entropy_coeff: Optional[float] = None
    critic_coeff: float = 1.0
    epochs: Optional[int] = None  # passes over each batch
    minibatch: Optional[int] = None  # env steps per gradient step (each holds every agent)
    max_grad_norm: float = 1.0
    hidden: Optional[int] = None  # width of the two hidden layers of actor and critic
    centralised_critic: bool = True  # False: every agent's value from its own observation (IPPO)


Config = MAPPOConfig  # the recipe's entry in the ``algo`` config group

PRESETS = {
    "navigation": {
        "algo": {
            "lr": 3e-4,
            "gamma": 0.99,
            "lmbda": 0.9,
            "clip_epsilon": 0.2,
            "entropy_coeff": 1e-4,
            "epochs": 10,
            "minibatch": 400,
            "hidden": 128,
        },
        "env": {"num_envs": 60},
        "collector": {"frames_per_batch": 6_000, "total_frames": 60_000},  # 60 envs x 100 steps: whole episodes
        "logger": {"eval_every": 12_000},
    },
}
DEFAULTS = {
    "algo": {
        "lr": 3e-4,
        "gamma": 0.99,
        "lmbda": 0.9,
        "clip_epsilon": 0.2,
        "entropy_coeff": 1e-4,
        "epochs": 10,
        "minibatch": 400,
        "hidden": 128,
    },
    "collector": {"init_random_frames": 0},
}
THRESHOLDS = {"navigation": 1.5}


def make_actor(env, hidden: int) -> ProbabilisticActor:
    """One tanh-Gaussian policy shared by the agents, each reading its own observation."""
    obs_dim = env.observation_spec_unbatched[AGENTS, "observation"].shape[-1]
    action_spec = env.full_action_spec_unbatched[AGENTS, "action"]
    net = nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=obs_dim,
            n_agent_outputs=2 * action_spec.shape[-1],
            n_agents=env.n_agents,
            centralised=False,
            share_params=True,
            depth=2,
            num_cells=hidden,
            activation_class=nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=[(AGENTS, "observation")], out_keys=[(AGENTS, "loc"), (AGENTS, "scale")]),
        in_keys=[(AGENTS, "loc"), (AGENTS, "scale")],
        out_keys=[(AGENTS, "action")],
        spec=env.full_action_spec_unbatched,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
        return_log_prob=True,  # writes (AGENTS, "action_log_prob"): one per agent
    )


def make_critic(env, hidden: int, centralised: bool) -> ValueOperator:
    """One value per agent: from every agent's observation (centralised, MAPPO) or its own (IPPO)."""
    obs_dim = env.observation_spec_unbatched[AGENTS, "observation"].shape[-1]
    net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=1,
        n_agents=env.n_agents,
        centralised=centralised,
        share_params=True,
        depth=2,
        num_cells=hidden,
        activation_class=nn.Tanh,
    )
    return ValueOperator(net, in_keys=[(AGENTS, "observation")], out_keys=[(AGENTS, "state_value")])  # [.., n_agents]


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, cfg.algo.name, PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)

    actor, critic = make_actor(proto, algo.hidden), make_critic(proto, algo.hidden, algo.centralised_critic)
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=algo.clip_epsilon,
        entropy_coeff=algo.entropy_coeff,
        entropy_bonus=algo.entropy_coeff > 0,
        critic_coeff=algo.critic_coeff,
        loss_critic_type="smooth_l1",
        normalize_advantage=False,
    )
    # per-agent rewards, done flags, values and advantages ([N, T, n_agents]); the action and its
    # log-prob keys come from the actor
    loss.set_keys(
        reward=(AGENTS, "reward"),
        done=(AGENTS, "done"),
        terminated=(AGENTS, "terminated"),
        value=(AGENTS, "state_value"),
        advantage=(AGENTS, "advantage"),
        value_target=(AGENTS, "value_target"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=algo.gamma, lmbda=algo.lmbda)
    optimizer = torch.optim.Adam(loss.parameters(), lr=algo.lr)
    batch = cfg.collector.frames_per_batch
    collector = make_collector(run, lambda: make_env(cfg.env), actor)
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=optimizer,
        policy=actor,
        clip_norm=algo.max_grad_norm,
        optim_steps_per_batch=algo.epochs * (batch // algo.minibatch),
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
    ReplayBufferTrainer(buffer).register(trainer)  # minibatches without replacement: one epoch per pass
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    resume_if_asked(run, trainer)

    critic_kind = "centralised" if algo.centralised_critic else "decentralised"
    print(
        f"{algo.name.upper()} ({critic_kind} critic) on {cfg.env.num_envs} x {cfg.env.name} ({proto.n_agents} agents), "
        f"{cfg.collector.total_frames} frames, seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
