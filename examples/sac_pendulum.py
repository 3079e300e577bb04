"""Soft actor-critic learns the pendulum swing-up through the shared Trainer: ``hatch run demo``.

The whole stack in one file, top to bottom:

- ``rl_envs``: ``PendulumEnv`` s vectorised over a batch dim, with a 200-step time limit (``StepCounter``);
- ``rl_collect``: a ``Collector`` running the policy (random actions during the warm-up);
- ``rl_replay``: a ``ReplayBuffer`` of transitions;
- ``rl_objectives``: a tanh-Gaussian ``ProbabilisticActor``, twin Q-networks, ``SACLoss`` with a learnt
  temperature and ``SoftUpdate`` target critics, trained by ``rl_objectives.trainers.Trainer`` with its
  hooks (replay buffer, target updates, weight sync, whole-episode evaluation, a progress bar),
  CSV and TensorBoard loggers and an atomic checkpoint.

Every ``eval_every`` frames the deterministic policy plays one whole episode in each of ``eval_envs``
fresh pendulums (a random policy scores about -1200; -200 or better means the pendulum is swung up
and held). Everything goes to one run folder ``runs/<name>/``: ``scalars/*.csv``, ``tensorboard/``,
``hparams.json`` (the resolved config), ``checkpoint.pt`` and ``learning_curve.png``. The last line
printed is ``final eval return X``.

Run: ``python examples/sac_pendulum.py [--seed 0] [--frames 12000] [--name NAME] [--quick]`` (every
field of ``Config`` is a flag). Recover the trained policy with ``load_policy("runs/<name>")``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import datetime
from pathlib import Path

import torch
from torch import nn

from rl_collect import Collector
from rl_envs import PendulumEnv, StepCounter, TransformedEnv
from rl_objectives import SACLoss, SoftUpdate
from rl_objectives.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from rl_objectives.trainers import (
    CSVLogger,
    LogValidationReward,
    ProgressBar,
    ReplayBufferTrainer,
    TargetNetUpdaterHook,
    TensorboardLogger,
    Trainer,
    UpdateWeights,
    evaluate_episodes,
    write_learning_curve,
)
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict.nn import NormalParamExtractor, TensorDictModule

EPISODE = 200  # the pendulum's time limit, in steps


@dataclasses.dataclass
class Config:
    name: str = ""  # run folder runs/<name>/; "" -> sac_pendulum_<timestamp>_seed<seed>
    runs_dir: str = "runs"
    seed: int = 0
    frames: int = 12_000  # env frames collected in total
    n_envs: int = 8  # pendulums stepped together
    frames_per_batch: int = 64  # frames per collected batch (8 steps of each env)
    init_random_frames: int = 1_000  # warm-up: random actions, no optimisation
    utd: float = 0.5  # update-to-data ratio: gradient steps per collected frame
    batch_size: int = 256
    hidden: int = 64  # width of the two hidden layers of actor and critics
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.01  # Polyak step of the target critics
    alpha_init: float = 0.2  # initial SAC temperature
    buffer_size: int = 100_000
    eval_every: int = 2_000  # frames between two evaluations
    eval_envs: int = 10  # whole episodes per evaluation
    save_every: int = 0  # frames between two checkpoints; 0: one checkpoint, at the end
    resume: bool = False  # continue the run in runs/<name>/ from its checkpoint
    threads: int = 1  # torch.set_num_threads: small nets run fastest on one core
    quick: bool = False  # a smoke test: 1,024 frames


def parse_config() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Config):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default)
    cfg = Config(**vars(parser.parse_args()))
    if cfg.quick:
        cfg = dataclasses.replace(cfg, frames=1_024, init_random_frames=256, eval_every=512, eval_envs=2)
    if cfg.resume and not cfg.name:
        parser.error("--resume continues a named run: give --name")
    if not cfg.name:
        cfg = dataclasses.replace(cfg, name=f"sac_pendulum_{datetime.now():%Y%m%d_%H%M%S}_seed{cfg.seed}")
    return cfg


def make_env(n_envs: int) -> TransformedEnv:
    return TransformedEnv(PendulumEnv(batch_size=[n_envs]), StepCounter(EPISODE))


def make_actor(cfg: Config, action_spec) -> ProbabilisticActor:
    act_dim = action_spec.shape[-1]
    body = nn.Sequential(
        MLP(in_features=3, out_features=2 * act_dim, num_cells=[cfg.hidden, cfg.hidden], activation_class=nn.ReLU),
        NormalParamExtractor(),
    )
    return ProbabilisticActor(
        TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.low[0], "high": action_spec.high[0]},
    )


def make_critic(cfg: Config, action_spec) -> ValueOperator:
    act_dim = action_spec.shape[-1]
    mlp = MLP(in_features=3 + act_dim, out_features=1, num_cells=[cfg.hidden, cfg.hidden], activation_class=nn.ReLU)
    return ValueOperator(mlp, in_keys=["observation", "action"])


class Loggers:
    """Sends every scalar to the CSV logger and the TensorBoard logger."""

    def __init__(self, *loggers):
        self.loggers = loggers

    def log_scalar(self, name, value, step=None):
        for logger in self.loggers:
            logger.log_scalar(name, value, step=step)

    def log_hparams(self, cfg):
        for logger in self.loggers:
            logger.log_hparams(cfg)

    def close(self):
        for logger in self.loggers:
            logger.close()


def final_evaluation(cfg: Config, actor: ProbabilisticActor) -> float:
    """Mean return of one whole episode in each of ``eval_envs`` pendulums seeded from the config."""
    env = make_env(cfg.eval_envs)
    env.set_seed(cfg.seed + 10_000)
    return float(evaluate_episodes(env, actor, max_steps=EPISODE).mean())


def load_policy(run_dir: str | Path) -> ProbabilisticActor:
    """The trained policy of a run folder: rebuilt from ``hparams.json``, weights from ``checkpoint.pt``."""
    run_dir = Path(run_dir)
    cfg = Config(**json.loads((run_dir / "hparams.json").read_text()))
    actor = make_actor(cfg, make_env(1).action_spec)
    actor.load_state_dict(torch.load(run_dir / "checkpoint.pt", weights_only=True)["policy"])
    return actor


def main() -> None:
    cfg = parse_config()
    run_dir = Path(cfg.runs_dir) / cfg.name
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()

    action_spec = make_env(1).action_spec
    actor = make_actor(cfg, action_spec)
    loss = SACLoss(actor, make_critic(cfg, action_spec), num_qvalue_nets=2, alpha_init=cfg.alpha_init, action_spec=action_spec)
    loss.make_value_estimator(gamma=cfg.gamma)
    collector = Collector(
        lambda: make_env(cfg.n_envs), actor,
        frames_per_batch=cfg.frames_per_batch, total_frames=cfg.frames, init_random_frames=cfg.init_random_frames,
    )
    csv = CSVLogger(cfg.name, log_dir=cfg.runs_dir)  # runs/<name>/scalars/<name>.csv
    logger = Loggers(csv, TensorboardLogger("tensorboard", log_dir=run_dir))
    logger.log_hparams(dataclasses.asdict(cfg))  # hparams.json: the resolved config

    trainer = Trainer(
        collector=collector,
        total_frames=cfg.frames,
        optim_steps_per_batch=max(1, round(cfg.utd * cfg.frames_per_batch)),
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=cfg.lr),
        logger=logger,
        seed=cfg.seed,
        log_interval=cfg.frames_per_batch * 8,
        save_trainer_interval=cfg.save_every or cfg.frames,
        save_trainer_file=run_dir / "checkpoint.pt",
    )
    buffer = ReplayBuffer(storage=LazyTensorStorage(min(cfg.buffer_size, cfg.frames)), batch_size=cfg.batch_size)
    ReplayBufferTrainer(buffer).register(trainer)  # its items are saved with every checkpoint
    TargetNetUpdaterHook(SoftUpdate(loss, tau=cfg.tau)).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    eval_env = make_env(cfg.eval_envs)
    eval_env.set_seed(cfg.seed + 1)
    LogValidationReward(
        record_interval=max(1, cfg.eval_every // cfg.frames_per_batch), record_frames=EPISODE,
        policy_exploration=actor, environment=eval_env,
    ).register(trainer)
    ProgressBar(desc="SAC pendulum ").register(trainer)
    trainer.register_module("policy", actor)  # the checkpoint's "policy" entry: load_policy() reads it
    if cfg.resume and (run_dir / "checkpoint.pt").exists():
        trainer.load_from_file(run_dir / "checkpoint.pt")  # weights, optimizer, buffer, collector, env, RNGs
        print(f"resumed from {run_dir / 'checkpoint.pt'} at frame {trainer.collected_frames}", flush=True)

    print(f"SAC on {cfg.n_envs} pendulums, {cfg.frames} frames, seed {cfg.seed}; run folder {run_dir}/", flush=True)
    trainer.train()

    final = final_evaluation(cfg, actor)
    logger.log_scalar("total_r_evaluation", final, step=trainer.collected_frames)
    logger.close()
    curve = write_learning_curve(
        run_dir / "learning_curve.png",
        {f"evaluation ({cfg.eval_envs} episodes)": csv.scalar_path("total_r_evaluation")},
        ylabel="episode return", title=f"SAC on the pendulum (seed {cfg.seed})", hline=(-200.0, "swung up and held (-200)"),
    )
    print(f"run folder {run_dir}/: scalars/*.csv, tensorboard/, hparams.json, {(run_dir / 'checkpoint.pt').name}, {curve.name}")
    print(f"trained {trainer.collected_frames} frames in {time.perf_counter() - start:.0f} s")
    print(f"final eval return {final:.1f}")


if __name__ == "__main__":
    main()
