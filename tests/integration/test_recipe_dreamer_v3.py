"""The DreamerV3 recipe (examples/recipes/dreamer_v3.py).

Fast: a tiny configuration runs a few hundred frames end to end and writes its run folder; the
world-model, actor and value losses of one replayed batch are finite scalars and each reaches its
own parameters; the acting policy carries its latent from step to step and restarts it at a
reset. Pixels (``pendulum_pixels``): the env renders the pole, a tiny run with the convolutional
encoder and decoder goes end to end, and the reconstruction loss reads the images. Slow: the
pendulum and pendulum_pixels presets reach their thresholds.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from recipes import RECIPES, dreamer_v3  # noqa: E402
from recipes.config import BufferConfig, CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.envs import make_env, render_pendulum  # noqa: E402
from rl_objectives import SoftUpdate  # noqa: E402
from rl_objectives.modules import DreamerV3ImageDecoder, DreamerV3ImageEncoder  # noqa: E402
from tdict import TensorDict  # noqa: E402

TINY = {"hidden": 32, "belief": 32, "num_categoricals": 4, "num_classes": 4, "seq_len": 8, "horizon": 5}


def _tiny_algo(**overrides) -> dreamer_v3.DreamerV3Config:
    return dreamer_v3.Config(**{**TINY, **overrides})


def test_tiny_run_writes_its_run_folder(tmp_path: Path) -> None:
    cfg = TrainConfig(
        algo=_tiny_algo(train_every=16),
        env=EnvConfig(name="pendulum", num_envs=2, eval_envs=2, max_steps=50),
        collector=CollectorConfig(frames_per_batch=32, total_frames=320, init_random_frames=64),
        buffer=BufferConfig(batch_size=4),
        logger=LoggerConfig(backends=["csv"], eval_every=160, progress=False),
        runs_dir=str(tmp_path),
        name="tiny",
    )
    final = dreamer_v3.train(cfg)
    assert RECIPES["dreamer_v3"] is dreamer_v3
    assert math.isfinite(final) and -16.3 * 50 <= final <= 0.0
    run = tmp_path / "tiny"
    for file in ("config.json", "checkpoint.pt", "learning_curve.png", "scalars/total_r_evaluation.csv"):
        assert (run / file).is_file(), file
    for name in ("loss_model_reco", "loss_model_reward", "loss_model_dynamic", "loss_actor", "loss_value"):
        assert (run / "scalars" / f"{name}.csv").is_file(), name
    config = json.loads((run / "config.json").read_text())
    assert config["recipe"] == "dreamer_v3" and config["algo"]["hidden"] == 32
    assert config["algo"]["model_lr"] == dreamer_v3.PRESETS["pendulum"]["algo"]["model_lr"]  # unset: the preset
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["collected_frames"] == 320
    assert {"actor_optimizer", "value_optimizer", "model_optimizer", "policy"} <= set(ckpt)


def _batch(algo: dreamer_v3.DreamerV3Config, n: int = 3) -> TensorDict:
    """``n`` replayed sequences of ``algo.seq_len`` pendulum steps, as the recipe hands them to the loss."""
    torch.manual_seed(0)
    t, stoch = algo.seq_len, algo.num_categoricals * algo.num_classes
    never = torch.zeros(n, t, dtype=torch.bool)
    return TensorDict(
        {
            "state": torch.zeros(n, t, stoch),
            "belief": torch.zeros(n, t, algo.belief),
            "action": torch.rand(n, t, 1) * 4 - 2,
            "is_init": never.clone().index_fill_(1, torch.tensor([0]), True),
            "next": {"observation": torch.randn(n, t, 3), "reward": -torch.rand(n, t) * 16, "done": never,
                     "terminated": never},
        },
        [n, t],
    )  # fmt: skip


def test_losses_are_finite_scalars_that_reach_their_own_parameters() -> None:
    algo = _tiny_algo(**{k: v for k, v in dreamer_v3.DEFAULTS["algo"].items() if k not in TINY})
    loss, _, params = dreamer_v3.build(algo, 3, make_env(EnvConfig(name="pendulum"), 1).action_spec_unbatched)
    SoftUpdate(loss.value_loss, tau=0.02)  # the slow critic's updater (the recipe steps it after each update)
    out = loss(_batch(algo))
    terms = ["loss_model_dynamic", "loss_model_representation", "loss_model_reco", "loss_model_reward"]
    terms += ["loss_model_continue", "loss_actor", "loss_value"]
    for name in terms:
        assert out[name].shape == () and torch.isfinite(out[name]), name
    owners = {"loss_actor": "actor", "loss_value": "value", "loss_model_reco": "model"}
    for name, owner in owners.items():  # each optimizer's loss reaches its parameters
        grads = torch.autograd.grad(out[name], params[owner], allow_unused=True, retain_graph=True)
        assert any(g is not None and g.abs().sum() > 0 for g in grads), name
    # the actor's loss leaves the world model and the critic alone (their weights are only read)
    grads = torch.autograd.grad(out["loss_actor"], params["model"] + params["value"], allow_unused=True)
    assert all(g is None or not g.any() for g in grads)


def test_the_policy_carries_its_latent_and_restarts_it_at_a_reset() -> None:
    algo = _tiny_algo(**{k: v for k, v in dreamer_v3.DEFAULTS["algo"].items() if k not in TINY})
    env_cfg = EnvConfig(name="pendulum", num_envs=2, max_steps=4)
    _, policy, _ = dreamer_v3.build(algo, 3, make_env(env_cfg, 1).action_spec_unbatched)
    env = dreamer_v3.with_latents(make_env(env_cfg), algo, 1, init_tracker=True)
    rollout = env.rollout(6, policy, break_when_any_done=False)
    # the policy overwrites the latent it read with the updated one, which the next step reads
    assert torch.equal(rollout["next", "belief"], rollout["belief"])
    assert torch.equal(rollout["next", "state"], rollout["state"])
    assert torch.equal(rollout["next", "prev_action"], rollout["action"])
    observe = policy[0].module
    with torch.no_grad():
        _, _, belief = observe.prior(rollout["state"][:, 1], rollout["belief"][:, 1], rollout["action"][:, 1])
    torch.testing.assert_close(rollout["belief"][:, 2], belief)  # step 2's prior started from step 1's latent
    assert rollout["is_init"][:, 4].all() and not rollout["is_init"][:, 1:4].any()
    # the prior saw zeros at the reset: the same belief in both envs, as at the first step
    assert torch.allclose(rollout["belief"][0, 4], rollout["belief"][0, 0])
    assert torch.allclose(rollout["belief"][0, 0], rollout["belief"][1, 0])


def test_pendulum_pixels_renders_the_pole() -> None:
    env = make_env(EnvConfig(name="pendulum_pixels", max_steps=5), 2)
    assert env.observation_spec["observation"].shape == (2, 1, 16, 16)
    rollout = env.rollout(5)
    images = rollout["next", "observation"]
    assert images.shape == (2, 5, 1, 16, 16) and images.min() >= 0 and images.max() <= 1
    # the image is the state's: upright draws the upper half, hanging the lower half, mirrored
    up = render_pendulum(torch.tensor([1.0, 0.0, 0.0]))
    down = render_pendulum(torch.tensor([-1.0, 0.0, 0.0]))
    assert up[0, :7].sum() > 10 and up[0, 9:].sum() == 0
    torch.testing.assert_close(down, up.flip(-2))
    right = render_pendulum(torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(right, up.transpose(-1, -2).flip(-1))
    th = rollout["next", "th"]
    state = torch.stack([th.cos(), th.sin(), torch.zeros_like(th)], -1)
    torch.testing.assert_close(render_pendulum(state), images)  # each image is the env's angle


def test_tiny_pixel_run_uses_the_image_encoder_and_decoder(tmp_path: Path) -> None:
    cfg = TrainConfig(
        algo=_tiny_algo(train_every=16, cnn_depth=4),
        env=EnvConfig(name="pendulum_pixels", num_envs=2, eval_envs=2, max_steps=50),
        collector=CollectorConfig(frames_per_batch=32, total_frames=256, init_random_frames=64),
        buffer=BufferConfig(batch_size=4),
        logger=LoggerConfig(backends=["csv"], eval_every=128, progress=False),
        runs_dir=str(tmp_path),
        name="tiny_pixels",
    )
    final = dreamer_v3.train(cfg)
    assert math.isfinite(final) and -16.3 * 50 <= final <= 0.0
    assert (tmp_path / "tiny_pixels" / "scalars" / "loss_model_reco.csv").is_file()
    ckpt = torch.load(tmp_path / "tiny_pixels" / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["collected_frames"] == 256


def test_pixel_model_reconstructs_the_images() -> None:
    defaults = {k: v for k, v in dreamer_v3.DEFAULTS["algo"].items() if k not in TINY}
    algo = _tiny_algo(**{**defaults, "cnn_depth": 4})
    action_spec = make_env(EnvConfig(name="pendulum_pixels"), 1).action_spec_unbatched
    loss, policy, params = dreamer_v3.build(algo, (1, 16, 16), action_spec)
    model = loss.model_loss.world_model
    assert isinstance(model[0].module, DreamerV3ImageEncoder) and isinstance(model[2].module, DreamerV3ImageDecoder)
    SoftUpdate(loss.value_loss, tau=0.02)
    batch = _batch(algo)
    images = render_pendulum(torch.randn(*batch.shape, 3))
    batch.set(("next", "observation"), images)
    out = loss(batch)
    for name in ("loss_model_reco", "loss_actor", "loss_value"):
        assert out[name].shape == () and torch.isfinite(out[name]), name
    # the reconstruction term is the squared pixel error, summed over each image (no symlog)
    model_losses, modelled = loss.model_loss(batch)
    reco = modelled.get(("next", "reco_observation"))
    assert reco.shape == images.shape
    expected = (reco.detach() - images).square().sum((-3, -2, -1)).mean()
    torch.testing.assert_close(model_losses["loss_model_reco"].detach().reshape(()), expected)
    grads = torch.autograd.grad(out["loss_model_reco"], model[0].module.parameters(), allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)  # the encoder learns from the pixels


@pytest.mark.slow
def test_pendulum_preset_reaches_its_threshold(tmp_path: Path) -> None:
    """About 11 minutes on one thread (seed 0: final -173; the curve is in the recipe's docstring)."""
    cfg = TrainConfig(
        algo=dreamer_v3.Config(),
        env=EnvConfig(name="pendulum"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset",
    )
    assert dreamer_v3.train(cfg) >= dreamer_v3.THRESHOLDS["pendulum"]


@pytest.mark.slow
def test_pendulum_pixels_preset_reaches_its_threshold(tmp_path: Path) -> None:
    """About 16 minutes on one thread (seed 0: final -177; the curve is in the recipe's docstring)."""
    cfg = TrainConfig(
        algo=dreamer_v3.Config(),
        env=EnvConfig(name="pendulum_pixels"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset_pixels",
    )
    assert dreamer_v3.train(cfg) >= dreamer_v3.THRESHOLDS["pendulum_pixels"]
