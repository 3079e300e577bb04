"""The DreamerV3 recipe (examples/recipes/dreamer_v3.py).

Fast: a tiny configuration runs a few hundred frames end to end and writes its run folder; the
world-model, actor and value losses of one replayed batch are finite scalars and each reaches its
own parameters; the acting policy carries its latent from step to step and restarts it at a
reset. Slow: the pendulum preset reaches its threshold.
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
from recipes.envs import make_env  # noqa: E402
from rl_objectives import SoftUpdate  # noqa: E402
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


@pytest.mark.slow
def test_pendulum_preset_reaches_its_threshold(tmp_path: Path) -> None:
    """About 11 minutes on one thread (seed 0: final -169; the curve is in the recipe's docstring)."""
    cfg = TrainConfig(
        algo=dreamer_v3.Config(),
        env=EnvConfig(name="pendulum"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset",
    )
    assert dreamer_v3.train(cfg) >= dreamer_v3.THRESHOLDS["pendulum"]
