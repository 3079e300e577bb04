"""Conservative Q-learning (Kumar et al. 2020), CQL(H) on SAC: offline RL with a critic that
under-estimates the actions the data does not hold.

The dataset is the one ``recipes/datasets.py`` builds (or reuses): the steps of a trained SAC
policy. On uniform samples of it, one gradient step trains (``CQLLoss``) SAC's twin critics on
their TD targets plus the conservative penalty ``logsumexp_a Q(s, a) - Q(s, a_data)`` (the
log-sum-exp estimated from uniform and policy actions), SAC's actor and its temperature; then a
Polyak step moves the target critics. For the first ``bc_steps`` steps the actor is trained by
behaviour cloning instead (``loss_actor_bc``, as the paper's code and TorchRL's example do), while
the critics learn. Expected: ``pendulum`` the behaviour policy's return, -173 on the final
evaluation's starts where the behaviour policy scores -172 (threshold -300, about 88% of the way
from a random policy's -1,200 to the behaviour policy), in 3,000 gradient steps: about 4 minutes
on 2 cores once the dataset is there. The evaluations dip when the actor leaves cloning (to -1,000
at 1,000 steps) and recover by 2,500 steps: the critics are still learning the task's values.

Run: ``python examples/train.py algo=cql env=pendulum [algo.dataset_dir=runs/datasets/pendulum algo.bc_steps=1000 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from rl_objectives import CQLLoss, SoftUpdate
from rl_objectives.trainers import TargetNetUpdaterHook
from torch import nn

from .common import finish, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .datasets import DatasetSamples, load_dataset
from .envs import make_env
from .networks import q_critic, tanh_gaussian_actor


@dataclass
class CQLConfig:
    name: str = "cql"
    lr: Optional[float] = None  # of the critics
    actor_lr: Optional[float] = None  # of the actor and the temperature (the paper: smaller than the critics')
    gamma: Optional[float] = None
    tau: Optional[float] = None  # Polyak step of the target critics
    alpha_init: Optional[float] = None  # initial SAC temperature (learnt)
    min_q_weight: Optional[float] = None  # weight of the conservative penalty
    num_random: Optional[int] = None  # actions per proposal (uniform, policy at s, policy at s') in the log-sum-exp
    bc_steps: Optional[int] = None  # first gradient steps that train the actor by behaviour cloning
    hidden: Optional[int] = None  # width of the two hidden layers of actor and critics
    dataset_dir: Optional[str] = (
        None  # a dataset folder shared between runs (built there if missing); None: <run folder>/dataset
    )
    dataset_frames: Optional[int] = None  # frames of the dataset, when it is built
    behaviour_frames: Optional[int] = None  # SAC frames of the behaviour policy, when the dataset is built


Config = CQLConfig  # the recipe's entry in the ``algo`` config group

# offline: a "batch" is one dataset sample of frames_per_batch steps, one gradient step each. Pendulum: a
# shorter horizon and faster target updates than SAC's, so that the critics guide the actor within
# 3,000 steps (with gamma 0.99 and tau 0.005 the actor, once it leaves cloning, chases unripe critics)
PRESETS = {
    "pendulum": {
        "algo": {
            "lr": 1e-3,
            "actor_lr": 1e-3,
            "gamma": 0.95,
            "tau": 0.02,
            "alpha_init": 0.2,
            "min_q_weight": 1.0,
            "num_random": 10,
            "bc_steps": 500,
            "hidden": 64,
        },
        "env": {"num_envs": 10},  # sub-envs of the dataset's rollout
        "collector": {"frames_per_batch": 256, "total_frames": 256 * 3_000},
        "logger": {"eval_every": 256 * 500, "log_every": 256 * 50},
    },
}
# TorchRL's offline CQL example (MuJoCo), with a fixed penalty weight
DEFAULTS = {
    "algo": {
        "lr": 3e-4,
        "actor_lr": 1e-4,
        "gamma": 0.99,
        "tau": 0.005,
        "alpha_init": 1.0,
        "min_q_weight": 1.0,
        "num_random": 10,
        "bc_steps": 40_000,
        "hidden": 256,
        "dataset_frames": 20_000,
        "behaviour_frames": 8_000,
    },
    "collector": {"init_random_frames": 0},
}
THRESHOLDS = {"pendulum": -300.0}


class BCStart(nn.Module):
    """``CQLLoss`` whose ``"loss_actor"`` is the behaviour-cloning term for the first ``bc_steps`` calls.

    The count is a buffer: checkpoints hold it, and a resumed run switches at the same step.
    """

    def __init__(self, loss: CQLLoss, bc_steps: int) -> None:
        super().__init__()
        self.loss, self.bc_steps = loss, bc_steps
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, batch: Any) -> Any:
        out = self.loss(batch)
        actor_term = out["loss_actor_bc"] if int(self.calls) < self.bc_steps else out["loss_actor"]
        self.calls += 1
        return out.exclude("loss_actor_bc").set("loss_actor", actor_term)


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "cql", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    dataset = load_dataset(run, algo, batch_size=cfg.collector.frames_per_batch)
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = tanh_gaussian_actor(obs_dim, action_spec, [algo.hidden, algo.hidden])
    loss = CQLLoss(
        actor,
        q_critic(obs_dim, action_spec.shape[-1], [algo.hidden, algo.hidden]),
        action_spec=action_spec,
        alpha_init=algo.alpha_init,
        min_q_weight=algo.min_q_weight,
        num_random=algo.num_random,
        deterministic_backup=False,
    )
    loss.make_value_estimator(gamma=algo.gamma)
    critics = list(loss.qvalue_network_params.parameters())
    others = [p for p in loss.parameters() if all(p is not c for c in critics)]  # the actor and the temperature
    optimizer = torch.optim.Adam([{"params": critics, "lr": algo.lr}, {"params": others, "lr": algo.actor_lr}])
    trainer = make_trainer(
        run,
        collector=DatasetSamples(dataset),
        loss=BCStart(loss, algo.bc_steps),
        optimizer=optimizer,
        optim_steps_per_batch=1,
        policy=actor,
    )
    TargetNetUpdaterHook(SoftUpdate(loss, tau=algo.tau)).register(trainer)
    resume_if_asked(run, trainer)

    steps = cfg.collector.total_frames // cfg.collector.frames_per_batch
    print(
        f"CQL on {cfg.env.name}: {steps} gradient steps of {cfg.collector.frames_per_batch} dataset steps "
        f"(the first {algo.bc_steps} clone the actor), seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
