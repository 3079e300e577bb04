"""DreamerV3ValueLoss against its formulas written out here: symlog regression and two-hot
cross-entropy with the imagination discount, the slow (target) critic, and the replay loss against
lambda-returns computed by a loop."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rl_objectives.functional.dreamer import symexp_bins, two_hot_cross_entropy
from rl_objectives import SoftUpdate
from rl_objectives.losses.dreamer_v3_value import DreamerV3ValueLoss
from tdict import TensorDict
from tdict.nn import TensorDictModule

BINS = 11


class _Critic(torch.nn.Module):
    def __init__(self, bins: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.value = torch.nn.Linear(4, 1)
        self.logits = torch.nn.Linear(4, bins) if bins else None

    def forward(self, state):
        if self.logits is None:
            return self.value(state)
        logits = self.logits(state)
        return (torch.softmax(logits, -1) * symexp_bins(BINS)).sum(-1, keepdim=True), logits


def _symlog(x):
    return torch.sign(x) * torch.log1p(x.abs())


def _imagined(B=3, H=5):
    torch.manual_seed(1)
    return TensorDict(state=torch.randn(B, H, 4), lambda_target=torch.randn(B, H, 1) * 5, batch_size=[B, H])


def test_symlog_regression_with_the_imagination_discount():
    critic = TensorDictModule(_Critic(), in_keys=["state"], out_keys=["state_value"])
    data = _imagined()
    with torch.no_grad():
        v = critic.module(data["state"]).squeeze(-1)
    per_step = (_symlog(v) - _symlog(data["lambda_target"].squeeze(-1))).square()
    discount = 0.9 ** torch.arange(5.0)
    losses, out = DreamerV3ValueLoss(critic, gamma=0.9)(data)
    torch.testing.assert_close(losses["loss_value"], (discount * per_step).mean())
    assert float(losses["value_slow_loss"]) == 0.0 and not out["lambda_target"].requires_grad
    weight = torch.rand(3, 5, 1)
    losses, _ = DreamerV3ValueLoss(critic, reduction="sum")(data.clone().set("discount_weight", weight))
    torch.testing.assert_close(losses["loss_value"], (weight.squeeze(-1) * per_step).sum())
    losses, _ = DreamerV3ValueLoss(critic, discount_loss=False, reduction="none")(data)
    torch.testing.assert_close(losses["loss_value"], per_step)
    # the gamma of the actor loss's value estimator, when given, wins
    actor = SimpleNamespace(value_estimator=SimpleNamespace(gamma=torch.tensor(0.5)))
    losses, _ = DreamerV3ValueLoss(critic, gamma=0.9, actor_loss=actor)(data)
    torch.testing.assert_close(losses["loss_value"], (0.5 ** torch.arange(5.0) * per_step).mean())
    loss = DreamerV3ValueLoss(critic)
    loss.sync_gamma_with_actor_loss(actor)
    assert loss.gamma == 0.5


def test_two_hot_critic_and_its_errors():
    critic = TensorDictModule(_Critic(BINS), in_keys=["state"], out_keys=["state_value", "state_value_logits"])
    data = _imagined()
    with torch.no_grad():
        _, logits = critic.module(data["state"])
    per_step = two_hot_cross_entropy(logits, data["lambda_target"].squeeze(-1), symexp_bins(BINS))
    losses, _ = DreamerV3ValueLoss(critic, value_loss="two_hot", num_value_bins=BINS, discount_loss=False)(data)
    torch.testing.assert_close(losses["loss_value"], per_step.mean())
    with pytest.raises(ValueError, match="over 7 bins"):
        DreamerV3ValueLoss(critic, value_loss="two_hot", num_value_bins=7)(data)
    legacy = TensorDictModule(lambda s: critic.module(s)[1], in_keys=["state"], out_keys=["state_value"])
    with pytest.warns(DeprecationWarning, match="value_logits key"):
        DreamerV3ValueLoss(legacy, value_loss="two_hot", num_value_bins=BINS)(data)
    with pytest.raises(ValueError, match="value_loss"):
        DreamerV3ValueLoss(critic, value_loss="huber")
    with pytest.raises(ValueError, match="slow_critic_regularization"):
        DreamerV3ValueLoss(critic, slow_critic_regularization=-1.0)


def test_slow_critic_regularisation_reads_the_target_critic():
    critic = TensorDictModule(_Critic(), in_keys=["state"], out_keys=["state_value"])
    loss = DreamerV3ValueLoss(critic, slow_critic_regularization=0.5, discount_loss=False)
    SoftUpdate(loss, tau=0.02)  # the slow critic's updater (not stepped here)
    target = loss.target_value_model_params
    target.apply_(lambda t: t + 1.0)  # the slow critic drifts away from the online one
    data = _imagined()
    with torch.no_grad():
        v = critic.module(data["state"]).squeeze(-1)
        slow_v = data["state"] @ (critic.module.value.weight + 1).T + (critic.module.value.bias + 1)
    main = (_symlog(v) - _symlog(data["lambda_target"].squeeze(-1))).square()
    slow = (_symlog(v) - _symlog(slow_v.squeeze(-1))).square()
    losses, _ = loss(data)
    torch.testing.assert_close(losses["loss_value"], (main + 0.5 * slow).mean())
    torch.testing.assert_close(losses["value_slow_loss"], slow.mean())
    losses["loss_value"].backward()
    assert all(p.grad is not None for p in loss.value_model_params.values(True, True))


def test_replay_value_loss_against_lambda_returns_by_loop():
    critic = TensorDictModule(_Critic(), in_keys=["state"], out_keys=["state_value"])
    torch.manual_seed(2)
    B, T, lmbda, horizon = 2, 6, 0.8, 10.0
    gamma = 1 - 1 / horizon
    reward, bootstrap = torch.randn(B, T, 1), torch.randn(B, T)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[1, 3] = True
    replay = TensorDict(
        {
            "state": torch.randn(B, T, 4),
            "bootstrap": bootstrap,
            "next": {"reward": reward, "done": done, "terminated": done},
        },
        [B, T],
    )
    expected_target = torch.zeros(B, T - 1)
    for b in range(B):
        ret = bootstrap[b, T - 1]
        for t in reversed(range(T - 1)):  # state t: reward of t + 1, bootstrap of t + 1
            r, end, v = reward[b, t + 1, 0], bool(done[b, t + 1, 0]), bootstrap[b, t + 1]
            nxt = 0.0 if end else (1 - lmbda) * v + lmbda * ret
            ret = r + gamma * nxt
            expected_target[b, t] = ret
    with torch.no_grad():
        v = critic.module(replay["state"]).squeeze(-1)[:, :-1]
    keep = ~done.squeeze(-1)[:, :-1]
    per_step = (_symlog(v) - _symlog(expected_target)).square()
    out = DreamerV3ValueLoss(critic).replay_value_loss(replay, horizon=horizon, lmbda=lmbda)
    torch.testing.assert_close(out["loss_replay_value"], (keep * per_step).mean())
