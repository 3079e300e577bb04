"""DreamerV3 (Hafner et al. 2023) from vector or pixel observations: a world model with discrete
latents, and an actor and a critic trained in its imagination.

The world model encodes the symlog observation with an MLP (images ``[C, H, W]`` in [0, 1]: with
``DreamerV3ImageEncoder``'s stride-2 convolutions, ``algo.cnn_*``, and decodes them with its mirror,
``DreamerV3ImageDecoder``: squared pixel error, no symlog); an RSSM (``RSSMPriorV3`` /
``RSSMPosteriorV3``: a GRU belief and ``num_categoricals`` categoricals of ``num_classes``, 1%
uniform mixed in) steps it along replayed sequences; heads decode the observation (symlog MSE),
the reward (two-hot over 255 symexp bins) and the continuation. ``DreamerV3ModelLoss`` trains it
on ``buffer.batch_size`` slices of ``seq_len`` steps (``SliceSampler``: each slice starts from a
zero latent, as an episode does). From every posterior state of the sample the actor imagines
``horizon`` steps through the prior (``DreamerEnv``); ``DreamerV3ActorLoss`` backpropagates the
normalised lambda-returns through the imagined dynamics, ``DreamerV3ValueLoss`` regresses them
(two-hot) with a slow critic (``SoftUpdate``) as regulariser. Three Adam optimizers (DreamerV3's
learning rates and clipping), stepped in the order actor, critic, world model (the actor's graph
reads the other two's weights). One gradient step per ``train_every`` collected frames.

Acting carries the latent across steps: the envs hold ``"state"``, ``"belief"`` and
``"prev_action"`` (a ``TensorDictPrimer``: zero at every reset); the policy steps the prior from
them, updates the posterior with the observation's embedding, and samples the actor on the new
latent, which the next step reads. The first ``collector.init_random_frames`` frames are random.

Expected: ``pendulum`` (states, random actions score about -1,200 to -1,400) above -400 in 12,000
frames; seed 0: -1,425 at 1,792 frames, -1,034 at 3,584, -247 at 5,376, -182 at 7,168, -201 at
8,960, -145 at 10,752, final -170 (2026-12-06, after the latents came to be drawn by inverting their
cumulative distribution, which changes the random draws), in 804 s on one thread with other work on
the second core (2,200 gradient steps; 635 s on a quiet machine before that change). After the
recurrence's packed weights, scattered state-column gradients and one-node GRU step (same math,
other rounding): -1,425 at 1,792, -1,171 at 3,584, -312 at 5,376, -182 at 7,168, -200 at 8,960,
-197 at 10,752, final -169, in 770 s. After the closed-form KL, the draw by binary search and the
heads' scattered state-column gradients (same math, other rounding): -1,425 at 1,792, -1,111 at
3,584, -195 at 5,376, -183 at 7,168, -161 at 8,960, -145 at 10,752, final -170, in 723 s. After the
numbers became cached tensors, the small RMS norms lost their conversions and the GRU backward its
``1 - x`` steps (same math, other rounding): -1,425 at 1,792, -1,105 at 3,584, -255 at 5,376, -197 at
7,168, -160 at 8,960, -158 at 10,752, final -183, in 723 s.
``pendulum_pixels`` (the same task seen as 16 x 16 grayscale images of the pole, ``envs.render_pendulum``:
the angular velocity must come from the latent; random about -1,200 to -1,400) above -400 in 12,000
frames with one gradient step per 2 frames; seed 0: -1,427 at 1,792 frames, -1,079 at 3,584, -806 at
5,376, -615 at 7,168, -161 at 8,960, -179 at 10,752, final -166 (2026-12-06, after the draws changed),
in 2,202 s on one thread with other work on the second core (5,500 gradient steps; before that change
-155 at 7,168 and final -167, in 2,510 s on a slow day). After the changes of 2026-12-06's two later
sessions (same math, other rounding): -1,427 at 1,792, -1,339 at 3,584, -570 at 5,376, -153 at 7,168,
-163 at 8,960, -162 at 10,752, final -171, in 1,972 s.
Fewer gradient steps, seed 0 after the same change: one per 3 frames (this preset until then) ended at
-571 in 12,000 frames (-509 at 10,752) and reached -189 only at 16,000; before the change it had ended
at -177 in 12,000 frames. One per 5 frames (the state preset's) was still at -1,022 at 8,960 frames.

Run: ``python examples/train.py algo=dreamer_v3 env=pendulum [algo.train_every=8 collector.total_frames=20000 ...]``
(``env=pendulum_pixels`` for images).
Not here: RGB or larger images (the encoder takes them; no task here renders them), the replay value loss
(``DreamerV3Loss(replay_value_loss_weight=...)``), terminal steps (the model never sees the
observation that ends an episode, as TorchRL's recipe).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional, cast

import torch
from rl_envs import InitTracker, TensorDictPrimer
from rl_envs.model_based import DreamerEnv
from rl_objectives import DreamerV3ActorLoss, DreamerV3Loss, DreamerV3ModelLoss, DreamerV3ValueLoss, SoftUpdate
from rl_objectives.functional.dreamer import symexp, symlog
from rl_objectives.modules import (
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    ProbabilisticActor,
    RSSMPosteriorV3,
    RSSMPriorV3,
    RSSMRolloutV3,
    SymExpTwoHot,
    TanhNormal,
    WorldModelWrapper,
)
from rl_objectives.trainers import OptimizerHook, ReplayBufferTrainer, TargetNetUpdaterHook
from rl_replay import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from tdict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from tdict.specs import Composite, Unbounded
from torch import nn

from .common import finish, make_collector, make_eval_env, make_trainer, resume_if_asked, start_run
from .config import TrainConfig
from .envs import make_env
from .networks import FAST


@dataclass
class DreamerV3Config:
    name: str = "dreamer_v3"
    model_lr: Optional[float] = None  # world model (Adam)
    actor_lr: Optional[float] = None
    value_lr: Optional[float] = None
    adam_eps: Optional[float] = None
    model_clip: Optional[float] = None  # gradient-norm clipping of each optimizer
    actor_clip: Optional[float] = None
    value_clip: Optional[float] = None
    gamma: Optional[float] = None
    lmbda: Optional[float] = None
    horizon: Optional[int] = None  # imagined steps
    seq_len: Optional[int] = None  # steps per replayed slice (buffer.batch_size slices per sample)
    train_every: Optional[int] = None  # collected frames per gradient step (the replay ratio's inverse)
    hidden: Optional[int] = None  # width of every MLP (encoder, heads, actor, critic, RSSM projections)
    depth: Optional[int] = None  # hidden layers of every MLP
    belief: Optional[int] = None  # the GRU's deterministic state
    num_categoricals: Optional[int] = None  # the stochastic state: categoricals x classes, one-hot
    num_classes: Optional[int] = None
    unimix: Optional[float] = None  # uniform share mixed into the latent categoricals
    free_bits: Optional[float] = None  # free nats of the KL terms
    entropy_bonus: Optional[float] = None  # actor entropy weight (on normalised returns)
    slow_critic_tau: Optional[float] = None  # Polyak step of the slow critic
    slow_critic_weight: Optional[float] = None  # weight of the regression towards the slow critic
    num_bins: Optional[int] = None  # two-hot support of reward and value
    cnn_depth: Optional[int] = None  # image observations: channels of the first conv stage (doubled at each)
    cnn_stages: Optional[int] = None  # image observations: stride-2 conv stages (each halves the image's side)
    cnn_kernel: Optional[int] = None


Config = DreamerV3Config  # the recipe's entry in the ``algo`` config group

PRESETS = {
    "pendulum": {
        # small and fast for a CPU: 128 units, 8 x 8 latents, 16 x 16-step sequences (256 imagination starts),
        # learning rates above DreamerV3's (its 1e-4 / 3e-5 are tuned for a million updates, this has 2,000)
        "algo": {
            "train_every": 5,
            "seq_len": 16,
            "horizon": 15,
            "hidden": 128,
            "belief": 128,
            "gamma": 0.99,
            "model_lr": 3e-4,
            "actor_lr": 1e-4,
            "value_lr": 1e-4,
        },
        "env": {"num_envs": 4},
        "collector": {"frames_per_batch": 256, "total_frames": 12_000, "init_random_frames": 1_024},
        "buffer": {"size": 100_000, "batch_size": 16},
        "logger": {"eval_every": 2_000},
    },
}
# the pendulum preset with 16 x 16 images (a 16 -> 32 channel conv encoder, 3 x 3 kernels, and its mirror)
# and more gradient steps: one per 2 frames (seed 0 with one per 3 ended at -571, with one per 5 it
# was still at -1,022 at 8,960 frames; see the module docstring)
PRESETS["pendulum_pixels"] = copy.deepcopy(PRESETS["pendulum"])
PRESETS["pendulum_pixels"]["algo"]["train_every"] = 2
DEFAULTS = {
    "algo": {
        "model_lr": 1e-4,
        "actor_lr": 3e-5,
        "value_lr": 3e-5,
        "adam_eps": 1e-8,
        "model_clip": 1000.0,
        "actor_clip": 100.0,
        "value_clip": 100.0,
        "gamma": 0.997,
        "lmbda": 0.95,
        "horizon": 15,
        "seq_len": 64,
        "train_every": 2,
        "hidden": 256,
        "depth": 2,
        "belief": 256,
        "num_categoricals": 8,
        "num_classes": 8,
        "unimix": 0.01,
        "free_bits": 1.0,
        "entropy_bonus": 3e-4,
        "slow_critic_tau": 0.02,
        "slow_critic_weight": 1.0,
        "num_bins": 255,
        "cnn_depth": 16,
        "cnn_stages": 2,
        "cnn_kernel": 3,
    },
    "buffer": {"size": 1_000_000, "batch_size": 16},
}
THRESHOLDS = {"pendulum": -400.0, "pendulum_pixels": -400.0}
# what the world model reads from a stored step (and the slice sampler's trajectory ids)
STEP_KEYS = (
    "observation",
    "action",
    "is_init",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("collector", "traj_ids"),
)


class _Symlog(nn.Module):
    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return symlog(value)


class _SymexpOut(nn.Module):
    """An MLP whose output is read in symlog space: it returns raw values (the model loss compares in symlog)."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return symexp(self.mlp(*inputs))


