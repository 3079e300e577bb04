"""QMIX (Rashid et al. 2018): value decomposition for a cooperative team with discrete actions.

Every agent has a Q-network over its own actions (one ``MultiAgentMLP`` shared by the agents, each
reading its own observation) and acts greedily on it, with epsilon-greedy exploration annealed over
the first ``explore_fraction`` of the run. The values of the actions taken are mixed into one team
value by a ``QMixer`` (hyper-networks conditioned on the global state, here every agent's
observation; monotone in each agent's value, so each agent's greedy action is the team's greedy
action), and the mixed value is regressed by ``QMixerLoss`` on the team reward plus the discounted
mixed target value of the next step (target networks moved by Polyak averaging). The team reward is
the mean of the agents' rewards (``envs.py`` writes it at ``("next", "reward")``, as TorchRL's QMIX
example does). ``algo.mixer=vdn`` sums the agents' values instead (VDN). Expected on ``navigation``
(VMAS, 3 agents, 9 discrete actions each, 100-step episodes; a frame is one step of the team): team
return about 2.4 after 90,000 frames (threshold 1.5; a random policy gets about -0.8), about 2 minutes on
2 cores.

Run: ``python examples/train.py algo=qmix env=navigation [algo.lr=5e-4 collector.total_frames=150000 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import QMixerLoss, SoftUpdate, ValueEstimators
from rl_objectives.modules import EGreedyModule, MultiAgentMLP, QMixer, QValueModule, VDNMixer
from rl_objectives.trainers import AnnealExploration, ReplayBufferTrainer, TargetNetUpdaterHook, UpdateWeights
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from .common import finish, make_collector, make_eval_env, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env

AGENTS = "agents"  # the VMAS group holding every agent's observation, action, reward and done flags


@dataclass
class QMIXConfig:
    name: str = "qmix"
    mixer: str = "qmix"  # qmix (state-conditioned monotone mixing) or vdn (sum of the agents' values)
    lr: Optional[float] = None
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target networks, once per gradient step
    eps_init: Optional[float] = None  # epsilon-greedy: from eps_init ...
    eps_end: Optional[float] = None  # ... to eps_end, linearly over explore_fraction of the frames
    explore_fraction: Optional[float] = None
    epochs: Optional[float] = None  # gradient steps per batch = epochs * frames_per_batch / buffer.batch_size
    max_grad_norm: float = 40.0
    hidden: Optional[int] = None  # width of the two hidden layers of the agents' Q-network
    mixing_embed_dim: int = 32


Config = QMIXConfig  # the recipe's entry in the ``algo`` config group

PRESETS = {
    "navigation": {
        "algo": {
            "lr": 5e-4,
            "gamma": 0.9,
            "tau": 0.005,
            "eps_init": 1.0,
            "eps_end": 0.05,
            "explore_fraction": 0.5,
            "epochs": 8,
            "hidden": 128,
        },
        "env": {"num_envs": 60},
        "collector": {"frames_per_batch": 6_000, "total_frames": 90_000},  # 60 envs x 100 steps: whole episodes
        "buffer": {"size": 60_000, "batch_size": 512},
        "logger": {"eval_every": 18_000},
    },
}
DEFAULTS = {
    "algo": {
        "lr": 5e-4,
        "gamma": 0.9,
        "tau": 0.005,
        "eps_init": 1.0,
        "eps_end": 0.05,
        "explore_fraction": 0.5,
        "epochs": 8,
        "hidden": 128,
    },
    "collector": {"init_random_frames": 0},
    "buffer": {"size": 60_000, "batch_size": 512},
}
THRESHOLDS = {"navigation": 1.5}


def make_qnet(env, hidden: int) -> TensorDictSequential:
    """Each agent's action values from its own observation (one network shared by the agents), then
    the greedy action and its value."""
    obs_dim = env.observation_spec_unbatched[AGENTS, "observation"].shape[-1]
    n_actions = env.full_action_spec_unbatched[AGENTS, "action"].space.n
    net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=n_actions,
        n_agents=env.n_agents,
        centralised=False,
        share_params=True,
        depth=2,
        num_cells=hidden,
        activation_class=nn.Tanh,
    )
    return TensorDictSequential(
        TensorDictModule(net, in_keys=[(AGENTS, "observation")], out_keys=[(AGENTS, "action_value")]),
        QValueModule(
            action_value_key=(AGENTS, "action_value"),
            spec=env.full_action_spec_unbatched,
            out_keys=[(AGENTS, "action"), (AGENTS, "action_value"), (AGENTS, "chosen_action_value")],
        ),
    )


def make_mixer(env, kind: str, embed_dim: int):
    """The agents' chosen values ``[*B, n_agents]`` -> the team value ``[*B]``."""
    if kind == "vdn":
        return VDNMixer(n_agents=env.n_agents)
    if kind != "qmix":
        raise ValueError(f"algo.mixer must be 'qmix' or 'vdn', got {kind!r}.")
    state = (AGENTS, "observation")  # VMAS has no global state: the mixer reads every agent's observation
    return QMixer(
        state_shape=env.observation_spec_unbatched[state].shape,
        mixing_embed_dim=embed_dim,
        n_agents=env.n_agents,
        in_keys=[(AGENTS, "chosen_action_value"), state],
    )


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "qmix", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1, discrete=True)

    qnet = make_qnet(proto, algo.hidden)
    explore = EGreedyModule(
        proto.full_action_spec_unbatched,
        eps_init=algo.eps_init,
        eps_end=algo.eps_end,
        annealing_num_steps=max(1, int(algo.explore_fraction * cfg.collector.total_frames)),
        action_key=(AGENTS, "action"),
    )
    policy = TensorDictSequential(qnet, explore)  # evaluation is deterministic: the exploration stands aside
    loss = QMixerLoss(qnet, make_mixer(proto, algo.mixer, algo.mixing_embed_dim), delay_value=True)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=algo.gamma)  # team reward and done flags at the root
    batch = cfg.collector.frames_per_batch
    collector = make_collector(run, lambda: make_env(cfg.env, discrete=True), policy, warmup=True)
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=algo.lr),
        policy=policy,
        eval_env=make_eval_env(run, discrete=True),
        clip_norm=algo.max_grad_norm,
        optim_steps_per_batch=max(1, round(algo.epochs * batch / cfg.buffer.batch_size)),
    )
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(min(cfg.buffer.size, cfg.collector.total_frames)), batch_size=cfg.buffer.batch_size
    )
    AnnealExploration(explore).register(trainer)
    ReplayBufferTrainer(buffer).register(trainer)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=algo.tau)).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    resume_if_asked(run, trainer)

    print(
        f"{algo.mixer.upper()} on {cfg.env.num_envs} x {cfg.env.name} ({proto.n_agents} agents, discrete actions), "
        f"{cfg.collector.total_frames} frames, seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, policy, threshold=THRESHOLDS.get(cfg.env.name), discrete=True)
