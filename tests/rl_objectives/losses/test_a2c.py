"""A2CLoss against hand-written references (networks and rollouts: conftest.py fixtures)."""

import pytest
import torch
from rl_objectives.losses.a2c import A2CLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, TensorDictModule
from torch import distributions as D
from torch import nn
from torch.nn import functional as F


def test_matches_a_hand_written_reference(categorical_actor, state_value_critic, rollout):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor)
    out = A2CLoss(actor, critic, entropy_coeff=0.1, critic_coeff=0.5, loss_critic_type="l1")(td)
    dist = D.Categorical(logits=lin(td["obs"]))
    value = clin(td["obs"]).squeeze(-1)
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(td["action"]) * td["advantage"]).mean())
    torch.testing.assert_close(out["loss_critic"], 0.5 * (value - td["value_target"]).abs().mean())
    torch.testing.assert_close(out["loss_entropy"], -0.1 * dist.entropy().mean())
    torch.testing.assert_close(out["entropy"], dist.entropy().mean().detach())
    assert sorted(out.keys()) == ["entropy", "loss_critic", "loss_entropy", "loss_objective"]


def test_policy_gradient_is_advantage_times_score():
    """d loss / d logits = -A (onehot(a) - softmax(logits)) / B: the textbook score-function gradient."""
    n, k = 6, 3
    logits = torch.randn(n, k, requires_grad=True)
    actor = ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical)
    action = torch.randint(k, (n,))
    adv = torch.randn(n)
    td = TensorDict(logits=logits, action=action, advantage=adv, batch_size=[n])
    A2CLoss(actor, None, entropy_bonus=False)(td)["loss_objective"].backward()
    expected = -adv[:, None] * (F.one_hot(action, k) - logits.detach().softmax(-1)) / n
    torch.testing.assert_close(logits.grad, expected)


def test_missing_advantage_is_estimated_without_gradients_and_input_untouched(
    categorical_actor, state_value_critic, rollout, gae_reference
):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, with_adv=False)
    before = {k: td.get(k) for k in td.keys(True, True)}
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = A2CLoss(actor, critic, gamma=0.8)
    out = loss(td)
    assert {k: td.get(k) for k in td.keys(True, True)} == before
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(
        value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.8, 0.95
    )
    dist = D.Categorical(logits=lin(td["obs"]))
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(td["action"]) * adv).mean())
    torch.testing.assert_close(out["loss_critic"], F.smooth_l1_loss(clin(td["obs"]).squeeze(-1), target))
    out["loss_objective"].backward()
    assert clin.weight.grad is None
    loss.make_value_estimator(ValueEstimators.TD1)
    assert loss.value_type is ValueEstimators.TD1


@pytest.mark.parametrize("separate", [False, True])
def test_gradient_routing_and_separate_losses(separate, shared_trunk_nets, rollout, has_grads):
    actor, critic, trunk = shared_trunk_nets()
    head, vhead = actor[1], critic[1]
    td = rollout(actor, batch=(7,))
    loss = A2CLoss(actor, critic, separate_losses=separate)
    out = loss(td)
    (out["loss_objective"] + out["loss_entropy"]).backward()
    assert all(has_grads(head)) and all(has_grads(trunk)) and not any(has_grads(vhead))
    loss.zero_grad()
    loss(td)["loss_critic"].backward()
    assert all(has_grads(vhead)) and not any(has_grads(head))
    assert any(has_grads(trunk)) is (not separate)


def test_reduction_none_and_optional_terms(categorical_actor, state_value_critic, rollout):
    actor, lin = categorical_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(2, 3))
    out = A2CLoss(actor, critic, reduction="none")(td)
    dist = D.Categorical(logits=lin(td["obs"]))
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(td["action"]) * td["advantage"]))
    assert out["loss_critic"].shape == (2, 3) and out["loss_entropy"].shape == (2, 3) and out["entropy"].shape == ()
    out = A2CLoss(actor, critic, critic_coeff=None, entropy_bonus=False)(td)
    assert sorted(out.keys()) == ["loss_objective"]
    out = A2CLoss(actor, None)(td)
    assert "loss_critic" not in out


