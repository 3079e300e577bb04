"""PPOLoss, ClipPPOLoss and KLPENPPOLoss against hand-written references (networks and rollouts:
conftest.py fixtures)."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives import A2CLoss, ReinforceLoss
from rl_objectives.losses.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    TensorDictModule,
)
from torch import distributions as D
from torch import nn
from torch.nn import functional as F


class _Tanh(D.TanhTransform):
    def __eq__(self, other):  # every instance differs: torch finds no KL between two such distributions
        return self is other


class TanhNormal(D.TransformedDistribution):
    """No closed-form entropy and no registered KL: exercises the Monte-Carlo paths."""

    def __init__(self, loc, scale):
        super().__init__(D.Normal(loc, scale), [_Tanh(cache_size=1)])


@pytest.fixture
def rollout(rollout):
    """Rollouts whose actor moves after collection: the behaviour policy differs from the current one."""
    return functools.partial(rollout, perturb=True)


def test_clip_ppo_matches_a_hand_written_reference_on_a_rollout(normal_actor, state_value_critic, rollout, normal_dist):
    actor, lin = normal_actor()
    critic, clin = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1, entropy_coeff=0.05, critic_coeff=0.7, loss_critic_type="l2")
    out = loss(td)

    dist = normal_dist(lin, td["obs"])
    log_w = dist.log_prob(td["action"]).sum(-1) - td["action_log_prob"]
    ratio, adv = log_w.exp(), td["advantage"]
    gain = torch.minimum(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
    value = clin(td["obs"]).squeeze(-1)
    entropy = dist.entropy().sum(-1)
    torch.testing.assert_close(out["loss_objective"], -gain.mean())
    torch.testing.assert_close(out["loss_critic"], 0.7 * (value - td["value_target"]).pow(2).mean())
    torch.testing.assert_close(out["loss_entropy"], -0.05 * entropy.mean())
    torch.testing.assert_close(out["entropy"], entropy.mean().detach())
    torch.testing.assert_close(out["kl_approx"], (-log_w).mean().detach())
    clipped = ((ratio < 0.9) | (ratio > 1.1)).float().mean()
    assert 0 < float(clipped) < 1
    torch.testing.assert_close(out["clip_fraction"], clipped)
    lw = log_w.detach().flatten()
    ess = lw.exp().sum() ** 2 / (2 * lw).exp().sum()
    torch.testing.assert_close(out["ESS"], ess / lw.numel())
    ev = 1 - (td["value_target"] - value).pow(2).mean() / td["value_target"].var(unbiased=False)
    torch.testing.assert_close(out["explained_variance"], ev.detach())
    assert out.batch_size == torch.Size([])
    assert all(out[k].shape == () for k in out.keys())
    assert not any(out[k].requires_grad for k in out.keys() if not k.startswith("loss_"))


def test_plain_ppo_on_a_flat_categorical_batch(categorical_actor, state_value_critic, rollout):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(7,))
    out = PPOLoss(actor, critic, entropy_bonus=False)(td)
    dist = D.Categorical(logits=lin(td["obs"]))
    ratio = (dist.log_prob(td["action"]) - td["action_log_prob"]).exp()
    torch.testing.assert_close(out["loss_objective"], -(ratio * td["advantage"]).mean())
    value = clin(td["obs"]).squeeze(-1)
    torch.testing.assert_close(out["loss_critic"], F.smooth_l1_loss(value, td["value_target"]))
    assert "loss_entropy" not in out and "clip_fraction" not in out


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_reduction(reduction, categorical_actor, state_value_critic, rollout):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(2, 4))
    out = ClipPPOLoss(actor, critic, reduction=reduction)(td)
    dist = D.Categorical(logits=lin(td["obs"]))
    ratio = (dist.log_prob(td["action"]) - td["action_log_prob"]).exp()
    adv = td["advantage"]
    per_step = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    ent = -0.01 * dist.entropy()
    crit = F.smooth_l1_loss(clin(td["obs"]).squeeze(-1), td["value_target"], reduction="none")
    if reduction == "sum":
        per_step, ent, crit = per_step.sum(), ent.sum(), crit.sum()
    torch.testing.assert_close(out["loss_objective"], per_step)
    torch.testing.assert_close(out["loss_entropy"], ent)
    torch.testing.assert_close(out["loss_critic"], crit)
    assert out["entropy"].shape == ()


def test_missing_advantage_is_estimated_with_gae_without_touching_the_input(
    categorical_actor, state_value_critic, rollout, gae_reference
):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(2, 6), with_adv=False)
    before = {k: td.get(k) for k in td.keys(True, True)}
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = ClipPPOLoss(actor, critic, gamma=0.9, entropy_bonus=False)
    out = loss(td)
    # the caller's TensorDict is left as it was (TorchRL works on a shallow copy too)
    assert {k: td.get(k) for k in td.keys(True, True)}.keys() == before.keys()
    assert all(td.get(k) is v for k, v in before.items())
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(
        value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.9, 0.95
    )
    dist = D.Categorical(logits=lin(td["obs"]))
    ratio = (dist.log_prob(td["action"]) - td["action_log_prob"]).exp()
    torch.testing.assert_close(out["loss_objective"], -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean())
    torch.testing.assert_close(out["loss_critic"], F.smooth_l1_loss(clin(td["obs"]).squeeze(-1), target))
    # the estimate carries no gradient: the objective trains the actor only
    out["loss_objective"].backward()
    assert clin.weight.grad is None and lin.weight.grad is not None
    assert isinstance(loss.value_estimator, nn.Module) and loss.value_type is ValueEstimators.GAE


def td0_critic_loss(clin, td, gamma):
    """The smooth-L1 critic loss against the TD(0) target ``r + gamma * V(s')`` (0 after termination)."""
    with torch.no_grad():
        next_value = clin(td["next", "obs"]).squeeze(-1)
    target = td["next", "reward"] + gamma * next_value * (~td["next", "terminated"])
    return F.smooth_l1_loss(clin(td["obs"]).squeeze(-1), target)


def test_make_value_estimator_types_and_keys(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, clin = state_value_critic()
    loss = PPOLoss(actor, critic, entropy_bonus=False)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5)
    td = rollout(actor, batch=(2, 3), with_adv=False)
    torch.testing.assert_close(loss(td)["loss_critic"], td0_critic_loss(clin, td, gamma=0.5))
    loss.make_value_estimator("td(lambda)", lmbda=0.3)
    assert (
        loss.value_estimator.lmbda == 0.3
        if not torch.is_tensor(loss.value_estimator.lmbda)
        else float(loss.value_estimator.lmbda) == 0.3
    )
    loss.set_keys(value_target="vt")
    assert loss.value_estimator.tensor_keys.value_target == "vt"
    with pytest.raises(ValueError, match="unknown value_type"):
        loss.make_value_estimator("bogus")
    with pytest.raises(RuntimeError, match="needs a critic_network"):
        PPOLoss(actor, None).make_value_estimator()


def test_normalize_advantage_and_exclude_dims(categorical_actor, rollout):
    actor, lin = categorical_actor()
    td = rollout(actor, batch=(3, 5))
    adv = td["advantage"]
    ratio = (D.Categorical(logits=lin(td["obs"])).log_prob(td["action"]) - td["action_log_prob"]).exp()
    out = PPOLoss(actor, None, normalize_advantage=True, entropy_bonus=False)(td)
    norm = (adv - adv.mean()) / adv.std()
    torch.testing.assert_close(out["loss_objective"], -(ratio * norm).mean())
    out = PPOLoss(actor, None, normalize_advantage=True, normalize_advantage_exclude_dims=(0,), entropy_bonus=False)(td)
    norm = (adv - adv.mean(1, keepdim=True)) / adv.std(1, keepdim=True)
    torch.testing.assert_close(out["loss_objective"], -(ratio * norm).mean())
    assert "loss_critic" not in out


def test_gradient_routing(normal_actor, state_value_critic, rollout, has_grads):
    actor, lin = normal_actor()
    critic, clin = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic)
    out = loss(td)
    (out["loss_objective"] + out["loss_entropy"]).backward()
    assert all(has_grads(lin)) and not any(has_grads(clin))
    loss.zero_grad()
    loss(td)["loss_critic"].backward()
    assert all(has_grads(clin)) and not any(has_grads(lin))


