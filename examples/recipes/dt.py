"""Decision Transformer (Chen et al. 2021): offline RL as sequence modelling, conditioned on the return to go.

The dataset is the one ``recipes/datasets.py`` builds (or reuses): whole episodes of a trained SAC
policy, each step with its return to go (the sum of the rewards still to come). ``SliceSampler``
draws windows of ``context`` consecutive steps of an episode; a window may begin before its
episode, its first steps are then zeros, as in the history at the start of an evaluation episode.
A small GPT-style transformer (``DTActor``) reads the tokens (return to go, observation, action) of
each step and predicts each step's action from the tokens before it; ``DTLoss`` regresses the
predictions onto the dataset's actions (the zero steps excluded). To act, the policy keeps each
sub-env's last ``context`` steps (``DecisionTransformerInferenceWrapper`` reads them) and is asked
for ``target_return``, which the env (``TargetReturn``) lowers by every reward received.
Expected: ``pendulum`` the behaviour policy's return, -174 on the final evaluation's starts where
the behaviour policy scores -172 (threshold -300, about 88% of the way from a random policy's
-1,200 to the behaviour policy), in 3,000 gradient steps: about 4 minutes on 2 cores once the
dataset is there (1,500 steps end at -265: one of the ten final episodes is not swung up).

Run: ``python examples/train.py algo=dt env=pendulum [algo.dataset_dir=runs/datasets/pendulum algo.target_return=-100 ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from rl_envs import TargetReturn
from rl_objectives import DTLoss
from rl_objectives.modules import DecisionTransformerInferenceWrapper, DTActor, TanhModule
from rl_replay import SliceSampler
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn

from .common import finish, make_eval_env, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .datasets import DatasetSamples, load_dataset
from .envs import make_env


@dataclass
class DTConfig:
    name: str = "dt"
    lr: Optional[float] = None
    weight_decay: Optional[float] = None
    context: Optional[int] = None  # steps of history the transformer sees
    n_embd: Optional[int] = None  # width of the tokens
    n_layer: Optional[int] = None
    n_head: Optional[int] = None
    dropout: Optional[float] = None
    target_return: Optional[float] = None  # the return asked for at the start of an evaluation episode
    rtg_scale: Optional[float] = None  # returns to go are multiplied by it before they enter the transformer
    dataset_dir: Optional[str] = (
        None  # a dataset folder shared between runs (built there if missing); None: <run folder>/dataset
    )
    dataset_frames: Optional[int] = None  # frames of the dataset, when it is built
    behaviour_frames: Optional[int] = None  # SAC frames of the behaviour policy, when the dataset is built


Config = DTConfig  # the recipe's entry in the ``algo`` config group

# offline: a "batch" is one sample of frames_per_batch / context windows, one gradient step each
PRESETS = {
    "pendulum": {
        "algo": {
            "lr": 5e-4,
            "weight_decay": 1e-4,
            "context": 10,
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 2,
            "dropout": 0.1,
            "target_return": -100.0,
            "rtg_scale": 0.01,
        },
        "env": {"num_envs": 10},  # sub-envs of the dataset's rollout
        "collector": {"frames_per_batch": 64 * 10, "total_frames": 64 * 10 * 3_000},
        "logger": {"eval_every": 64 * 10 * 500, "log_every": 64 * 10 * 50},
    },
}
# TorchRL's offline DT example (MuJoCo) where it applies
DEFAULTS = {
    "algo": {
        "lr": 1e-4,
        "weight_decay": 5e-4,
        "context": 20,
        "n_embd": 128,
        "n_layer": 3,
        "n_head": 1,
        "dropout": 0.1,
        "rtg_scale": 0.001,
        "dataset_frames": 20_000,
        "behaviour_frames": 8_000,
    },
    "collector": {"init_random_frames": 0},
}
THRESHOLDS = {"pendulum": -300.0}


def make_actor(obs_dim: int, action_spec, algo: DTConfig) -> TensorDictSequential:
    """The transformer, then ``tanh`` into the action bounds: reads the three histories, writes ``"action"``."""
    net = DTActor(
        obs_dim,
        action_spec.shape[-1],
        transformer_config={
            "n_embd": algo.n_embd,
            "n_layer": algo.n_layer,
            "n_head": algo.n_head,
            "n_inner": 4 * algo.n_embd,
            "n_positions": 3 * algo.context,
            "resid_pdrop": algo.dropout,
            "attn_pdrop": algo.dropout,
        },
    )
    return TensorDictSequential(
        TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["param"]),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
    )


def to_windows(sample: Any, context: int, rtg_scale: float) -> TensorDict:
    """``SliceSampler``'s slices (``[n * context]``) as windows ``[n, context]`` that end at their last real step.

    A slice that begins before its episode holds fewer real steps, then repeats of its last one
    (``("collector", "mask")`` False): its real steps move to the end of the window and the steps
    before them are zeros, with ``mask`` False (``DTLoss`` leaves them out).
    """
    slices = sample.reshape(-1, context)
    mask = slices.get(("collector", "mask"), None)  # absent when no slice needed padding
    real_steps = mask.sum(-1, keepdim=True) if mask is not None else torch.full((slices.shape[0], 1), context)
    shift = context - real_steps  # zero steps at the front
    position = torch.arange(context)
    source, real = (position - shift).clamp_min(0), position >= shift

    def window(x: torch.Tensor) -> torch.Tensor:
        extra = (1,) * (x.ndim - 2)
        moved = x.gather(1, source.reshape(*source.shape, *extra).expand_as(x))
        return torch.where(real.reshape(*real.shape, *extra), moved, torch.zeros((), dtype=x.dtype))

    return TensorDict(
        observation=window(slices["observation"]),
        action=window(slices["action"]),
        return_to_go=window(slices["return_to_go"]) * rtg_scale,
        mask=real,
        batch_size=slices.batch_size,
    )


class DTPolicy(TensorDictModuleBase):
    """The DT acting in an env: keeps each sub-env's last ``context`` steps and asks for the next action.

    Reads ``observation``, ``target_return`` (the env's ``TargetReturn``: the return still asked
    for) and ``step_count`` (0 starts an episode: that sub-env's history is cleared). The history
    holds, per step, the observation, the action that led to it and the scaled target return;
    steps before the episode are zeros, as in training. The history is plain state, not weights:
    checkpoints hold only the actor.
    """

    in_keys = ["observation", "target_return", "step_count"]
    out_keys = ["action"]

    def __init__(self, actor: nn.Module, context: int, rtg_scale: float, act_dim: int) -> None:
        super().__init__()
        self.wrapper = DecisionTransformerInferenceWrapper(actor, inference_context=context)
        self.context, self.rtg_scale, self.act_dim = context, rtg_scale, act_dim
        self.history: TensorDict | None = None

    def forward(self, td: Any) -> Any:
        obs, new = td["observation"], td["step_count"] == 0
        n = obs.shape[0]
        if self.history is None or self.history.batch_size[0] != n:
            self.history = TensorDict(
                observation=obs.new_zeros(n, self.context, obs.shape[-1]),
                action=obs.new_zeros(n, self.context, self.act_dim),
                return_to_go=obs.new_zeros(n, self.context),
                last_action=obs.new_zeros(n, self.act_dim),
                batch_size=[n],
            )
        # a sub-env that starts an episode starts from zeros
        history = self.history.apply(
            lambda x: torch.where(new.reshape(n, *(1,) * (x.ndim - 1)), torch.zeros((), dtype=x.dtype), x)
        )
        step = {
            "observation": obs,
            "action": history["last_action"],
            "return_to_go": td["target_return"] * self.rtg_scale,
        }
        for key, value in step.items():  # drop the oldest step, append this one
            history.set(key, torch.cat([history[key][:, 1:], value.unsqueeze(1)], 1))
        action = self.wrapper(history.select("observation", "action", "return_to_go"))["action"]
        self.history = history.set("last_action", action)
        return td.set("action", action)


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "dt", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    windows = cfg.collector.frames_per_batch // algo.context
    dataset = load_dataset(
        run,
        algo,
        batch_size=windows * algo.context,
        sampler=SliceSampler(
            slice_len=algo.context, traj_key="episode", span=(True, False), strict_length=False, pad_output=True
        ),
    )
    proto = make_env(cfg.env, 1)
    obs_dim, action_spec = proto.observation_spec_unbatched["observation"].shape[-1], proto.action_spec_unbatched

    actor = make_actor(obs_dim, action_spec, algo)
    policy = DTPolicy(actor, algo.context, algo.rtg_scale, action_spec.shape[-1])
    loss = DTLoss(actor)  # the data's "action" is the target; the actor writes its prediction there, in a copy
    eval_env = make_eval_env(run).append_transform(TargetReturn(algo.target_return))
    samples = DatasetSamples(dataset, transform=lambda sample: to_windows(sample, algo.context, algo.rtg_scale))
    trainer = make_trainer(
        run,
        collector=samples,
        loss=loss,
        optimizer=torch.optim.AdamW(loss.parameters(), lr=algo.lr, weight_decay=algo.weight_decay),
        optim_steps_per_batch=1,
        policy=policy,
        eval_env=eval_env,
        clip_norm=0.25,
    )
    resume_if_asked(run, trainer)

    steps = cfg.collector.total_frames // cfg.collector.frames_per_batch
    print(
        f"DT on {cfg.env.name}: {steps} gradient steps of {windows} windows of {algo.context} steps, target return "
        f"{algo.target_return:g}, seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(
        run,
        trainer,
        policy,
        threshold=THRESHOLDS.get(cfg.env.name),
        wrap_env=lambda env: env.append_transform(TargetReturn(algo.target_return)),
    )
