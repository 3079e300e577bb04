"""What every recipe shares: the run folder, the loggers, evaluation, checkpoints and the last lines.

A recipe builds its networks, loss, collector and buffer; :func:`make_trainer` wires them to the
shared :class:`~rl_objectives.trainers.Trainer` with the standard hooks (evaluation over whole
episodes every ``logger.eval_every`` frames, a progress bar, checkpoints, resume), and
:func:`finish` runs the final evaluation, draws the learning curve and prints
``final eval return X`` as the last line. Everything a run writes goes to ``runs_dir/name/``:
``config.json`` (the resolved config), ``scalars/*.csv``, ``tensorboard/``, ``checkpoint.pt``
(with the replay buffer beside it) and ``learning_curve.png``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from rl_objectives.trainers import (
    CSVLogger,
    LogValidationReward,
    ProgressBar,
    ReplayBufferTrainer,
    SelectKeys,
    Trainer,
    UpdateWeights,
    evaluate_episodes,
    get_logger,
    write_learning_curve,
)
from rl_collect import Collector, MultiAsyncCollector, MultiSyncCollector
from rl_replay import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer, TensorDictPrioritizedReplayBuffer

from .config import TrainConfig, resolve
from .envs import check_task, make_env, time_limit
from .nstep import NStepTransitions

EVAL_KEY = "total_r_evaluation"  # LogValidationReward's mean return of whole episodes
# what the off-policy losses read from a stored transition; the buffer keeps only these (an env step
# also records the env's state and parameters, the policy's distribution and the collector's ids)
TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
)


class Loggers:
    """Sends every call to each of the run's loggers (CSV first: the learning curve reads it)."""

    def __init__(self, loggers: list) -> None:
        self.loggers = loggers
        self.csv = next(lg for lg in loggers if isinstance(lg, CSVLogger))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        for logger in self.loggers:
            logger.log_scalar(name, value, step=step)

    def log_hparams(self, cfg: dict) -> None:
        for logger in self.loggers:
            logger.log_hparams(cfg)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


@dataclasses.dataclass
class Run:
    """A started run: its resolved config, folder, loggers and start time."""

    cfg: TrainConfig
    dir: Path
    logger: Loggers
    start: float
    algo: str

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint.pt"


def _flat(cfg: TrainConfig) -> dict:
    """The config as one flat dict of numbers and strings (``algo.lr``: ...), for hyper-parameter logs."""
    out = {}
    for key, value in dataclasses.asdict(cfg).items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in out.items()}


def start_run(cfg: TrainConfig, algo: str, presets: dict, defaults: dict) -> Run:
    """Resolves ``cfg`` with the recipe's presets, seeds, creates the run folder and its loggers,
    and writes the resolved config to ``config.json``."""
    check_task(cfg.env.name)
    cfg = resolve(cfg, presets, defaults)
    if not cfg.name:
        cfg = dataclasses.replace(cfg, name=f"{algo}_{cfg.env.name}_seed{cfg.seed}_{datetime.now():%Y%m%d_%H%M%S}")
    run_dir = Path(cfg.runs_dir) / cfg.name
    if run_dir.exists() and not cfg.resume and (run_dir / "checkpoint.pt").exists():
        raise FileExistsError(
            f"{run_dir} holds a finished or interrupted run: pass resume=true to continue it, or another name."
        )
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    # the networks build valid distribution parameters by construction; torch's argument checks cost
    # about a tenth of a small network's gradient step (PPO on CartPole)
    torch.distributions.Distribution.set_default_validate_args(False)
    # subnormal floats (below 1.2e-38) make CPU arithmetic an order of magnitude slower, and training
    # makes them: Adam's moments of a dead ReLU unit's weights decay towards 0 by 0.9 and 0.999 per
    # step. Flushed to zero, one fused Adam step on DQN's cartpole network took 0.08 ms instead of 0.68
    # (12,000 frames: 3.8 -> 0.4 s of optimizer time; SAC's pendulum, 3,900 steps: 4.5 -> 0.9 s)
    torch.set_flush_denormal(True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"recipe": algo, **dataclasses.asdict(cfg)}, indent=2) + "\n")
    backends = list(dict.fromkeys(["csv", *cfg.logger.backends]))
    loggers = []
    for backend in backends:
        if backend == "csv":
            loggers.append(CSVLogger(cfg.name, log_dir=cfg.runs_dir))
        elif backend == "tensorboard":
            loggers.append(get_logger("tensorboard", run_dir, "tensorboard"))
        elif backend == "wandb":
            loggers.append(get_logger("wandb", run_dir, cfg.name, project=cfg.logger.wandb_project))
        else:
            loggers.append(get_logger(backend, run_dir, cfg.name))
    logger = Loggers(loggers)
    logger.log_hparams(_flat(cfg))
    return Run(cfg=cfg, dir=run_dir, logger=logger, start=time.perf_counter(), algo=algo)