@pytest.mark.parametrize("separate", [False, True])
def test_separate_losses_keeps_the_critic_loss_off_shared_parameters(separate, shared_trunk_nets, rollout, has_grads):
    actor, critic, trunk = shared_trunk_nets()
    td = rollout(actor, batch=(6,))
    loss = ClipPPOLoss(actor, critic, separate_losses=separate)
    # shared parameters are not duplicated in the loss's parameters
    assert len(list(loss.parameters())) == len({id(p) for p in list(actor.parameters()) + list(critic.parameters())})
    loss(td)["loss_critic"].backward()
    assert all(has_grads(critic[1])) and not any(has_grads(actor[1]))
    assert any(has_grads(trunk)) is (not separate)


def test_clip_value(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(10,))
    with torch.no_grad():
        td["state_value"] = clin(td["obs"]).squeeze(-1) + torch.linspace(-0.5, 0.5, 10)
    out = ClipPPOLoss(actor, critic, clip_value=0.2, loss_critic_type="l2")(td)
    value, old, target = clin(td["obs"]).squeeze(-1), td["state_value"], td["value_target"]
    clipped = old + (value - old).clamp(-0.2, 0.2)
    expected = torch.maximum((value - target).pow(2), (clipped - target).pow(2)).mean()
    torch.testing.assert_close(out["loss_critic"], expected)
    torch.testing.assert_close(out["value_clip_fraction"], ((value - old).abs() > 0.2).float().mean().detach())
    # True means "clip with clip_epsilon"
    assert float(ClipPPOLoss(actor, critic, clip_epsilon=0.3, clip_value=True).clip_value) == pytest.approx(0.3)
    del td["state_value"]
    with pytest.raises(KeyError, match="clip_value is set"):
        ClipPPOLoss(actor, critic, clip_value=0.2)(td)
    # a one-element tensor is a number; a bool means nothing outside ClipPPOLoss (TorchRL's message)
    assert float(PPOLoss(actor, critic, clip_value=torch.tensor(0.2)).clip_value) == pytest.approx(0.2)
    for bad in (True, torch.tensor([0.1, 0.2])):
        with pytest.raises(ValueError, match="clip_value must be a float or a scalar tensor"):
            PPOLoss(actor, critic, clip_value=bad)


