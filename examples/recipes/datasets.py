"""Offline datasets for the offline recipes (``iql``, ``cql``, ``bc``, ``dt``): the steps of a trained
behaviour policy in memory-mapped files, built once, then reused.

:func:`load_dataset` gives the dataset of a run's task, from ``algo.dataset_dir`` when it is set
(several recipes and runs then share one dataset: it is built there only if it is not there yet),
else from ``<run folder>/dataset``. Building it takes three steps:

1. the behaviour policy: the SAC recipe (``recipes.sac.train``) trains for ``algo.behaviour_frames``
   frames in a sub-run ``<dataset folder>-behaviour/`` (its config, logs, learning curve and
   checkpoint); a sub-run that finished before (its checkpoint exists) is reused, not retrained;
2. the rollout: the SAC actor's *stochastic* policy (actions sampled from its tanh-Gaussian, as the
   agent acts while it collects data; D4RL calls such data "expert") runs in ``env.num_envs``
   sub-envs for ``algo.dataset_frames`` frames, rounded up to whole episodes;
3. the writing: rl_replay's ``OfflineDataset`` writes the steps into a temporary folder and renames
   it at the end, so a crash at any moment leaves no dataset or the whole one, never a part.

Each step holds ``observation``, ``action``, ``("next", "observation" | "reward" | "done" |
"terminated" | "truncated")``, ``"episode"`` (the episode's id, for ``SliceSampler``) and
``"return_to_go"`` (the undiscounted sum of the rewards from this step to the episode's end, for
return-conditioned policies). Episodes are stored one after the other.

Pendulum with the defaults (8,000 SAC frames, 20,000 dataset frames = 100 episodes of 200 steps):
about a minute on 2 cores, almost all of it SAC (measured: 58 s of SAC, seed 0). The behaviour
policy's deterministic return is -123 on the periodic-evaluation starts and -172 on the final-
evaluation starts (the offline recipes' ``final eval return`` uses the same starts, so -172 is the
figure to compare them with); the dataset's episodes (stochastic actions) return -154 on average,
-0.3 to -366 depending on the start (a random policy: about -1,200). Build it once into a shared
folder before launching several runs in parallel: two builds into one folder would both train.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rl_envs import Reward2GoTransform
from rl_objectives.trainers import evaluate_episodes, rng_state, set_rng_state
from rl_replay import OfflineDataset
from tdict.nn import InteractionType, set_interaction_type

from .config import CollectorConfig, EnvConfig, LoggerConfig, TrainConfig
from .envs import make_env, time_limit
from .networks import tanh_gaussian_actor

STEP_KEYS = [
    "observation",
    "action",
    "episode",
    "return_to_go",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
]


class BehaviourDataset(OfflineDataset):
    """The steps of a SAC policy on one task, as a read-only replay buffer over memory-mapped files.

    Built at ``path`` on first use (see the module docstring), mapped from there afterwards.
    ``metadata["source"]`` says how it was made and what it holds: the task, frames, episodes,
    the behaviour policy's deterministic return and the dataset's mean episode return.
    """

    default_kind = "behaviour"
    source_format = "sac rollout"

    def __init__(
        self,
        path: Path,
        *,
        env: EnvConfig,
        dataset_frames: int,
        behaviour_frames: int,
        seed: int,
        progress: bool = False,
        **buffer_kwargs: Any,
    ) -> None:
        path = Path(path)
        self.env_cfg, self.dataset_frames, self.behaviour_frames = env, dataset_frames, behaviour_frames
        self.seed, self.progress = seed, progress
        self.behaviour_dir = path.parent / f"{path.name}-behaviour"
        self._facts: dict = {}
        super().__init__(path.name, root=path.parent, **buffer_kwargs)
        built_for = self.metadata["source"].get("task")
        if built_for != env.name:
            raise ValueError(
                f"the dataset at {path} was built for env={built_for!r}, this run is on env={env.name!r}; "
                "give another algo.dataset_dir."
            )

    # ------------------------------------------------------------------ 1. the behaviour policy
    def behaviour_policy(self) -> Any:
        """The trained SAC actor: trained now in the sub-run folder, or loaded from its checkpoint."""
        from . import sac  # a recipe like any other: imported when a dataset is built

        checkpoint = self.behaviour_dir / "checkpoint.pt"
        if not checkpoint.exists():
            sac.train(
                TrainConfig(
                    algo=sac.SACConfig(),
                    env=EnvConfig(
                        name=self.env_cfg.name, max_steps=self.env_cfg.max_steps, eval_envs=self.env_cfg.eval_envs
                    ),
                    collector=CollectorConfig(total_frames=self.behaviour_frames),
                    logger=LoggerConfig(backends=["csv"], progress=self.progress),
                    seed=self.seed,
                    name=self.behaviour_dir.name,
                    runs_dir=str(self.behaviour_dir.parent),
                )
            )
        proto = make_env(self.env_cfg, 1)
        hidden = json.loads((self.behaviour_dir / "config.json").read_text())["algo"][
            "hidden"
        ]  # the width it trained with
        actor = tanh_gaussian_actor(
            proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched, [hidden, hidden]
        )
        actor.load_state_dict(torch.load(checkpoint, weights_only=True)["policy"])
        return actor

    # ------------------------------------------------------------------ 2. the rollout (OfflineDataset's hook)
    def _make_tensordict(self) -> Any:
        actor = self.behaviour_policy()
        n_envs, limit = self.env_cfg.num_envs, time_limit(self.env_cfg)
        steps = math.ceil(self.dataset_frames / (n_envs * limit)) * limit  # whole episodes in every sub-env
        env = make_env(self.env_cfg, n_envs)
        env.set_seed(self.seed + 20_000)
        torch.manual_seed(self.seed + 20_000)  # the policy's samples: the same dataset from the same policy and seed
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            rollout = env.rollout(max_steps=steps, policy=actor, break_when_any_done=False)  # [n_envs, steps]
        rollout = Reward2GoTransform(gamma=1.0, out_keys=["return_to_go"]).inv(rollout)
        data = rollout.reshape(-1)  # sub-env after sub-env: each episode's steps stay together
        data.set("episode", torch.cumsum(data["step_count"] == 0, 0) - 1)
        data = data.select(*STEP_KEYS)

        eval_env = make_env(self.env_cfg, self.env_cfg.eval_envs)  # the behaviour policy's own (deterministic) return
        eval_env.set_seed(self.seed + 1)
        episodes = int(data["episode"][-1]) + 1
        self._facts = {
            "frames": int(data.numel()),
            "episodes": episodes,
            "dataset_return": float(data["next", "reward"].sum()) / episodes,
            "behaviour_return": float(evaluate_episodes(eval_env, actor, max_steps=limit).mean()),
        }
        return data

    def _source_metadata(self) -> dict:
        return {
            "task": self.env_cfg.name,
            "behaviour": "sac",
            "behaviour_frames": self.behaviour_frames,
            "seed": self.seed,
            "behaviour_run": str(self.behaviour_dir),
            **self._facts,
        }


def dataset_path(run: Any, algo: Any) -> Path:
    """``algo.dataset_dir`` when set (shared between runs), else the run's own ``dataset/`` folder."""
    return Path(algo.dataset_dir) if algo.dataset_dir else run.dir / "dataset"


