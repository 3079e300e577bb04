"""DreamerV3ActorLoss and DreamerV3Loss against formulas written out here: lambda-returns by a
reverse loop, the return scale by hand-computed percentiles and moving averages, the imagination
weights by a cumulative product; gradients reach the actor only (dynamics backprop and REINFORCE);
the imagined data feeds DreamerV3ValueLoss."""

from __future__ import annotations

import pytest
import torch
from rl_envs import PendulumEnv
from rl_envs.model_based import DreamerEnv, WorldModelEnv
from rl_objectives import DreamerV3ActorLoss, DreamerV3Loss, DreamerV3ModelLoss, DreamerV3ValueLoss
from rl_objectives.functional.dreamer import symexp_bins, two_hot_decode
from rl_objectives.modules import MLP, OneHotCategorical, RSSMPriorV3, TanhNormal, WorldModel, WorldModelWrapper
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from tdict.specs import Bounded, Composite, OneHot, Unbounded

B, H, STOCH, BELIEF, HIDDEN = 4, 4, 6, 16, 16
FEAT = STOCH + BELIEF


class _Scaled(torch.nn.Module):
    def __init__(self, net: torch.nn.Module, factor: float = 1.0, sigmoid: bool = False) -> None:
        super().__init__()
        self.net, self.factor, self.sigmoid = net, factor, sigmoid

    def forward(self, *xs):
        out = self.net(*xs) * self.factor
        return out.sigmoid() if self.sigmoid else out


def _setup(discrete: bool = False, critic_bins: int = 0, critic_scale: float = 1.0, continuation: bool = False):
    torch.manual_seed(0)
    n_act = 3 if discrete else 2
    prior = RSSMPriorV3(
        action_shape=(n_act,),
        hidden_dim=HIDDEN,
        rnn_hidden_dim=BELIEF,
        num_categoricals=2,
        num_classes=3,
        action_dim=n_act,
    )
    transition = TensorDictModule(prior, in_keys=["state", "belief", "action"], out_keys=["_", "state", "belief"])
    reward = TensorDictModule(MLP(FEAT, 1, depth=1, num_cells=HIDDEN), in_keys=["state", "belief"], out_keys=["reward"])
    env = DreamerEnv(WorldModelWrapper(transition, reward), prior_shape=(STOCH,), belief_shape=(BELIEF,))
    env.observation_spec = Composite(state=Unbounded((STOCH,)), belief=Unbounded((BELIEF,)))
    env.state_spec = env.observation_spec.clone()
    env.action_spec = OneHot(n_act, dtype=torch.int64) if discrete else Bounded(-1.0, 1.0, (n_act,))
    env.reward_spec = Unbounded((1,))
    if discrete:
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(
                MLP(FEAT, n_act, depth=1, num_cells=HIDDEN), in_keys=["state", "belief"], out_keys=["logits"]
            ),
            ProbabilisticTensorDictModule(
                in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical
            ),
        )
    else:
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(
                MLP(FEAT, 2 * n_act, depth=1, num_cells=HIDDEN), in_keys=["state", "belief"], out_keys=["p"]
            ),
            TensorDictModule(NormalParamExtractor(), in_keys=["p"], out_keys=["loc", "scale"]),
            ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal),
        )
    critic_net = _Scaled(MLP(FEAT, critic_bins or 1, depth=1, num_cells=HIDDEN), critic_scale)
    critic = TensorDictModule(critic_net, in_keys=["state", "belief"], out_keys=["state_value"])
    cont = None
    if continuation:
        cont = TensorDictModule(
            _Scaled(MLP(FEAT, 1, depth=1, num_cells=HIDDEN), sigmoid=True),
            in_keys=["state", "belief"],
            out_keys=["continuation"],
        )
    start = TensorDict(state=torch.randn(B, STOCH), belief=torch.randn(B, BELIEF), batch_size=[B])
    return env, actor, critic, cont, start