@pytest.mark.parametrize("cls", [PPOLoss, ClipPPOLoss, KLPENPPOLoss, A2CLoss, ReinforceLoss])
@pytest.mark.parametrize("options", [{}, {"clip_value": 0.5}, {"critic_coeff": None}, {"entropy_bonus": False}])
def test_out_keys_name_the_output_and_keyword_calls_return_them(
    cls, options, normal_actor, state_value_critic, rollout
):
    if cls is ReinforceLoss:
        # REINFORCE has no entropy term and no critic coefficient
        options = {k: v for k, v in options.items() if k not in ("entropy_bonus", "critic_coeff")}
    actor, _ = normal_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(6,))
    with torch.no_grad():
        td["state_value"] = clin(td["obs"]).squeeze(-1)
    loss = cls(actor, critic, **options)
    assert set(loss.out_keys) == set(loss(td.clone()).keys())
    # the keyword spelling (TorchRL's dispatch): the in-keys joined with "_", the out-keys in order
    names = {("_".join(k) if isinstance(k, tuple) else k): k for k in loss.in_keys}
    assert {"obs", "action", "next_reward", "next_done", "next_terminated"} <= set(names)
    if cls is KLPENPPOLoss:
        assert {"loc", "scale"} <= set(names)  # the stored behaviour distribution
    assert {"advantage", "value_target"} <= set(names)  # read when given (else estimated)
    assert ("state_value" in names) == ("clip_value" in options)
    kwargs = {name: td[key] for name, key in names.items() if key in td.keys(True)}
    expected = cls(actor, critic, **options)(td.clone())  # fresh losses: KLPEN adapts beta at every call
    values = cls(actor, critic, **options)(**kwargs)
    assert len(values) == len(loss.out_keys)
    for key, value in zip(loss.out_keys, values):
        torch.testing.assert_close(value, expected[key], msg=key)
    with pytest.raises(TypeError, match=r"\['bogus'\] name no entry"):
        loss(**kwargs, bogus=td["obs"])