class Observe(nn.Module):
    """One step of the posterior while acting: ``belief = prior(state, belief, prev_action)``, then
    ``state = posterior(belief, encoder(observation))`` (zero inputs after a reset: an episode's start)."""

    def __init__(self, encoder: nn.Module, prior: RSSMPriorV3, posterior: RSSMPosteriorV3) -> None:
        super().__init__()
        self.encoder, self.prior, self.posterior = encoder, prior, posterior

    def forward(self, observation, state, belief, prev_action):  # noqa: ANN001, ANN201
        _, _, belief = self.prior(state, belief, prev_action)
        _, state = self.posterior(belief, self.encoder(observation))
        return state, belief


def with_latents(env: Any, algo: Any, action_dim: int, *, init_tracker: bool = False) -> Any:
    """``env`` with the acting latents (zero at reset) and, for training, the episode-start flag."""
    if init_tracker:
        env.append_transform(InitTracker())
    stoch = algo.num_categoricals * algo.num_classes
    primer = TensorDictPrimer(
        state=Unbounded((stoch,)), belief=Unbounded((algo.belief,)), prev_action=Unbounded((action_dim,)),
        expand_specs=True,
    )  # fmt: skip
    return env.append_transform(primer)


def build(algo: Any, obs_shape: Any, action_spec: Any) -> tuple[DreamerV3Loss, TensorDictSequential, dict]:
    """The world model, actor and critic, their losses (one ``DreamerV3Loss``), the acting policy,
    and the parameters of each optimizer. ``obs_shape``: ``(dim,)`` (or ``dim``) for vectors (MLP encoder and
    decoder, symlog reconstruction), ``(C, H, W)`` for images in [0, 1] (convolutional encoder and decoder,
    reconstruction of the pixels themselves)."""
    act_dim, width, depth = action_spec.shape[-1], algo.hidden, algo.depth
    stoch = algo.num_categoricals * algo.num_classes
    feat = stoch + algo.belief
    latent = {"num_categoricals": algo.num_categoricals, "num_classes": algo.num_classes, "unimix": algo.unimix}
    obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
    pixels = len(obs_shape) == 3
    if pixels:
        mults = tuple(2**i for i in range(algo.cnn_stages))
        conv = {"depth": algo.cnn_depth, "mults": mults, "kernel_size": algo.cnn_kernel}
        encoder: nn.Module = DreamerV3ImageEncoder(obs_shape[0], **conv)
        embed = encoder.output_features(obs_shape)
        decoder: nn.Module = DreamerV3ImageDecoder(feat, image_shape=obs_shape, num_blocks=1, **conv)
    else:
        encoder = nn.Sequential(_Symlog(), DreamerV3MLP(obs_shape[0], None, depth, width))
        embed = width
        decoder = _SymexpOut(DreamerV3MLP(feat, obs_shape[0], depth, width))
    prior = RSSMPriorV3(
        action_shape=(act_dim,), hidden_dim=width, rnn_hidden_dim=algo.belief, action_dim=act_dim, **latent
    )
    posterior = RSSMPosteriorV3(width, rnn_hidden_dim=algo.belief, obs_embed_dim=embed, **latent)
    reward_net = DreamerV3MLP(feat, algo.num_bins, depth, width, outscale=0.0)
    continue_net = DreamerV3MLP(feat, 1, depth, width)
    two_hot = SymExpTwoHot(algo.num_bins)

    # the world model on replayed sequences [B, T]: step t reads (state, belief, action) and writes under "next"
    post = [("next", "state"), ("next", "belief")]
    world_model = TensorDictSequential(
        TensorDictModule(encoder, in_keys=[("next", "observation")], out_keys=[("next", "encoded_latents")]),
        RSSMRolloutV3(
            TensorDictModule(
                prior,
                in_keys=["state", "belief", "action"],
                out_keys=[("next", "prior_logits"), "_", ("next", "belief")],
            ),
            TensorDictModule(
                posterior,
                in_keys=[("next", "belief"), ("next", "encoded_latents")],
                out_keys=[("next", "posterior_logits"), ("next", "state")],
            ),
        ),
        TensorDictModule(decoder, in_keys=post, out_keys=[("next", "reco_observation")]),
        TensorDictModule(reward_net, in_keys=post, out_keys=[("next", "reward_logits")]),
        TensorDictModule(continue_net, in_keys=post, out_keys=[("next", "continue_pred")]),
    )
    model_loss = DreamerV3ModelLoss(
        world_model,
        lambda_continue=1.0,
        kl_mode="separate",  # DreamerV3's dynamics (0.5) and representation (0.1) terms, free nats on their sum
        lambda_dynamic=0.5,
        lambda_representation=0.1,
        unimix=algo.unimix,
        free_bits=algo.free_bits,
        num_reward_bins=algo.num_bins,
        reco_symlog=not pixels,  # images: squared error of the pixels, summed over each image
    )
    model_loss.set_keys(pixels="observation", reco_pixels="reco_observation")

    # imagination: the prior and the reward head (decoded) step the latent
    latent_keys = ["state", "belief"]
    imagined_reward = TensorDictSequential(
        TensorDictModule(reward_net, in_keys=latent_keys, out_keys=["reward_logits"]),
        TensorDictModule(two_hot, in_keys=["reward_logits"], out_keys=["reward"]),
    )
    transition = TensorDictModule(prior, in_keys=[*latent_keys, "action"], out_keys=["_", *latent_keys])
    dream = DreamerEnv(
        WorldModelWrapper(transition, imagined_reward), prior_shape=(stoch,), belief_shape=(algo.belief,)
    )
    dream.observation_spec = Composite(state=Unbounded((stoch,)), belief=Unbounded((algo.belief,)))
    dream.state_spec = dream.observation_spec.clone()
    dream.action_spec, dream.reward_spec = action_spec.clone(), Unbounded((1,))
    continuation = TensorDictSequential(
        TensorDictModule(continue_net, in_keys=latent_keys, out_keys=["continue_logits"]),
        TensorDictModule(nn.Sigmoid(), in_keys=["continue_logits"], out_keys=["continuation"]),
    )

    low, high = action_spec.low, action_spec.high
    bounds = {"low": low[..., 0], "high": high[..., 0]} if act_dim == 1 else {"low": low, "high": high}
    actor = ProbabilisticActor(
        TensorDictSequential(
            TensorDictModule(
                DreamerV3MLP(feat, 2 * act_dim, depth, width), in_keys=latent_keys, out_keys=["actor_out"]
            ),
            TensorDictModule(NormalParamExtractor(), in_keys=["actor_out"], out_keys=["loc", "scale"]),
        ),
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={**bounds, **FAST},
    )
    critic = TensorDictSequential(
        TensorDictModule(
            DreamerV3MLP(feat, algo.num_bins, depth, width, outscale=0.0),
            in_keys=latent_keys,
            out_keys=["state_value_logits"],
        ),
        TensorDictModule(two_hot, in_keys=["state_value_logits"], out_keys=["state_value"]),
    )
    actor_loss = DreamerV3ActorLoss(
        actor,
        critic,
        dream,
        continuation_model=continuation,
        imagination_horizon=algo.horizon,
        entropy_bonus=algo.entropy_bonus,
    )
    actor_loss.make_value_estimator(gamma=algo.gamma, lmbda=algo.lmbda)
    value_loss = DreamerV3ValueLoss(
        critic,
        value_loss="two_hot",
        num_value_bins=algo.num_bins,
        actor_loss=actor_loss,
        slow_critic_regularization=algo.slow_critic_weight,
    )
    loss = DreamerV3Loss(model_loss, actor_loss, value_loss, replay_value_loss_weight=0.0)

    # acting: update the latent with the observation, sample the actor, remember the action
    policy = TensorDictSequential(
        TensorDictModule(
            Observe(encoder, prior, posterior),
            in_keys=["observation", "state", "belief", "prev_action"],
            out_keys=["state", "belief"],
        ),
        actor,
        TensorDictModule(nn.Identity(), in_keys=["action"], out_keys=["prev_action"]),
    )
    params = {
        "actor": list(actor.parameters()),
        "value": list(critic.parameters()),
        "model": list(world_model.parameters()),
    }
    return loss, policy, params