def _loop_lambda(reward, next_value, gamma, lmbda, cont=None):
    """R_t = r_t + gamma c_t ((1 - lmbda) v_{t+1} + lmbda R_{t+1}), R_T = v_T; tensors [B, T]."""
    cont = torch.ones_like(reward) if cont is None else cont
    out = torch.zeros_like(reward)
    nxt = next_value[:, -1]
    for t in reversed(range(reward.shape[1])):
        nxt = reward[:, t] + gamma * cont[:, t] * ((1 - lmbda) * next_value[:, t] + lmbda * nxt)
        out[:, t] = nxt
    return out


def _values(critic, td, bins=0):
    with torch.no_grad():
        v = critic.module(td["state"], td["belief"])
    return two_hot_decode(v, symexp_bins(bins)) if bins else v.squeeze(-1)


def _quantile(x: torch.Tensor, q: float) -> float:
    """Linear-interpolation quantile of a flat tensor, by hand."""
    s = sorted(x.reshape(-1).tolist())
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def test_lambda_returns_and_discount_weights_against_loops():
    env, actor, critic, cont, start = _setup(continuation=True)
    loss = DreamerV3ActorLoss(actor, critic, env, continuation_model=cont, imagination_horizon=H)
    loss.make_value_estimator(ValueEstimators.TDLambda, gamma=0.9, lmbda=0.8)
    losses, data = loss(start)
    assert cont is not None and data.batch_size == (B, H)
    reward = data["next", "reward"].squeeze(-1)
    next_value = _values(critic, data["next"])
    with torch.no_grad():
        c_next = cont.module(data["next", "state"], data["next", "belief"]).squeeze(-1)
        c_root = cont.module(data["state"], data["belief"]).squeeze(-1)
    torch.testing.assert_close(data["next", "continuation"].squeeze(-1), c_next)
    torch.testing.assert_close(data["continuation"].squeeze(-1), c_root)
    expected = _loop_lambda(reward, next_value, 0.9, 0.8, c_next)
    torch.testing.assert_close(data["lambda_target"], expected.unsqueeze(-1))
    weights = torch.ones(B)
    expected_w = []
    for t in range(H):
        weights = weights * c_root[:, t] * (0.9 if t else 1.0)
        expected_w.append(weights)
    torch.testing.assert_close(data["discount_weight"], torch.stack(expected_w, 1).unsqueeze(-1))
    torch.testing.assert_close(losses["continuation_mean"], c_next.mean())

    # no continuation model: c = 1, weights gamma^t; the public lambda_target in TorchRL's layout
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=H)
    loss.make_value_estimator(gamma=0.95, lmbda=0.5)
    losses, data = loss(start)
    expected = _loop_lambda(data["next", "reward"].squeeze(-1), _values(critic, data["next"]), 0.95, 0.5)
    torch.testing.assert_close(data["lambda_target"].squeeze(-1), expected)
    torch.testing.assert_close(data["discount_weight"].squeeze(-1), (0.95 ** torch.arange(H.__float__())).expand(B, H))
    assert float(losses["continuation_mean"]) == 1.0
    r, v, c = torch.randn(3, H, 1), torch.randn(3, H, 1), torch.rand(3, H, 1)
    torch.testing.assert_close(
        loss.lambda_target(r, v, c).squeeze(-1), _loop_lambda(r[..., 0], v[..., 0], 0.95, 0.5, c[..., 0])
    )
    # TD0 / TD1 are lambda 0 / 1
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    torch.testing.assert_close(loss.lambda_target(r, v).squeeze(-1), _loop_lambda(r[..., 0], v[..., 0], 0.9, 0.0))
    loss.make_value_estimator(ValueEstimators.TD1, gamma=0.9)
    torch.testing.assert_close(loss.lambda_target(r, v).squeeze(-1), _loop_lambda(r[..., 0], v[..., 0], 0.9, 1.0))
    # discount_loss=False: weights of 1
    _, data = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=H, discount_loss=False)(start)
    torch.testing.assert_close(data["discount_weight"], torch.ones(B, H, 1))