def make_buffer(run: Run, size: int, batch_size: int) -> Any:
    """The replay buffer the ``buffer`` group describes: uniform or prioritized (``buffer=prioritized``:
    the losses weight by its importance weights and the trainer sends their TD errors back as
    priorities), in memory or memory-mapped under the run folder (``buffer=memmap``)."""
    cfg = run.cfg.buffer
    storage = LazyMemmapStorage(size, scratch_dir=run.dir / "buffer") if cfg.memmap else LazyTensorStorage(size)
    if cfg.prioritized:
        return TensorDictPrioritizedReplayBuffer(alpha=cfg.alpha, beta=cfg.beta, storage=storage, batch_size=batch_size)
    return ReplayBuffer(storage=storage, batch_size=batch_size)


def make_eval_env(run: Run, **kwargs: Any) -> Any:
    """``env.eval_envs`` copies of the task for evaluation, seeded apart from the training envs."""
    env = make_env(run.cfg.env, run.cfg.env.eval_envs, **kwargs)
    env.set_seed(run.cfg.seed + 1)
    return env


def make_collector(run: Run, create_env: Any, policy: Any, *, warmup: bool = False) -> Any:
    """The collector ``collector.kind`` names, over ``create_env`` and ``policy``.

    ``sync``: a :class:`~rl_collect.Collector` in this process. ``multisync`` / ``multiasync``:
    ``collector.num_workers`` processes, each stepping its own ``create_env()`` with a copy of the
    policy (``UpdateWeights`` sends them new weights); a ``multisync`` batch gathers every worker's
    share (``frames_per_batch`` frames in all, stacked ``[workers, *env batch, T]``), a
    ``multiasync`` batch is one worker's ``frames_per_batch`` frames, collected while the trainer
    trains. ``warmup``: the first ``collector.init_random_frames`` frames (in all) take random actions.
    """
    cfg = run.cfg.collector
    random_frames = (cfg.init_random_frames or 0) if warmup else 0
    sizes = {"frames_per_batch": cfg.frames_per_batch, "total_frames": cfg.total_frames}
    if cfg.kind == "sync":
        return Collector(create_env, policy, init_random_frames=random_frames, **sizes)
    kinds = {"multisync": MultiSyncCollector, "multiasync": MultiAsyncCollector}
    if cfg.kind not in kinds:
        raise ValueError(f"collector.kind must be one of ['multiasync', 'multisync', 'sync'], got {cfg.kind!r}.")
    if not isinstance(cfg.num_workers, int) or cfg.num_workers < 1:
        raise ValueError(f"collector.num_workers must be a positive int, got {cfg.num_workers!r}.")
    per_worker = -(-random_frames // cfg.num_workers)  # each worker counts its own frames
    return kinds[cfg.kind]([create_env] * cfg.num_workers, policy, init_random_frames=per_worker, **sizes)


def make_trainer(
    run: Run,
    *,
    collector: Any,
    loss: Any,
    optimizer: Any,
    optim_steps_per_batch: int,
    policy: Any,
    eval_env: Any = None,
    clip_norm: float | None = None,
    **eval_kwargs: Any,
) -> Trainer:
    """The shared trainer for ``run``: its loss and optimizer, the logger, the seed, checkpoints every
    ``logger.save_every`` frames (and at the end), evaluation of ``policy`` (deterministic) over whole
    episodes every ``logger.eval_every`` frames, a progress bar. Hooks the recipe registers after
    this in their order; call :func:`resume_if_asked` after registering every hook that has state."""
    cfg = run.cfg
    batch = cfg.collector.frames_per_batch
    # evaluations are this many batches apart; at least one in the run (its curve needs a point)
    record_interval = max(1, min(cfg.logger.eval_every, cfg.collector.total_frames) // batch)
    trainer = Trainer(
        collector=collector,
        total_frames=cfg.collector.total_frames,
        optim_steps_per_batch=optim_steps_per_batch,
        init_random_frames=cfg.collector.init_random_frames,
        loss_module=loss,
        optimizer=optimizer,
        logger=run.logger,
        seed=cfg.seed,
        clip_norm=clip_norm,
        measure_grad_norm=clip_norm is not None,  # a recipe that does not clip logs no gradient norm (as SB3)
        # the trainer throttles every logged name: never below the evaluations' spacing, or some would be dropped
        log_interval=min(cfg.logger.log_every, record_interval * batch),
        save_trainer_interval=cfg.logger.save_every or cfg.collector.total_frames,
        save_trainer_file=run.checkpoint,
    )
    LogValidationReward(
        record_interval=record_interval,
        record_frames=time_limit(cfg.env),
        policy_exploration=policy,
        environment=eval_env if eval_env is not None else make_eval_env(run),
        record_first=False,  # at eval_every, 2 * eval_every, ... frames, as SB3's EvalCallback (not after the first batch)
        **eval_kwargs,
    ).register(trainer)
    if cfg.logger.progress:
        ProgressBar(desc=f"{run.algo} {cfg.env.name} ").register(trainer)
    trainer.register_module("policy", policy)  # the checkpoint's "policy" entry
    return trainer


def make_off_policy_trainer(run: Run, loss: Any, policy: Any, actor: Any, *, lr: float, utd: float) -> Trainer:
    """The loop of the off-policy recipes (SAC, TD3, DDPG, REDQ): ``policy`` collects batches of the
    task (random actions during the warm-up), each batch goes into the replay buffer, then
    ``utd * frames_per_batch`` Adam steps on the loss over uniform samples; the collector gets the
    new weights after every batch. ``actor`` is what evaluations run and the checkpoint keeps. The
    recipe adds its target-network update."""
    cfg = run.cfg
    collector = make_collector(run, lambda: make_env(cfg.env), policy, warmup=True)
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=lr, fused=True),
        optim_steps_per_batch=max(1, round(utd * cfg.collector.frames_per_batch)),
        policy=actor,
    )
    add_transition_buffer(run, trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    return trainer


def add_transition_buffer(run: Run, trainer: Trainer) -> None:
    """The replay buffer of the off-policy recipes (``buffer`` group, no larger than the run's
    frames), registered with ``trainer``: each batch is cut to ``TRANSITION_KEYS`` and written in
    (as ``buffer.n_steps``-step transitions, :class:`NStepTransitions`, when above 1), and every
    gradient step samples ``buffer.batch_size`` transitions from it."""
    cfg = run.cfg
    buffer = make_buffer(run, min(cfg.buffer.size, cfg.collector.total_frames), cfg.buffer.batch_size)
    SelectKeys(list(TRANSITION_KEYS)).register(trainer)  # before the buffer: it stores only these
    n_steps = 1 if cfg.buffer.n_steps is None else cfg.buffer.n_steps
    if n_steps != 1:  # discounted like the loss's value estimator (the recipes make it first)
        NStepTransitions(n_steps, float(trainer.loss_module.value_estimator.gamma)).register(trainer)
    ReplayBufferTrainer(buffer).register(trainer)


def resume_if_asked(run: Run, trainer: Trainer) -> None:
    """Loads the run's checkpoint when ``resume=true`` and one exists (weights, optimizer, buffer,
    collector and env state, generators, counters): the run continues where it stopped."""
    if run.cfg.resume and run.checkpoint.exists():
        trainer.load_from_file(run.checkpoint)
        print(f"resumed from {run.checkpoint} at frame {trainer.collected_frames}", flush=True)


def finish(
    run: Run, trainer: Trainer, policy: Any, *, threshold: float | None = None, wrap_env: Any = None, **env_kwargs: Any
) -> float:
    """Final evaluation (one whole episode in each of ``env.eval_envs`` sub-envs, seeded apart from
    training and the periodic evaluations), the learning curve, and the run's last lines.

    ``env_kwargs`` go to :func:`make_env` (e.g. ``discrete=True``); ``wrap_env(env)`` returns the
    evaluation env to use instead (e.g. with a transform appended, as DT's target return)."""
    cfg = run.cfg
    env = make_env(cfg.env, cfg.env.eval_envs, **env_kwargs)
    if wrap_env is not None:
        env = wrap_env(env)
    env.set_seed(cfg.seed + 10_000)
    final = float(evaluate_episodes(env, policy, max_steps=time_limit(cfg.env)).mean())
    run.logger.log_scalar("final_r_evaluation", final, step=trainer.collected_frames)
    run.logger.close()
    curve = write_learning_curve(
        run.dir / "learning_curve.png",
        {
            f"evaluation ({cfg.env.eval_envs} episodes)": run.logger.csv.scalar_path(EVAL_KEY),
            "final evaluation": [(trainer.collected_frames, final)],
        },
        ylabel="episode return",
        title=f"{run.algo} on {cfg.env.name} (seed {cfg.seed})",
        hline=None if threshold is None else (threshold, f"threshold ({threshold:g})"),
    )
    print(f"run folder {run.dir}/: config.json, scalars/*.csv, {run.checkpoint.name}, {curve.name}")
    print(f"trained {trainer.collected_frames} frames in {time.perf_counter() - run.start:.0f} s")
    print(f"final eval return {final:.1f}", flush=True)
    return final