def test_monte_carlo_entropy_when_there_is_no_closed_form(normal_actor, rollout):
    actor, lin = normal_actor(dist=TanhNormal)
    td = rollout(actor, batch=(5,))
    td["action"] = td["action"].clamp(-0.99, 0.99)
    loss = PPOLoss(actor, None, samples_mc_entropy=7, entropy_coeff=1.0)
    torch.manual_seed(11)
    out = loss(td)
    torch.manual_seed(11)
    loc, scale = NormalParamExtractor()(lin(td["obs"]))
    dist = TanhNormal(loc, scale)
    draws = dist.rsample((7,))
    entropy = -dist.log_prob(draws).sum(-1).mean(0)
    torch.testing.assert_close(out["loss_entropy"], -entropy.mean())
    out["loss_entropy"].backward()  # reparametrised draws: the estimate has gradients
    assert lin.weight.grad is not None


def test_klpen_matches_reference_and_adapts_beta(normal_actor, state_value_critic, rollout, normal_dist):
    actor, lin = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    stored_loc = td["loc"]
    loss = KLPENPPOLoss(actor, critic, dtarg=0.001, beta=0.5, increment=3.0, decrement=0.25)
    out = loss(td)
    current = normal_dist(lin, td["obs"])
    previous = D.Normal(td["loc"], td["scale"])
    kl = D.kl_divergence(previous, current).sum(-1)
    ratio = (current.log_prob(td["action"]).sum(-1) - td["action_log_prob"]).exp()
    torch.testing.assert_close(out["loss_objective"], -(ratio * td["advantage"] - 0.5 * kl).mean())
    torch.testing.assert_close(out["kl"], kl.mean().detach())
    assert float(kl.detach().mean()) > 1.5 * 0.001
    assert float(loss.beta) == pytest.approx(1.5)  # the loss above used the old beta
    assert td["loc"] is stored_loc  # the behaviour parameters are not overwritten
    out["loss_objective"].backward()
    # a policy equal to the behaviour one: KL 0 < dtarg / 1.5, so beta shrinks
    with torch.no_grad():
        actor(td)
    loss.dtarg = 0.5
    out = loss(td)
    assert float(out["kl"]) == pytest.approx(0.0, abs=1e-6)
    assert float(loss.beta) == pytest.approx(1.5 * 0.25)
    loss.reset()
    assert float(loss.beta) == 0.5
    assert "beta" in loss.state_dict()


def test_klpen_monte_carlo_kl_without_a_registered_kl(normal_actor, rollout):
    actor, lin = normal_actor(dist=TanhNormal)
    td = rollout(actor, batch=(6,))
    td["action"] = td["action"].clamp(-0.99, 0.99)
    loss = KLPENPPOLoss(actor, None, samples_mc_kl=5, entropy_bonus=False, beta=2.0)
    torch.manual_seed(5)
    out = loss(td)
    torch.manual_seed(5)
    previous = TanhNormal(td["loc"], td["scale"])
    loc, scale = NormalParamExtractor()(lin(td["obs"]))
    current = TanhNormal(loc, scale)
    draws = previous.sample((5,))
    kl = (previous.log_prob(draws) - current.log_prob(draws)).sum(-1).mean(0)
    ratio = (current.log_prob(td["action"]).sum(-1) - td["action_log_prob"]).exp()
    torch.testing.assert_close(
        out["loss_objective"], -(ratio * td["advantage"] - 2.0 * kl).mean(), rtol=1e-4, atol=1e-4
    )


def test_klpen_needs_the_behaviour_parameters(normal_actor, rollout):
    actor, _ = normal_actor()
    td = rollout(actor)
    del td["scale"]
    with pytest.raises(KeyError, match=r"distribution parameters \[\W*scale\W*\]"):
        KLPENPPOLoss(actor, None)(td)