def load_dataset(run: Any, algo: Any, **buffer_kwargs: Any) -> BehaviourDataset:
    """The offline dataset of ``run``'s task, built first when it is not there (see the module docstring).

    ``buffer_kwargs`` go to the replay buffer (``batch_size``, ``sampler``, ``transform``, ...). Building
    leaves the global random generators as they were: a run gives the same numbers whether it built
    the dataset or reused it.
    """
    state = rng_state()
    try:
        dataset = BehaviourDataset(
            dataset_path(run, algo),
            env=run.cfg.env,
            dataset_frames=algo.dataset_frames,
            behaviour_frames=algo.behaviour_frames,
            seed=run.cfg.seed,
            progress=run.cfg.logger.progress,
            **buffer_kwargs,
        )
    finally:
        set_rng_state(state)
        torch.set_num_threads(run.cfg.threads)  # the SAC sub-run sets its own
    facts = dataset.metadata["source"]
    print(
        f"dataset {dataset.data_path}/ ({'built' if dataset.converted else 'reused'}): {facts['frames']} frames, "
        f"{facts['episodes']} episodes of {facts['task']}, mean episode return {facts['dataset_return']:.1f}; "
        f"behaviour policy (SAC, {facts['behaviour_frames']} frames) returns {facts['behaviour_return']:.1f}",
        flush=True,
    )
    return dataset


class DatasetSamples:
    """The Trainer's "collector" for offline training: one dataset sample per iteration, endlessly.

    Each sample counts ``sample.numel()`` frames, so ``collector.total_frames`` is gradient steps
    times sample size and the Trainer stops there. ``transform`` (optional) reshapes each sample after
    the sampler's entries are in it (a buffer's own transform runs before them). Sampling draws
    from the global torch generator, which the Trainer's checkpoints hold: a resumed run draws the
    same samples.
    """

    def __init__(self, dataset: Any, transform: Callable[[Any], Any] | None = None) -> None:
        self.dataset, self.transform = dataset, transform

    def __iter__(self) -> Any:
        while True:
            sample = self.dataset.sample()
            yield sample if self.transform is None else self.transform(sample)