def train(cfg: TrainConfig) -> float:
    run = start_run(cfg, "dreamer_v3", PRESETS, DEFAULTS)
    cfg, algo = run.cfg, run.cfg.algo
    proto = make_env(cfg.env, 1)
    obs_shape, action_spec = proto.observation_spec_unbatched["observation"].shape, proto.action_spec_unbatched
    act_dim, stoch = action_spec.shape[-1], algo.num_categoricals * algo.num_classes
    loss, policy, params = build(algo, obs_shape, action_spec)

    collector = make_collector(
        run, lambda: with_latents(make_env(cfg.env), algo, act_dim, init_tracker=True), policy, warmup=True
    )
    trainer = make_trainer(
        run,
        collector=collector,
        loss=loss,
        optimizer=None,  # three optimizers, registered below
        optim_steps_per_batch=max(1, cfg.collector.frames_per_batch // algo.train_every),
        policy=policy,
        eval_env=with_latents(make_eval_env(run), algo, act_dim),
    )
    # actor first: its graph reads the world model's and the critic's weights, which the others change in place
    for name, losses, lr, clip in (
        ("actor", ["loss_actor"], algo.actor_lr, algo.actor_clip),
        ("value", ["loss_value"], algo.value_lr, algo.value_clip),
        ("model", ["loss_model_dynamic", "loss_model_representation", "loss_model_reco", "loss_model_reward",
                   "loss_model_continue"], algo.model_lr, algo.model_clip),
    ):  # fmt: skip
        hook = OptimizerHook(torch.optim.Adam(params[name], lr=lr, eps=algo.adam_eps), losses)
        trainer.register_op("optimizer", _clipped(hook, clip))
        trainer.register_module(f"{name}_optimizer", hook)

    # sequences: each env's share of a batch is written as one segment (the slices stay inside one)
    n_seq, seq_len, batch_frames = (
        cast(int, cfg.buffer.batch_size),
        algo.seq_len,
        cast(int, cfg.collector.frames_per_batch),
    )
    if batch_frames // cast(int, cfg.env.num_envs) < seq_len:
        raise ValueError(
            f"dreamer_v3: each env's share of a batch ({batch_frames} / {cfg.env.num_envs} steps) must hold a slice "
            f"of algo.seq_len={seq_len} steps."
        )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(min(cast(int, cfg.buffer.size), cast(int, cfg.collector.total_frames))),
        sampler=SliceSampler(slice_len=seq_len, traj_key=("collector", "traj_ids")),
        batch_size=n_seq * seq_len,
    )
    trainer.register_op("batch_process", lambda batch: batch.select(*STEP_KEYS))
    ReplayBufferTrainer(buffer).register(trainer)

    def as_sequences(sample: Any) -> Any:  # [n_seq * seq_len] -> [n_seq, seq_len], each from a zero latent
        sample = sample.reshape(n_seq, seq_len)
        sample.set("state", torch.zeros(n_seq, seq_len, stoch))
        sample.set("belief", torch.zeros(n_seq, seq_len, algo.belief))
        return sample

    trainer.register_op("process_optim_batch", as_sequences)
    TargetNetUpdaterHook(SoftUpdate(loss.value_loss, tau=algo.slow_critic_tau)).register(trainer)
    resume_if_asked(run, trainer)

    print(
        f"DreamerV3 on {cfg.env.num_envs} x {cfg.env.name}, {cfg.collector.total_frames} frames, one gradient step "
        f"per {algo.train_every} frames, seed {cfg.seed}; run folder {run.dir}/",
        flush=True,
    )
    trainer.train()
    return finish(
        run,
        trainer,
        policy,
        threshold=THRESHOLDS.get(cfg.env.name),
        wrap_env=lambda env: with_latents(env, algo, act_dim),
    )


def _clipped(hook: OptimizerHook, clip: float) -> Any:
    """``hook`` as a trainer ``"optimizer"`` op with its own clipping norm."""

    def step(losses: Any, clip_grad_norm: bool, _clip_norm: Any, index: int) -> Any:
        return hook(losses, clip_grad_norm, clip, index)

    return step