def test_set_keys_renames_every_entry(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(5,))
    renamed = td.clone()
    for old, new in [("advantage", "adv"), ("value_target", "ret"), ("action_log_prob", "old_lp"), ("action", "act")]:
        renamed[new] = renamed.pop(old)
    critic2 = TensorDictModule(critic.module, in_keys=["obs"], out_keys=["v"])  # the same network, another key
    loss = ClipPPOLoss(actor, critic2, advantage_key="adv", value_target_key="ret", value_key="v")
    loss.set_keys(sample_log_prob="old_lp", action="act")
    ref = ClipPPOLoss(actor, critic)(td)
    out = loss(renamed)
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        torch.testing.assert_close(out[key], ref[key])


def test_errors_name_the_problem(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(4,))
    bad = td.clone()
    bad["advantage"] = bad["advantage"].unsqueeze(-1)
    with pytest.raises(ValueError, match="'advantage' has shape \\(4, 1\\)"):
        ClipPPOLoss(actor, critic)(bad)
    bad = td.clone()
    bad["value_target"] = bad["value_target"].unsqueeze(-1)
    with pytest.raises(ValueError, match="'value_target' has shape"):
        ClipPPOLoss(actor, critic)(bad)
    bad = td.clone()
    bad["action"] = bad["action"].unsqueeze(-1)
    with pytest.raises(ValueError, match="'action' of shape \\(4, 1\\)"):
        ClipPPOLoss(actor, critic)(bad)
    with pytest.raises(KeyError, match="misses the behaviour log-prob"):
        ClipPPOLoss(actor, critic)(td.exclude("action_log_prob"))
    with pytest.raises(KeyError, match="no critic_network to estimate it"):
        ClipPPOLoss(actor, None)(td.exclude("advantage"))
    bad = td.clone()
    bad["action_log_prob"] = bad["action_log_prob"].requires_grad_()
    with pytest.raises(RuntimeError, match="requires grad"):
        ClipPPOLoss(actor, critic)(bad)
    for kwargs, match in [
        ({"clip_epsilon": 1.5}, "clip_epsilon must be in"),
        ({"reduction": "max"}, "reduction must be one of"),
        ({"loss_critic_type": "huber"}, "loss_function must be one of"),
        ({"samples_mc_entropy": 0}, "samples_mc_entropy"),
        ({"clip_value": -1.0}, "clip_value must be"),
    ]:
        with pytest.raises(ValueError, match=match):
            ClipPPOLoss(actor, critic, **kwargs)
    with pytest.raises(ValueError, match="increment must be >= 1.0"):
        KLPENPPOLoss(actor, critic, increment=0.5)
    with pytest.raises(ValueError, match="decrement must be in"):
        KLPENPPOLoss(actor, critic, decrement=2.0)
    with pytest.raises(TypeError, match="must build a distribution"):
        PPOLoss(critic, critic)


@pytest.mark.parametrize("cls", [ClipPPOLoss, KLPENPPOLoss])
def test_compiled_forward_matches_eager(cls, normal_actor, state_value_critic, rollout, assert_compiled_matches_eager):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    eager_loss = cls(actor, critic)
    compiled_loss = cls(actor, critic)  # its own instance: KLPENPPOLoss adapts beta at each call
    assert_compiled_matches_eager(eager_loss, rollout(actor), compiled_loss=compiled_loss)
    if cls is KLPENPPOLoss:
        torch.testing.assert_close(compiled_loss.beta, eager_loss.beta)


def test_clip_ppo_learns_a_bandit(categorical_actor, state_value_critic, bandit_rollout):
    """Three arms with rewards 0, 1, 0.3: the policy concentrates on arm 1."""
    torch.manual_seed(0)
    actor, lin = categorical_actor(obs_dim=1, n=3)
    critic, _ = state_value_critic(obs_dim=1)
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = ClipPPOLoss(actor, critic, entropy_coeff=0.0, critic_coeff=0.5, gamma=0.0)
    loss.make_value_estimator(ValueEstimators.GAE, lmbda=1.0)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    rewards = torch.tensor([0.0, 1.0, 0.3])
    for _ in range(40):
        td = bandit_rollout(actor, lambda a: rewards[a], 64)
        with torch.no_grad():
            loss.value_estimator(td)
        for _ in range(4):
            out = loss(td)
            opt.zero_grad()
            (out["loss_objective"] + out["loss_critic"]).backward()
            opt.step()
    probs = torch.softmax(lin(torch.ones(1)), -1)
    assert probs[1] > 0.9, probs