def test_set_keys_and_errors(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(4,))
    renamed = td.clone()
    renamed["A"] = renamed.pop("advantage")
    loss = A2CLoss(actor, critic).set_keys(advantage="A")
    torch.testing.assert_close(loss(renamed)["loss_objective"], A2CLoss(actor, critic)(td)["loss_objective"])
    with pytest.raises(ValueError, match="unknown key name"):
        loss.set_keys(bogus="x")
    bad = td.clone()
    bad["advantage"] = bad["advantage"].unsqueeze(-1)
    with pytest.raises(ValueError, match="'advantage' has shape \\(4, 1\\)"):
        A2CLoss(actor, critic)(bad)
    with pytest.raises(KeyError, match="misses the value target"):
        A2CLoss(actor, critic)(td.exclude("value_target"))
    with pytest.raises(KeyError, match="misses the action"):
        A2CLoss(actor, critic)(td.exclude("action"))
    wide = TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["state_value"])  # [B, 1] head
    with pytest.raises(ValueError, match="'state_value' has shape \\(4, 1\\)"):
        A2CLoss(actor, wide)(td)
    with pytest.raises(ValueError, match="reduction must be one of"):
        A2CLoss(actor, critic, reduction="avg")
    with pytest.raises(TypeError, match="critic_network must be"):
        A2CLoss(actor, "critic")


def test_compiled_forward_matches_eager(categorical_actor, state_value_critic, rollout, assert_compiled_matches_eager):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    assert_compiled_matches_eager(A2CLoss(actor, critic), rollout(actor))


def test_a2c_learns_a_bandit(categorical_actor, state_value_critic, bandit_rollout):
    torch.manual_seed(0)
    actor, lin = categorical_actor(obs_dim=1, n=3)
    critic, _ = state_value_critic(obs_dim=1)
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = A2CLoss(actor, critic, entropy_coeff=0.0, gamma=0.0)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    rewards = torch.tensor([0.2, 0.0, 1.0])
    for _ in range(150):
        out = loss(bandit_rollout(actor, lambda a: rewards[a], 32))
        opt.zero_grad()
        (out["loss_objective"] + out["loss_critic"]).backward()
        opt.step()
    probs = torch.softmax(lin(torch.ones(1)), -1)
    assert probs[2] > 0.9, probs


def test_composite_action_heads_sum_their_log_probs_and_entropies():
    from tdict.nn import CompositeDistribution

    n = 5
    params = TensorDict(
        cont=TensorDict(loc=torch.randn(n, 2), scale=torch.rand(n, 2) + 0.5, batch_size=[n]),
        disc=TensorDict(logits=torch.randn(n, 3), batch_size=[n]),
        batch_size=[n],
    )
    actor = ProbabilisticTensorDictModule(
        in_keys=["params"],
        out_keys=["cont", "disc"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": {"cont": D.Normal, "disc": D.Categorical}},
    )
    td = TensorDict(
        params=params, cont=torch.randn(n, 2), disc=torch.randint(3, (n,)), advantage=torch.randn(n), batch_size=[n]
    )
    out = A2CLoss(actor, None, entropy_coeff=1.0)(td)
    normal, cat = (
        D.Normal(params["cont", "loc"], params["cont", "scale"]),
        D.Categorical(logits=params["disc", "logits"]),
    )
    log_prob = normal.log_prob(td["cont"]).sum(-1) + cat.log_prob(td["disc"])
    torch.testing.assert_close(out["loss_objective"], -(log_prob * td["advantage"]).mean())
    torch.testing.assert_close(out["entropy"], (normal.entropy().sum(-1) + cat.entropy()).mean())