def test_two_hot_critic_is_decoded_through_the_symexp_bins():
    env, actor, critic, _, start = _setup(critic_bins=11)
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=3)
    _, data = loss(start)
    expected = _loop_lambda(data["next", "reward"].squeeze(-1), _values(critic, data["next"], bins=11), 0.99, 0.95)
    torch.testing.assert_close(data["lambda_target"].squeeze(-1), expected)


def test_return_normaliser_is_the_moving_average_of_the_percentile_span():
    env, actor, critic, _, start = _setup(critic_scale=100.0)
    loss = DreamerV3ActorLoss(
        actor, critic, env, imagination_horizon=H, entropy_bonus=0.0, return_normalization_rate=0.5
    )
    low = high = 0.0
    for _ in range(2):
        losses, data = loss(start)
        returns = data["lambda_target"]
        low = low + 0.5 * (_quantile(returns, 0.05) - low)
        high = high + 0.5 * (_quantile(returns, 0.95) - high)
        assert losses["return_low"].item() == pytest.approx(low, rel=1e-5)
        assert losses["return_high"].item() == pytest.approx(high, rel=1e-5)
        scale = max(1.0, high - low)
        assert scale > 1.0 and losses["return_scale"].item() == pytest.approx(scale, rel=1e-5)
        expected = -(data["discount_weight"] * returns).mean() / scale
        assert losses["loss_actor"].item() == pytest.approx(expected.item(), rel=1e-5)
    loss.eval()  # no update in eval mode
    losses, _ = loss(start)
    assert losses["return_low"].item() == pytest.approx(low, rel=1e-5)
    # without normalisation the scale is 1; a small span is never amplified (min_scale)
    losses, _ = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=2, return_normalization=False)(start)
    assert float(losses["return_scale"]) == 1.0
    env, actor, critic, _, start = _setup(critic_scale=1e-3)
    losses, _ = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=2, return_normalization_rate=1.0)(start)
    assert float(losses["return_scale"]) == 1.0


def _grads(module):
    return [p.grad for p in module.parameters()]


@pytest.mark.parametrize("discrete", [False, True])
def test_gradients_reach_the_actor_only(discrete):
    env, actor, critic, cont, start = _setup(discrete=discrete, continuation=True)
    loss = DreamerV3ActorLoss(
        actor, critic, env, continuation_model=cont, imagination_horizon=H, use_reinforce=discrete
    )
    losses, _ = loss(start)
    losses["loss_actor"].backward()
    actor_grads = [g for g in _grads(actor) if g is not None]
    assert len(actor_grads) == len(_grads(actor)) and any(g.abs().sum() > 0 for g in actor_grads)
    assert cont is not None
    for held_out in (env.world_model, critic, cont):
        assert all(g is None or not g.any() for g in _grads(held_out))
        assert all(p.requires_grad for p in held_out.parameters())  # restored after the call
    for name in ("actor_entropy", "return_scale", "return_low", "return_high", "continuation_mean"):
        assert not losses[name].requires_grad


def test_reinforce_loss_against_its_formula():
    env, actor, critic, _, start = _setup(discrete=True, critic_scale=10.0)
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=H, use_reinforce=True, entropy_bonus=0.1)
    losses, data = loss(start)
    assert data["action"].shape == (B, H, 3)
    with torch.no_grad():
        dist = actor.get_dist(data.select("state", "belief"))
        log_prob = dist.log_prob(data["action"])
        entropy = dist.entropy()
    R, w = data["lambda_target"].squeeze(-1), data["discount_weight"].squeeze(-1)
    advantage = (R - _values(critic, data)) / losses["return_scale"]
    expected = -(w * log_prob * advantage).mean() - 0.1 * (w * entropy).mean()
    torch.testing.assert_close(losses["loss_actor"], expected)
    torch.testing.assert_close(losses["actor_entropy"], (w * entropy).mean())


