"""MAPPOLoss / IPPOLoss (TorchRL 0.14.1's thin ClipPPOLoss variants) and the value normalisers in the losses.

MAPPO's defaults (MultiAgentGAE, per-agent advantage standardisation, entropy 0.01) give exactly
ClipPPOLoss's numbers with those settings; ``value_norm`` puts the critic loss (and its value clip)
on the normalised scale, by hand; the ``_critic_loss_inputs`` hook is the identity elsewhere; the
ValueNorm classes plug into ``advantage_norm`` of PPO and A2C.
"""

import pytest
import torch
from rl_objectives import A2CLoss, ClipPPOLoss, IPPOLoss, MAPPOLoss, PPOLoss
from rl_objectives.losses.utils import distance_loss
from rl_objectives.modules import PercentileValueNorm, PopArtValueNorm, RunningValueNorm
from rl_objectives.value import MultiAgentGAE, ValueEstimators
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
from torch import distributions as D
from torch import nn

N, T, A, O = 3, 5, 2, 4
VALUE = ("agents", "state_value")
KEYS = {"value": VALUE}


def networks(seed=0, scale=1.0):
    torch.manual_seed(seed)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(O, 3), in_keys=[("agents", "obs")], out_keys=[("agents", "logits")]),
        ProbabilisticTensorDictModule(
            in_keys={"logits": ("agents", "logits")},
            out_keys=[("agents", "action")],
            distribution_class=D.Categorical,
            return_log_prob=True,
        ),
    )
    lin = nn.Linear(O, 1)
    with torch.no_grad():
        lin.weight.mul_(scale)
    critic = TensorDictModule(nn.Sequential(lin, nn.Flatten(-2)), in_keys=[("agents", "obs")], out_keys=[VALUE])
    return actor, critic