@settings(max_examples=40, deadline=None)
@given(
    log_w=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=8),
    adv_seed=st.integers(0, 10_000),
    eps=st.floats(0.05, 0.5),
)
def test_clipped_objective_is_the_piecewise_pessimistic_bound(log_w, adv_seed, eps):
    """Against the textbook case split: A >= 0 caps r at 1 + eps, A < 0 floors it at 1 - eps."""
    n = len(log_w)
    log_w = torch.tensor(log_w)
    adv = torch.randn(n, generator=torch.Generator().manual_seed(adv_seed))
    # a parameter-free policy: uniform over two actions, so log pi(a) = log 0.5 and r = exp(log_w)
    actor = ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical)
    td = TensorDict(
        logits=torch.zeros(n, 2),
        action=torch.zeros(n, dtype=torch.long),
        action_log_prob=math.log(0.5) - log_w,
        advantage=adv,
        batch_size=[n],
    )
    out = ClipPPOLoss(actor, None, clip_epsilon=eps, entropy_bonus=False, reduction="none")(td)
    ratio = log_w.exp()
    expected = [-(min(r, 1 + eps) * a if a >= 0 else max(r, 1 - eps) * a) for r, a in zip(ratio.tolist(), adv.tolist())]
    torch.testing.assert_close(out["loss_objective"], torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_make_value_estimator_with_an_estimator_instance_or_class(categorical_actor, state_value_critic, rollout):
    from rl_objectives.value import GAE, TD0Estimator

    actor, _ = categorical_actor()
    critic, clin = state_value_critic()
    loss = PPOLoss(actor, critic, entropy_bonus=False)
    mine = TD0Estimator(gamma=0.5, value_network=critic)
    assert loss.make_value_estimator(mine) is loss
    assert loss.value_estimator is mine and loss.value_type is TD0Estimator
    td = rollout(actor, batch=(2, 3), with_adv=False)
    torch.testing.assert_close(loss(td)["loss_critic"], td0_critic_loss(clin, td, gamma=0.5))
    # a class: built on the loss's critic, with the loss's defaults where not given, on its device
    loss.make_value_estimator(GAE, lmbda=0.5)
    estimator = loss.value_estimator
    assert type(estimator) is GAE and loss.value_type is GAE and estimator.value_network is critic
    assert estimator.gamma.item() == pytest.approx(0.99) and estimator.lmbda.item() == 0.5
    assert torch.is_tensor(estimator.gamma) and estimator.gamma.device == clin.weight.device
    with pytest.raises(ValueError, match="an estimator instance takes no keyword arguments"):
        loss.make_value_estimator(mine, gamma=0.9)


@pytest.mark.parametrize("separate", [False, True])
def test_a_critic_with_a_tensor_function_gives_what_its_call_gives(separate, normal_actor, state_value_critic, rollout):
    """The critic runs on the input tensors (no TensorDict call); a hooked critic takes its call:
    the same losses and gradients, and neither writes into the input."""
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, perturb=True)
    loss = ClipPPOLoss(actor, critic, separate_losses=separate)
    assert loss._tensor_network("critic_network", "state_value", td.batch_dims) is not None

    def run():
        loss.zero_grad()
        work = td.clone()
        out = loss(work)
        sum(out[k] for k in out.keys() if k.startswith("loss_")).backward()
        assert "state_value" not in work.keys()
        return out, {n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}

    out, grads = run()
    handle = critic.register_forward_hook(lambda *args: None)  # the TensorDict call
    try:
        assert loss._tensor_network("critic_network", "state_value", td.batch_dims) is None
        ref_out, ref_grads = run()
    finally:
        handle.remove()
    for key in ref_out.keys():
        torch.testing.assert_close(out[key], ref_out[key], rtol=0, atol=0)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=0, atol=0)
