"""A2CLoss against hand-written references."""
import pytest
import torch
from rl_objectives.losses.a2c import A2CLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from torch import distributions as D
from torch import nn
from torch.nn import functional as F


class Squeeze(nn.Module):
    def forward(self, x):
        return x.squeeze(-1)


def categorical_actor(obs_dim=3, n=4, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(obs_dim, n)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(lin, in_keys=["obs"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical, return_log_prob=True),
    )
    return actor, lin


def make_critic(obs_dim=3, seed=1):
    torch.manual_seed(seed)
    lin = nn.Linear(obs_dim, 1)
    return TensorDictModule(nn.Sequential(lin, Squeeze()), in_keys=["obs"], out_keys=["state_value"]), lin


def rollout(actor, batch=(3, 5), obs_dim=3, seed=2, with_adv=True):
    g = torch.Generator().manual_seed(seed)
    td = TensorDict(
        {
            "obs": torch.randn(*batch, obs_dim, generator=g),
            "next": {
                "obs": torch.randn(*batch, obs_dim, generator=g),
                "reward": torch.randn(*batch, generator=g),
                "done": torch.rand(*batch, generator=g) < 0.2,
            },
        },
        batch_size=list(batch),
    )
    td["next", "terminated"] = td["next", "done"].clone()
    with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
        actor(td)
    if with_adv:
        td["advantage"] = torch.randn(*batch, generator=g)
        td["value_target"] = torch.randn(*batch, generator=g)
    return td


def _grads(module):
    return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]


def test_matches_a_hand_written_reference():
    actor, lin = categorical_actor()
    critic, clin = make_critic()
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


def gae_reference(value, next_value, reward, done, terminated, gamma, lmbda):
    adv = torch.zeros_like(reward)
    running = torch.zeros(reward.shape[:-1])
    for t in reversed(range(reward.shape[-1])):
        delta = reward[..., t] + gamma * next_value[..., t] * (~terminated[..., t]) - value[..., t]
        running = delta + gamma * lmbda * (~done[..., t]) * running
        adv[..., t] = running
    return adv, adv + value


def test_missing_advantage_is_estimated_without_gradients_and_input_untouched():
    actor, lin = categorical_actor()
    critic, clin = make_critic()
    td = rollout(actor, with_adv=False)
    before = {k: td.get(k) for k in td.keys(True, True)}
    loss = A2CLoss(actor, critic, gamma=0.8)
    out = loss(td)
    assert {k: td.get(k) for k in td.keys(True, True)} == before
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.8, 0.95)
    dist = D.Categorical(logits=lin(td["obs"]))
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(td["action"]) * adv).mean())
    torch.testing.assert_close(out["loss_critic"], F.smooth_l1_loss(clin(td["obs"]).squeeze(-1), target))
    out["loss_objective"].backward()
    assert clin.weight.grad is None
    loss.make_value_estimator(ValueEstimators.TD1)
    assert loss.value_type is ValueEstimators.TD1


@pytest.mark.parametrize("separate", [False, True])
def test_gradient_routing_and_separate_losses(separate):
    torch.manual_seed(0)
    trunk = TensorDictModule(nn.Linear(3, 8), in_keys=["obs"], out_keys=["hidden"])
    head = TensorDictModule(nn.Linear(8, 3), in_keys=["hidden"], out_keys=["logits"])
    vhead = TensorDictModule(nn.Sequential(nn.Linear(8, 1), Squeeze()), in_keys=["hidden"], out_keys=["state_value"])
    actor = ProbabilisticTensorDictSequential(
        trunk, head, ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical)
    )
    critic = TensorDictSequential(trunk, vhead)
    td = rollout(actor, batch=(7,))
    loss = A2CLoss(actor, critic, separate_losses=separate)
    out = loss(td)
    (out["loss_objective"] + out["loss_entropy"]).backward()
    assert all(_grads(head)) and all(_grads(trunk)) and not any(_grads(vhead))
    loss.zero_grad()
    loss(td)["loss_critic"].backward()
    assert all(_grads(vhead)) and not any(_grads(head))
    assert any(_grads(trunk)) is (not separate)


def test_reduction_none_and_optional_terms():
    actor, lin = categorical_actor()
    critic, _ = make_critic()
    td = rollout(actor, batch=(2, 3))
    out = A2CLoss(actor, critic, reduction="none")(td)
    dist = D.Categorical(logits=lin(td["obs"]))
    torch.testing.assert_close(out["loss_objective"], -(dist.log_prob(td["action"]) * td["advantage"]))
    assert out["loss_critic"].shape == (2, 3) and out["loss_entropy"].shape == (2, 3) and out["entropy"].shape == ()
    out = A2CLoss(actor, critic, critic_coeff=None, entropy_bonus=False)(td)
    assert sorted(out.keys()) == ["loss_objective"]
    out = A2CLoss(actor, None)(td)
    assert "loss_critic" not in out


def test_set_keys_and_errors():
    actor, _ = categorical_actor()
    critic, _ = make_critic()
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


def test_compiled_forward_matches_eager():
    torch.compiler.reset()
    actor, _ = categorical_actor()
    critic, _ = make_critic()
    td = rollout(actor)
    loss = A2CLoss(actor, critic)
    expected = loss(td)
    actual = torch.compile(loss, fullgraph=True, backend="eager")(td)
    assert set(actual.keys()) == set(expected.keys())
    for key in expected.keys():
        torch.testing.assert_close(actual[key], expected[key])
    torch.compiler.reset()


def test_a2c_learns_a_bandit():
    torch.manual_seed(0)
    actor, lin = categorical_actor(obs_dim=1, n=3)
    critic, _ = make_critic(obs_dim=1)
    loss = A2CLoss(actor, critic, entropy_coeff=0.0, gamma=0.0)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    rewards = torch.tensor([0.2, 0.0, 1.0])
    for _ in range(150):
        td = TensorDict({"obs": torch.ones(32, 1), "next": {"obs": torch.ones(32, 1),
                         "done": torch.ones(32, dtype=torch.bool)}}, batch_size=[32])
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            actor(td)
        td["next", "reward"] = rewards[td["action"]]
        out = loss(td)
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
        in_keys=["params"], out_keys=["cont", "disc"], distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": {"cont": D.Normal, "disc": D.Categorical}},
    )
    td = TensorDict(params=params, cont=torch.randn(n, 2), disc=torch.randint(3, (n,)), advantage=torch.randn(n), batch_size=[n])
    out = A2CLoss(actor, None, entropy_coeff=1.0)(td)
    normal, cat = D.Normal(params["cont", "loc"], params["cont", "scale"]), D.Categorical(logits=params["disc", "logits"])
    log_prob = normal.log_prob(td["cont"]).sum(-1) + cat.log_prob(td["disc"])
    torch.testing.assert_close(out["loss_objective"], -(log_prob * td["advantage"]).mean())
    torch.testing.assert_close(out["entropy"], (normal.entropy().sum(-1) + cat.entropy()).mean())