def rollout(actor, seed=1, reward_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(N, T + 1, A, O, generator=g)
    done = torch.zeros(N, T, dtype=torch.bool)
    done[:, -1] = True
    td = TensorDict(
        {
            "agents": TensorDict(obs=obs[:, :-1], batch_size=[N, T, A]),
            "next": {
                "agents": TensorDict(obs=obs[:, 1:], batch_size=[N, T, A]),
                "reward": torch.randn(N, T, generator=g) * reward_scale + reward_scale,
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[N, T],
    )
    with torch.no_grad():
        actor(td)
    return td


def test_defaults_are_torchrls_multi_agent_ones():
    actor, critic = networks()
    for cls in (MAPPOLoss, IPPOLoss):
        loss = cls(actor, critic).set_keys(**KEYS)
        assert isinstance(loss, ClipPPOLoss) and issubclass(IPPOLoss, MAPPOLoss)
        assert loss.default_value_estimator is ValueEstimators.MAGAE
        assert type(loss.value_estimator) is MultiAgentGAE
        assert (loss.value_estimator.gamma, loss.value_estimator.lmbda) == (0.99, 0.95)
        assert loss.normalize_advantage and loss.normalize_advantage_exclude_dims == (-1,)
        assert float(loss.entropy_coeff) == pytest.approx(0.01) and float(loss.clip_epsilon) == pytest.approx(0.2)
        assert loss.value_norm is None


@pytest.mark.parametrize("cls", [MAPPOLoss, IPPOLoss])
def test_without_value_norm_it_is_clip_ppo_with_those_settings(cls):
    actor, critic = networks()
    td = rollout(actor)
    loss = cls(actor, critic, clip_value=0.5).set_keys(**KEYS)
    ref = ClipPPOLoss(
        actor,
        critic,
        entropy_coeff=0.01,
        normalize_advantage=True,
        normalize_advantage_exclude_dims=(-1,),
        clip_value=0.5,
    ).set_keys(**KEYS)
    ref.make_value_estimator(ValueEstimators.MAGAE)
    td["agents", "state_value"] = critic(td.copy())["agents", "state_value"].detach() + 0.3  # for the value clip
    out, expected = loss(td.clone()), ref(td.clone())
    assert set(out.keys()) == set(expected.keys())
    for key in expected.keys():
        torch.testing.assert_close(out[key], expected[key], rtol=0, atol=0)


@pytest.mark.parametrize("norm_cls", [RunningValueNorm, PopArtValueNorm])
@pytest.mark.parametrize("clip_value", [None, 0.1])
def test_value_norm_puts_the_critic_loss_on_the_normalised_scale(norm_cls, clip_value):
    actor, critic = networks()
    td = rollout(actor, reward_scale=50.0)  # large returns: the raw critic loss would be huge
    loss = MAPPOLoss(actor, critic, value_norm=norm_cls(), loss_critic_type="l2", clip_value=clip_value)
    loss.set_keys(**KEYS)
    loss.value_estimator(td)  # precomputed advantage and value target
    stored = td["agents", "state_value"].clone()
    out = loss(td.clone())

    # by hand: a fresh normaliser updated with the value target, then the distance of normalised values
    norm = norm_cls()
    target = td["value_target"]
    norm.update(target)
    value = critic(td.copy())["agents", "state_value"]
    v, z = norm.normalize(value), norm.normalize(target)
    expected = distance_loss(v, z, "l2")
    if clip_value is not None:  # the clip radius is in normalised units, around the normalised stored value
        old = norm.normalize(stored)
        clipped = old + (v - old).clamp(-clip_value, clip_value)
        expected = torch.maximum(expected, distance_loss(clipped, z, "l2"))
    torch.testing.assert_close(out["loss_critic"], expected.mean())
    explained = 1 - (z - v).pow(2).mean() / (z - z.mean()).pow(2).mean()
    torch.testing.assert_close(out["explained_variance"], explained.detach())
    assert float(out["loss_critic"].detach()) < 10  # the raw targets are ~50-250
    # the objective is untouched by value_norm
    plain = MAPPOLoss(actor, critic, loss_critic_type="l2", clip_value=clip_value).set_keys(**KEYS)(td.clone())
    torch.testing.assert_close(out["loss_objective"], plain["loss_objective"], rtol=0, atol=0)
    assert float(plain["loss_critic"].detach()) > 100 * float(out["loss_critic"].detach())


def test_value_norm_updates_every_call_is_registered_and_lets_gradients_reach_the_critic():
    actor, critic = networks()
    td = rollout(actor, reward_scale=10.0)
    norm = RunningValueNorm()
    loss = IPPOLoss(actor, critic, value_norm=norm).set_keys(**KEYS)
    assert loss.value_norm is norm and "value_norm.count" in loss.state_dict()
    out = loss(td.clone())
    assert float(norm.count) == N * T * A
    loss(td.clone())
    assert float(norm.count) == 2 * N * T * A
    critic_weight = next(critic.parameters())  # the linear layer's weight
    out["loss_critic"].backward()
    assert critic_weight.grad is not None and bool(critic_weight.grad.abs().sum() > 0)


def test_value_norm_with_the_agents_view():
    """The agents' view (batch ``[N, T, A]``) with plain GAE: the same critic loss as the root layout."""
    actor, critic = networks()
    td = rollout(actor, reward_scale=5.0)
    loss = MAPPOLoss(actor, critic, value_norm=PopArtValueNorm(beta=0.9)).set_keys(**KEYS)
    loss.value_estimator(td)
    out = loss(td.clone())
    view = td.get("agents").copy()
    view.set("value_target", td["value_target"])
    view.set("advantage", td["advantage"])
    flat_critic = TensorDictModule(critic.module, in_keys=["obs"], out_keys=["state_value"])
    flat_actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor[0].module, in_keys=["obs"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical, return_log_prob=True
        ),
    )
    flat = MAPPOLoss(flat_actor, flat_critic, value_norm=PopArtValueNorm(beta=0.9))(view)
    torch.testing.assert_close(flat["loss_critic"], out["loss_critic"])
    torch.testing.assert_close(flat["loss_objective"], out["loss_objective"])


def test_bad_value_norm_raises():
    actor, critic = networks()
    with pytest.raises(TypeError, match="value_norm must be a value normaliser"):
        MAPPOLoss(actor, critic, value_norm=object())
    with pytest.raises(TypeError, match="value_norm must be a value normaliser"):
        IPPOLoss(actor, critic, value_norm=nn.Linear(1, 1))
    with pytest.raises(ValueError, match="normalize_advantage=True and advantage_norm exclude each other"):
        MAPPOLoss(actor, critic, advantage_norm=PercentileValueNorm())  # normalize_advantage defaults to True


# ---------------------------------------------------------------------------- the hook in the other losses
@pytest.mark.parametrize("cls", [A2CLoss, PPOLoss])
def test_critic_loss_inputs_hook_is_applied_before_the_distance(cls):
    class Halved(cls):
        def _critic_loss_inputs(self, target_return, state_value, old_state_value):
            return target_return / 2, state_value / 2, old_state_value

    actor, critic = networks()
    td = rollout(actor)
    base = cls(actor, critic, loss_critic_type="l2").set_keys(**KEYS)
    base.make_value_estimator(ValueEstimators.MAGAE)
    halved = Halved(actor, critic, loss_critic_type="l2").set_keys(**KEYS)
    halved.make_value_estimator(ValueEstimators.MAGAE)
    torch.testing.assert_close(halved(td.clone())["loss_critic"], base(td.clone())["loss_critic"] / 4)


# ---------------------------------------------------------------------------- advantage_norm with ValueNorm classes
@pytest.mark.parametrize("cls", [A2CLoss, PPOLoss])
@pytest.mark.parametrize("norm_cls", [PercentileValueNorm, RunningValueNorm, PopArtValueNorm])
def test_value_norms_scale_the_advantage_of_batch_shaped_losses(cls, norm_cls):
    actor, critic = networks()
    td = rollout(actor, reward_scale=20.0)
    norm = norm_cls()
    loss = cls(actor, critic, advantage_norm=norm, entropy_bonus=False, critic_coeff=None).set_keys(**KEYS)
    loss.make_value_estimator(ValueEstimators.MAGAE)
    out = loss(td.clone())  # estimates the advantage: the statistics take the fresh value targets
    ref = cls(actor, critic, entropy_bonus=False, critic_coeff=None).set_keys(**KEYS)
    ref.make_value_estimator(ValueEstimators.MAGAE)
    est = td.clone()
    ref.value_estimator(est)
    fresh = norm_cls()
    fresh.update(est["value_target"])
    torch.testing.assert_close(norm.scale(), fresh.scale())
    scaled = est.clone()
    scaled["advantage"] = est["advantage"] / fresh.scale()
    torch.testing.assert_close(out["loss_objective"], ref(scaled)["loss_objective"])
