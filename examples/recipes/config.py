"""The configuration of a training run: plain dataclasses, one per Hydra config group.

``TrainConfig`` nests one config per group: ``algo`` (a recipe's own dataclass, e.g.
``recipes.sac.SACConfig``), ``env``, ``collector``, ``buffer`` and ``logger``. A field left at
``None`` takes the recipe's tuned value for the env (its ``PRESETS``, as RL-zoo's hyper-parameter
files), then the recipe's default; a value given on the command line always wins. The dataclasses
need nothing but the standard library: the demo builds them without Hydra, ``examples/train.py``
registers them with Hydra's ConfigStore.

Example:
    >>> from recipes.config import EnvConfig, TrainConfig
    >>> cfg = TrainConfig(algo=None, env=EnvConfig(name="pendulum"))
    >>> cfg.collector.frames_per_batch is None  # filled from the recipe's presets
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EnvConfig:
    """Which task, how many copies stepped together, and its time limit."""

    name: str = "pendulum"  # pendulum, pendulum_pixels, cartpole, halfcheetah, hopper, navigation, balance, ... (recipes/envs.py)
    num_envs: Optional[int] = None  # sub-envs stepped together (one batch dim)
    max_steps: Optional[int] = None  # time limit in steps (None: the task's own)
    eval_envs: int = 10  # episodes per evaluation: one whole episode in each of these sub-envs


@dataclass
class CollectorConfig:
    """How frames are collected: ``kind`` is ``sync`` (one process), ``multisync`` or ``multiasync``."""

    kind: str = "sync"
    num_workers: int = 2  # processes of the multi-process collectors
    frames_per_batch: Optional[int] = None
    total_frames: Optional[int] = None
    init_random_frames: Optional[int] = None  # warm-up with random actions, no training


@dataclass
class BufferConfig:
    """The replay buffer of off-policy and offline recipes (on-policy ones iterate their batch)."""

    size: Optional[int] = None
    batch_size: Optional[int] = None
    prioritized: bool = False
    alpha: float = 0.6  # prioritized replay exponents
    beta: float = 0.4
    memmap: bool = False  # items in memory-mapped files under the run folder (large buffers)
    n_steps: Optional[int] = None  # n-step transitions (recipes/nstep.py); None: the recipe's preset, else 1


@dataclass
class LoggerConfig:
    """Where the run's numbers go, and how often the policy is evaluated."""

    backends: list = field(default_factory=lambda: ["csv", "tensorboard"])  # csv, tensorboard, wandb, mlflow
    eval_every: Optional[int] = None  # frames between two evaluations
    log_every: int = 1_000  # frames between two logged values of the same training metric
    save_every: Optional[int] = None  # frames between two checkpoints (None: at the end only)
    progress: bool = True  # a tqdm progress bar
    wandb_project: str = "rl-recipes"


@dataclass
class TrainConfig:
    """A whole run: the groups, the seed, and where its folder goes (``runs_dir/name``)."""

    algo: Any = None
    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = 0
    name: str = ""  # "" -> <algo>_<env>_seed<seed>_<timestamp>
    runs_dir: str = "runs"
    threads: int = 1  # torch.set_num_threads: small networks run fastest on one core
    resume: bool = False  # continue runs_dir/name from its checkpoint


GROUPS = ("algo", "env", "collector", "buffer", "logger")


def resolve(cfg: TrainConfig, presets: dict, defaults: dict) -> TrainConfig:
    """``cfg`` with every ``None`` field of the groups filled: from ``presets[cfg.env.name]``, then
    from ``defaults`` (both ``{group: {field: value}}``).

    Raises:
        ValueError: the recipe has no preset for the env and a field stays ``None`` (naming it).
    """
    preset = presets.get(cfg.env.name, {})
    out = {}
    for group in GROUPS:
        section = getattr(cfg, group)
        if section is None:
            continue
        filled = {}
        for f in dataclasses.fields(section):
            if getattr(section, f.name) is None:
                value = preset.get(group, {}).get(f.name, defaults.get(group, {}).get(f.name))
                if value is not None:
                    filled[f.name] = value
        out[group] = dataclasses.replace(section, **filled)
    resolved = dataclasses.replace(cfg, **out)
    missing = [
        f"{g}.{f.name}"
        for g in GROUPS
        if getattr(resolved, g) is not None
        for f in dataclasses.fields(getattr(resolved, g))
        if getattr(getattr(resolved, g), f.name) is None and f.name in _REQUIRED.get(g, ())
    ]
    if missing:
        raise ValueError(
            f"{type(cfg.algo).__name__}: no value for {missing} with env={cfg.env.name!r} (the recipe has presets for "
            f"{sorted(presets)}); give them on the command line, e.g. {missing[0]}=..."
        )
    return resolved


# the fields a run cannot start without (the others may stay None: "not used")
_REQUIRED = {
    "env": ("num_envs",),
    "collector": ("frames_per_batch", "total_frames", "init_random_frames"),
    "logger": ("eval_every",),
}