def test_output_keys_shapes_and_the_value_loss_reads_the_imagined_data():
    env, actor, critic, _, start = _setup()
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=H)
    losses, data = loss(start)
    assert sorted(losses.keys()) == sorted(DreamerV3ActorLoss.out_keys)
    assert all(losses[k].shape == () for k in losses.keys())
    assert losses["actor_entropy"] != 0  # Monte-Carlo entropy of the TanhNormal
    assert data["lambda_target"].shape == data["discount_weight"].shape == (B, H, 1)
    assert data["state"].shape == (B, H, STOCH) and not data["lambda_target"].requires_grad
    value_loss = DreamerV3ValueLoss(critic, actor_loss=loss)
    value_losses, _ = value_loss(data)
    assert value_losses["loss_value"].shape == ()
    sl = lambda x: torch.sign(x) * torch.log1p(x.abs())  # noqa: E731
    per_step = (sl(_values(critic, data)) - sl(data["lambda_target"].squeeze(-1))).square()
    torch.testing.assert_close(value_losses["loss_value"], (data["discount_weight"].squeeze(-1) * per_step).mean())
    value_losses["loss_value"].backward()
    assert all(p.grad is not None for p in critic.parameters())
    assert value_loss._resolved_gamma() == pytest.approx(0.99)


def test_bad_arguments_are_named():
    env, actor, critic, cont, start = _setup()
    with pytest.raises(ValueError, match="imagination_horizon"):
        DreamerV3ActorLoss(actor, critic, env, imagination_horizon=0)
    with pytest.raises(ValueError, match="entropy_bonus"):
        DreamerV3ActorLoss(actor, critic, env, entropy_bonus=-1.0)
    with pytest.raises(ValueError, match="return_normalization_quantiles"):
        DreamerV3ActorLoss(actor, critic, env, return_normalization_quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match="return_normalization_rate"):
        DreamerV3ActorLoss(actor, critic, env, return_normalization_rate=2.0)
    with pytest.raises(ValueError, match="return_normalization_min_scale"):
        DreamerV3ActorLoss(actor, critic, env, return_normalization_min_scale=0.0)
    with pytest.raises(TypeError, match="use_reinforce"):
        DreamerV3ActorLoss(actor, critic, env, use_reinforce=1)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="model_based_env"):
        DreamerV3ActorLoss(actor, critic, object())
    with pytest.raises(TypeError, match="value_model"):
        DreamerV3ActorLoss(actor, object(), env)
    with pytest.raises(TypeError, match="get_dist"):
        DreamerV3ActorLoss(critic, critic, env, use_reinforce=True)
    with pytest.warns(DeprecationWarning, match="make_value_estimator"):
        loss = DreamerV3ActorLoss(actor, critic, env, gamma=0.5, lmbda=0.25)
    assert float(loss.value_estimator.gamma) == 0.5 and float(loss.value_estimator.lmbda) == 0.25
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=2)
    with pytest.raises(KeyError, match="state"):
        loss(TensorDict(belief=start["belief"], batch_size=[B]))
    loss.set_keys(value="other_value")
    with pytest.raises(KeyError, match="other_value"):
        loss(start)
    model_loss = DreamerV3ModelLoss(torch.nn.Identity(), reward_two_hot=False)  # detach_output=True
    value_loss = DreamerV3ValueLoss(critic)
    with pytest.raises(TypeError, match="actor_loss"):
        DreamerV3Loss(model_loss, value_loss, value_loss, replay_value_loss_weight=0.0)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="detach_output=False"):
        DreamerV3Loss(model_loss, loss, value_loss)
    with pytest.raises(ValueError, match="replay_value_loss_weight"):
        DreamerV3Loss(model_loss, loss, value_loss, replay_value_loss_weight=-1.0)


