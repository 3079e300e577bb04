"""Behaviour cloning: supervised imitation of a dataset's actions, offline (the env is used only to evaluate).

The dataset is the one ``recipes/datasets.py`` builds (or reuses): the steps of a trained SAC
policy. BC's actor (SAC's tanh-Gaussian network) maximises the log-likelihood of the dataset's
actions (``BCLoss``: ``-log pi(a|s)``) on uniform samples of it; the evaluation acts with the
mode ``tanh(loc)``. Expected: ``pendulum`` the behaviour policy's return, -172 on the final
evaluation's starts where the behaviour policy scores -172 (threshold -300, about 88% of the way
from a random policy's -1,200 to the behaviour policy), in 3,000 gradient steps: about 20 s on 2
cores once the dataset is there (about a minute to build it first).

Run: ``python examples/train.py algo=bc env=pendulum [algo.dataset_dir=runs/datasets/pendulum algo.lr=3e-4 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from rl_objectives import BCLoss

from .common import finish, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .datasets import DatasetSamples, load_dataset
from .envs import make_env
from .networks import tanh_gaussian_actor


@dataclass
class BCConfig:
    name: str = "bc"
    lr: Optional[float] = None
    hidden: Optional[int] = None  # width of the actor's two hidden layers
    dataset_dir: Optional[str] = (
        None  # a dataset folder shared between runs (built there if missing); None: <run folder>/dataset
    )
    dataset_frames: Optional[int] = None  # frames of the dataset, when it is built
    behaviour_frames: Optional[int] = None  # SAC frames of the behaviour policy, when the dataset is built


Config = BCConfig  # the recipe's entry in the ``algo`` config group

# offline: a "batch" is one dataset sample of frames_per_batch steps, one gradient step each
PRESETS = {
    "pendulum": {
        "algo": {"lr": 1e-3, "hidden": 64},
        "env": {"num_envs": 10},  # sub-envs of the dataset's rollout
        "collector": {"frames_per_batch": 256, "total_frames": 256 * 3_000},
        "logger": {"eval_every": 256 * 500, "log_every": 256 * 50},
    },
}
DEFAULTS = {
    "algo": {"lr": 3e-4, "hidden": 256, "dataset_frames": 20_000, "behaviour_frames": 8_000},
    "collector": {"init_random_frames": 0},
}
THRESHOLDS = {"pendulum": -300.0}


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "bc", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    dataset = load_dataset(run, algo, batch_size=cfg.collector.frames_per_batch)
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = tanh_gaussian_actor(obs_dim, action_spec, [algo.hidden, algo.hidden])
    loss = BCLoss(actor)  # a probabilistic actor: the negative log-likelihood of the dataset's actions
    trainer = make_trainer(
        run,
        collector=DatasetSamples(dataset),
        loss=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=algo.lr),
        optim_steps_per_batch=1,
        policy=actor,
    )
    resume_if_asked(run, trainer)

    steps = cfg.collector.total_frames // cfg.collector.frames_per_batch
    print(
        f"BC on {cfg.env.name}: {steps} gradient steps of {cfg.collector.frames_per_batch} dataset steps, seed {cfg.seed}; "
        f"run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(run, trainer, actor, threshold=THRESHOLDS.get(cfg.env.name))
