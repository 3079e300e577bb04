"""rl_objectives.functional.ppo against the CleanRL-style PPO / A2C step written out here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
from torch import nn

from rl_objectives import A2CLoss, ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.functional.ppo import (
    approx_kl,
    clipped_surrogate_loss,
    effective_sample_size,
    entropy_loss,
    explained_variance,
    importance_weighted_loss,
    kl_penalty_loss,
    policy_gradient_loss,
    value_loss,
)


def _batch(n: int = 64, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "new_log_prob": torch.randn(n, generator=g) * 0.3 - 1.0,
        "old_log_prob": torch.randn(n, generator=g) * 0.3 - 1.0,
        "advantage": torch.randn(n, generator=g),
        "value": torch.randn(n, generator=g),
        "old_value": torch.randn(n, generator=g),
        "returns": torch.randn(n, generator=g),
    }


def test_clipped_surrogate_equals_cleanrl():
    b = _batch()
    log_ratio = b["new_log_prob"] - b["old_log_prob"]
    ratio = log_ratio.exp()
    # CleanRL ppo_continuous_action.py: pg_loss = max(-A * r, -A * clamp(r, 1 - c, 1 + c))
    expected = torch.max(-b["advantage"] * ratio, -b["advantage"] * torch.clamp(ratio, 0.8, 1.2))
    clipfrac = ((ratio - 1.0).abs() > 0.2).float().mean()
    loss, fraction = clipped_surrogate_loss(log_ratio, b["advantage"], 0.2)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(fraction, clipfrac)
    assert loss.shape == (64,) and fraction.shape == ()
    # a tensor clip range (a scheduled buffer) gives the same numbers
    torch.testing.assert_close(clipped_surrogate_loss(log_ratio, b["advantage"], torch.tensor(0.2))[0], expected)


def test_clipped_surrogate_gradient_vanishes_outside_the_clip():
    log_ratio = torch.tensor([0.5, 0.01, -0.5], requires_grad=True)
    loss, _ = clipped_surrogate_loss(log_ratio, torch.ones(3), 0.2)
    loss.sum().backward()
    # r = e^0.5 > 1.2 with A > 0: the clipped term is the minimum, no gradient; r = e^0.01 and
    # r = e^-0.5 (below 0.8, but min(r, 0.8) = r for A > 0) are unclipped: d(-r)/d log r = -r
    expected = torch.tensor([0.0, -torch.tensor(0.01).exp().item(), -torch.tensor(-0.5).exp().item()])
    torch.testing.assert_close(log_ratio.grad, expected)


def test_correction_multiplies_both_terms():
    b = _batch()
    log_ratio = b["new_log_prob"] - b["old_log_prob"]
    correction = torch.full_like(log_ratio, -0.1)
    ratio, w = log_ratio.exp(), correction.exp()
    expected = -torch.min(ratio * w * b["advantage"], ratio.clamp(0.8, 1.2) * w * b["advantage"])
    torch.testing.assert_close(clipped_surrogate_loss(log_ratio, b["advantage"], 0.2, correction)[0], expected)
    torch.testing.assert_close(
        importance_weighted_loss(log_ratio, b["advantage"], correction), -(ratio * w * b["advantage"])
    )


def test_policy_gradient_importance_and_kl_penalty():
    b = _batch()
    torch.testing.assert_close(
        policy_gradient_loss(b["new_log_prob"], b["advantage"]), -b["new_log_prob"] * b["advantage"]
    )
    log_ratio = b["new_log_prob"] - b["old_log_prob"]
    torch.testing.assert_close(importance_weighted_loss(log_ratio, b["advantage"]), -log_ratio.exp() * b["advantage"])
    kl = b["value"].abs()
    torch.testing.assert_close(
        kl_penalty_loss(log_ratio, b["advantage"], kl, 0.5), -(log_ratio.exp() * b["advantage"] - 0.5 * kl)
    )


@pytest.mark.parametrize("loss_type", ["l1", "l2", "smooth_l1"])
def test_value_loss_with_and_without_clipping(loss_type):
    b = _batch()
    d = {"l1": F.l1_loss, "l2": F.mse_loss, "smooth_l1": F.smooth_l1_loss}[loss_type]
    loss, fraction = value_loss(b["value"], b["returns"], loss_type)
    torch.testing.assert_close(loss, d(b["value"], b["returns"], reduction="none"))
    assert fraction is None
    # CleanRL's clipped value loss: max(unclipped, (V_old + clamp(V - V_old, -c, c) - R)^2)
    clipped_value = b["old_value"] + torch.clamp(b["value"] - b["old_value"], -0.3, 0.3)
    expected = torch.max(
        d(b["value"], b["returns"], reduction="none"), d(clipped_value, b["returns"], reduction="none")
    )
    loss, fraction = value_loss(b["value"], b["returns"], loss_type, old_value=b["old_value"], clip_value=0.3)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(fraction, ((b["value"] - b["old_value"]).abs() > 0.3).float().mean())


def test_diagnostics():
    b = _batch()
    log_ratio = b["new_log_prob"] - b["old_log_prob"]
    torch.testing.assert_close(approx_kl(log_ratio), (b["old_log_prob"] - b["new_log_prob"]).mean())
    w = log_ratio.exp()
    torch.testing.assert_close(effective_sample_size(log_ratio), w.sum() ** 2 / (w**2).sum() / w.numel())
    # no overflow for large log-weights: equal weights stay at 1
    torch.testing.assert_close(effective_sample_size(torch.full((5,), 1000.0)), torch.tensor(1.0))
    y, v = b["returns"], b["value"]
    torch.testing.assert_close(explained_variance(v, y), 1 - ((y - v) ** 2).mean() / y.var(unbiased=False))
    torch.testing.assert_close(entropy_loss(torch.tensor([1.0, 3.0]), torch.tensor(0.01)), torch.tensor([-0.01, -0.03]))


def _actor_critic():
    torch.manual_seed(0)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"],
            out_keys=["action"],
            return_log_prob=True,
            distribution_class=torch.distributions.Categorical,
        ),
    )
    critic = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)), in_keys=["obs"], out_keys=["state_value"])
    with torch.no_grad():
        td = actor(TensorDict(obs=torch.randn(32, 3), batch_size=[32]))
    g = torch.Generator().manual_seed(1)
    td["action_log_prob"] = td["action_log_prob"] + 0.3 * torch.randn(32, generator=g)
    td["advantage"], td["value_target"] = torch.randn(32, generator=g), torch.randn(32, generator=g)
    return actor, critic, td


def _cleanrl_terms(actor, critic, td):
    logits = actor.module[0].module(td["obs"])
    dist = torch.distributions.Categorical(logits=logits)
    new_log_prob = dist.log_prob(td["action"])
    value = critic.module(td["obs"])
    return new_log_prob, dist.entropy(), value


@pytest.mark.parametrize("cls", [ClipPPOLoss, PPOLoss, KLPENPPOLoss, A2CLoss])
def test_modules_equal_the_functional_composition(cls):
    actor, critic, td = _actor_critic()
    kwargs = {"beta": 0.0} if cls is KLPENPPOLoss else {}
    out = cls(actor, critic, entropy_coeff=0.02, loss_critic_type="l2", **kwargs)(td.clone())
    new_log_prob, entropy, value = _cleanrl_terms(actor, critic, td)
    log_ratio = new_log_prob - td["action_log_prob"]
    if cls is ClipPPOLoss:
        objective = clipped_surrogate_loss(log_ratio, td["advantage"], 0.2)[0].mean()
    elif cls is A2CLoss:
        objective = policy_gradient_loss(new_log_prob, td["advantage"]).mean()
    else:  # PPOLoss, and KLPEN with beta = 0
        objective = importance_weighted_loss(log_ratio, td["advantage"]).mean()
    torch.testing.assert_close(out["loss_objective"], objective)
    torch.testing.assert_close(out["loss_entropy"], -0.02 * entropy.mean())
    torch.testing.assert_close(out["loss_critic"], ((value - td["value_target"]) ** 2).mean())
    if cls is not A2CLoss:
        torch.testing.assert_close(out["ESS"], effective_sample_size(log_ratio))
        torch.testing.assert_close(out["kl_approx"], approx_kl(log_ratio))