class _World(torch.nn.Module):
    """A stand-in world model writing the posterior states and what DreamerV3ModelLoss reads."""

    def __init__(self) -> None:
        super().__init__()
        self.post, self.prior = torch.nn.Linear(3, FEAT), torch.nn.Linear(3, 4)
        self.reward = torch.nn.Linear(FEAT, 1)

    def forward(self, td):
        o = td["next", "pixels"]
        z = self.post(o)
        td.set(("next", "posterior_logits"), z[..., :4].unflatten(-1, (2, 2)))
        td.set(("next", "prior_logits"), self.prior(o).unflatten(-1, (2, 2)))
        td.set(("next", "state"), z[..., :STOCH])
        td.set(("next", "belief"), z[..., STOCH:])
        td.set(("next", "reco_pixels"), o * 0.5)
        td.set(("next", "reward"), self.reward(z))
        return td


def test_combined_loss_runs_the_three_losses_and_the_replay_value():
    env, actor, critic, _, _ = _setup()
    world = _World()
    actor_loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=3)
    value_loss = DreamerV3ValueLoss(critic, actor_loss=actor_loss)
    loss = DreamerV3Loss(DreamerV3ModelLoss(world, reward_two_hot=False, detach_output=False), actor_loss, value_loss)
    sample = TensorDict(
        {
            "next": {
                "pixels": torch.randn(2, 5, 3),
                "reward": torch.randn(2, 5, 1),
                "done": torch.zeros(2, 5, 1, dtype=torch.bool),
                "terminated": torch.zeros(2, 5, 1, dtype=torch.bool),
            }
        },
        [2, 5],
    )
    out = loss(sample)
    assert sorted(k for k in out.keys() if k.startswith("loss_")) == [
        "loss_actor",
        "loss_model_kl",
        "loss_model_reco",
        "loss_model_reward",
        "loss_replay_value",
        "loss_value",
    ]
    assert all(out[k].shape == () for k in out.keys() if k != "replay_context")
    torch.testing.assert_close(out["loss_replay_value"], 0.3 * out["replay_value"])
    ctx = out["replay_context"]
    assert ctx.batch_size == (2, 5) and ctx["state"].shape == (2, 5, STOCH) and not ctx["state"].requires_grad
    torch.stack([out[k] for k in out.keys() if k.startswith("loss_")]).sum().backward()
    assert world.post.weight.grad is not None and all(p.grad is not None for p in actor.parameters())
    assert ("next", "pixels") in loss.in_keys and "is_init" in loss.in_keys
    out = DreamerV3Loss(
        DreamerV3ModelLoss(world, reward_two_hot=False), actor_loss, value_loss, replay_value_loss_weight=0.0
    )(sample)
    assert float(out["loss_replay_value"]) == 0.0


def test_imagines_in_a_world_model_env_with_a_latent_only():
    torch.manual_seed(0)
    encoder = TensorDictModule(torch.nn.Linear(3, 4), in_keys=["observation"], out_keys=["latent"])
    dynamics = TensorDictModule(MLP(5, 4, depth=0), in_keys=["latent", "action"], out_keys=[("next", "latent")])
    reward = TensorDictModule(torch.nn.Linear(4, 1), in_keys=[("next", "latent")], out_keys=[("next", "reward")])
    model = WorldModel(encoder, dynamics, reward)
    env = WorldModelEnv(model, PendulumEnv(), batch_size=[B])
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(MLP(4, 2, depth=0), in_keys=["latent"], out_keys=["p"]),
        TensorDictModule(NormalParamExtractor(), in_keys=["p"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal),
    )
    critic = TensorDictModule(MLP(4, 1, depth=0), in_keys=["latent"], out_keys=["state_value"])
    loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=3)
    loss.set_keys(state="latent")
    losses, data = loss(model.encode(TensorDict(observation=torch.randn(B, 3), batch_size=[B])))
    expected = _loop_lambda(
        data["next", "reward"], critic.module(data["next", "latent"]).squeeze(-1).detach(), 0.99, 0.95
    )
    torch.testing.assert_close(data["lambda_target"].squeeze(-1), expected)
    losses["loss_actor"].backward()
    assert all(p.grad is not None for p in actor.parameters())
    assert all(p.grad is None for p in model.parameters()) and all(p.grad is None for p in critic.parameters())
