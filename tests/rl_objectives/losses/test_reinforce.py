"""ReinforceLoss against hand-written references."""
import pytest
import torch
from rl_objectives import SoftUpdate
from rl_objectives.losses.reinforce import ReinforceLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import (
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)
from torch import distributions as D
from torch import nn
from torch.nn import functional as F


class Squeeze(nn.Module):
    def forward(self, x):
        return x.squeeze(-1)


def normal_actor(obs_dim=3, act_dim=2, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(obs_dim, 2 * act_dim)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Sequential(lin, NormalParamExtractor()), in_keys=["obs"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, return_log_prob=True),
    )
    return actor, lin


def make_critic(obs_dim=3, seed=1):
    torch.manual_seed(seed)
    lin = nn.Linear(obs_dim, 1)
    return TensorDictModule(nn.Sequential(lin, Squeeze()), in_keys=["obs"], out_keys=["state_value"]), lin


def rollout(actor, batch=(2, 5), obs_dim=3, seed=2):
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
    return td


def normal_log_prob(lin, obs, action):
    loc, scale = NormalParamExtractor()(lin(obs))
    return D.Normal(loc, scale).log_prob(action).sum(-1)


def _grads(module):
    return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]


def test_actor_loss_scores_the_stored_action():
    actor, lin = normal_actor()
    td = rollout(actor)
    td["advantage"] = torch.randn(2, 5)
    action = td["action"]
    out = ReinforceLoss(actor)(td)
    assert sorted(out.keys()) == ["loss_actor"]
    torch.testing.assert_close(out["loss_actor"], -(normal_log_prob(lin, td["obs"], action) * td["advantage"]).mean())
    assert td["action"] is action  # the stored action is neither resampled nor overwritten
    out = ReinforceLoss(actor, reduction="sum")(td)
    torch.testing.assert_close(out["loss_actor"], -(normal_log_prob(lin, td["obs"], action) * td["advantage"]).sum())


def gae_reference(value, next_value, reward, done, terminated, gamma, lmbda):
    adv = torch.zeros_like(reward)
    running = torch.zeros(reward.shape[:-1])
    for t in reversed(range(reward.shape[-1])):
        delta = reward[..., t] + gamma * next_value[..., t] * (~terminated[..., t]) - value[..., t]
        running = delta + gamma * lmbda * (~done[..., t]) * running
        adv[..., t] = running
    return adv, adv + value


def test_default_estimator_is_gae_and_writes_advantage_and_target_into_the_input():
    actor, lin = normal_actor()
    critic, clin = make_critic()
    td = rollout(actor)
    keys_before = set(td.keys(True, True))
    loss = ReinforceLoss(actor, critic, gamma=0.9, loss_critic_type="l2")
    out = loss(td)
    assert loss.value_type is ValueEstimators.GAE
    assert set(td.keys(True, True)) == keys_before | {"advantage", "value_target"}
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.9, 0.95)
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    torch.testing.assert_close(out["loss_actor"], -(normal_log_prob(lin, td["obs"], td["action"]) * adv).mean())
    torch.testing.assert_close(out["loss_value"], F.mse_loss(clin(td["obs"]).squeeze(-1), target))
    out["loss_actor"].backward()
    assert all(_grads(lin)) and not any(_grads(clin))
    loss.zero_grad()
    out = loss(td)  # the advantage is now in the input: reused as is
    out["loss_value"].backward()
    assert all(_grads(clin)) and not any(_grads(lin))


def test_delay_value_bootstraps_from_the_target_critic():
    actor, _ = normal_actor()
    critic, clin = make_critic()
    loss = ReinforceLoss(actor, critic, delay_value=True, gamma=0.5)
    loss.make_value_estimator(ValueEstimators.TD0)
    assert loss.target_networks == ["critic_network"]
    with torch.no_grad():
        old_w, old_b = clin.weight.clone(), clin.bias.clone()
        clin.weight.add_(1.0)  # the online critic moves; the target copy does not
    td = rollout(actor)
    loss(td)
    with torch.no_grad():
        value = clin(td["obs"]).squeeze(-1)
        next_value = F.linear(td["next", "obs"], old_w, old_b).squeeze(-1)
    target = td["next", "reward"] + 0.5 * next_value * (~td["next", "terminated"])
    torch.testing.assert_close(td["value_target"], target)
    torch.testing.assert_close(td["advantage"], target - value)
    SoftUpdate(loss, tau=1.0).step()
    torch.testing.assert_close(loss.params_of("critic_network", target=True)["module", "0", "weight"], clin.weight.detach())


def test_errors():
    actor, _ = normal_actor()
    critic, _ = make_critic()
    td = rollout(actor, batch=(4,))
    with pytest.raises(KeyError, match="no critic_network to estimate it"):
        ReinforceLoss(actor)(td)
    td["advantage"] = torch.randn(4, 1)
    with pytest.raises(ValueError, match="'advantage' has shape \\(4, 1\\)"):
        ReinforceLoss(actor)(td)
    with pytest.raises(ValueError, match="loss_function must be one of"):
        ReinforceLoss(actor, critic, loss_critic_type="mse")
    with pytest.raises(TypeError, match="must build a distribution"):
        ReinforceLoss(critic)


def test_compiled_forward_matches_eager():
    torch.compiler.reset()
    actor, _ = normal_actor()
    critic, _ = make_critic()
    td = rollout(actor)
    td["advantage"], td["value_target"] = torch.randn(2, 5), torch.randn(2, 5)
    loss = ReinforceLoss(actor, critic)
    expected = loss(td)
    actual = torch.compile(loss, fullgraph=True, backend="eager")(td)
    for key in expected.keys():
        torch.testing.assert_close(actual[key], expected[key])
    torch.compiler.reset()


def test_reinforce_learns_a_bandit():
    """A 1-step continuous bandit: reward -(a - 0.7)^2; the policy's mean moves to 0.7."""
    torch.manual_seed(0)
    actor, lin = normal_actor(obs_dim=1, act_dim=1)
    loss = ReinforceLoss(actor)
    opt = torch.optim.Adam(loss.parameters(), lr=0.03)
    for _ in range(300):
        td = TensorDict(obs=torch.ones(64, 1), batch_size=[64])
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            actor(td)
        reward = -(td["action"].squeeze(-1) - 0.7) ** 2
        td["advantage"] = reward - reward.mean()
        opt.zero_grad()
        loss(td)["loss_actor"].backward()
        opt.step()
    loc = NormalParamExtractor()(lin(torch.ones(1)))[0]
    assert abs(float(loc.detach()) - 0.7) < 0.1, loc
