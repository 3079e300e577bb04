"""DDPGLoss against a hand-written reference: critic target, actor loss, gradient routing, keys, errors."""

import pytest
import torch
from torch import nn

from rl_objectives.losses.ddpg import DDPGLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import TensorDictModule

N_OBS, N_ACT, B = 3, 2, 6


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(N_OBS + N_ACT, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1)).squeeze(-1)


def networks(seed=0):
    torch.manual_seed(seed)
    actor = TensorDictModule(nn.Sequential(nn.Linear(N_OBS, N_ACT), nn.Tanh()), in_keys=["observation"], out_keys=["action"])
    critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    return actor, critic


def batch(n=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, generator=g) < 0.3
    return TensorDict(
        {
            "observation": torch.randn(n, N_OBS, generator=g),
            "action": torch.rand(n, N_ACT, generator=g) * 2 - 1,
            "next": {
                "observation": torch.randn(n, N_OBS, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[n],
    )


def pi(p, obs):
    return torch.tanh(obs @ p["module", "0", "weight"].T + p["module", "0", "bias"])


def q(p, obs, act):
    return (torch.cat([obs, act], -1) @ p["module", "net", "weight"].T + p["module", "net", "bias"]).squeeze(-1)


def perturb(params):
    with torch.no_grad():
        for t in params.values(True, True):
            t.add_(0.3 * torch.randn_like(t))


@pytest.mark.parametrize("delay_actor", [False, True])
@pytest.mark.parametrize("loss_function", ["l2", "l1"])
def test_losses_match_reference(delay_actor, loss_function):
    loss = DDPGLoss(*networks(), delay_actor=delay_actor, loss_function=loss_function)
    loss.make_value_estimator(gamma=0.8)
    perturb(loss.params_of("actor_network"))
    perturb(loss.params_of("value_network"))
    td = batch()
    actor_p = loss.params_of("actor_network").detach()
    critic_p = loss.params_of("value_network").detach()
    target_actor = loss.params_of("actor_network", target=True) if delay_actor else actor_p
    target_critic = loss.params_of("value_network", target=True)
    pred = q(critic_p, td["observation"], td["action"])
    next_v = q(target_critic, td["next", "observation"], pi(target_actor, td["next", "observation"]))
    y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).float() * next_v
    err = pred - y
    expected_value = err.pow(2).mean() if loss_function == "l2" else err.abs().mean()
    expected_actor = -q(critic_p, td["observation"], pi(actor_p, td["observation"])).mean()

    out = loss(td)
    assert out.batch_size == torch.Size([])
    assert sorted(out.keys()) == sorted(DDPGLoss.out_keys)
    assert torch.allclose(out["loss_value"], expected_value, atol=1e-5)
    assert torch.allclose(out["loss_actor"], expected_actor, atol=1e-5)
    assert torch.allclose(out["pred_value"], pred.mean(), atol=1e-5)
    assert torch.allclose(out["target_value"], y.mean(), atol=1e-5)
    assert torch.allclose(out["pred_value_max"], pred.max(), atol=1e-5)
    assert torch.allclose(out["target_value_max"], y.max(), atol=1e-5)
    assert torch.allclose(td["td_error"], err.pow(2), atol=1e-5)
    for key in ("pred_value", "target_value", "pred_value_max", "target_value_max"):
        assert not out[key].requires_grad


def test_gradient_routing():
    actor, critic = networks()
    loss = DDPGLoss(actor, critic)
    out = loss(batch())
    actor_params = list(actor.parameters())
    critic_params = list(critic.parameters())
    g_actor = torch.autograd.grad(out["loss_actor"], actor_params + critic_params, allow_unused=True)
    assert all(g is not None and g.abs().sum() > 0 for g in g_actor[: len(actor_params)])
    assert all(g is None for g in g_actor[len(actor_params):])  # the critic is detached in the actor loss
    g_value = torch.autograd.grad(out["loss_value"], actor_params + critic_params, allow_unused=True)
    assert all(g is None for g in g_value[: len(actor_params)])  # the target side is under no_grad
    assert all(g is not None and g.abs().sum() > 0 for g in g_value[len(actor_params):])
    assert {n for n, _ in loss.named_buffers()} >= {"target_value_network_params.module.net.weight"}
    assert not any(n.startswith("target_actor") for n, _ in loss.named_buffers())


def test_target_critic_is_frozen_until_updated():
    from rl_objectives import SoftUpdate

    loss = DDPGLoss(*networks())
    td = batch()
    target_before = loss.params_of("value_network", target=True).clone()
    opt = torch.optim.SGD(loss.parameters(), lr=0.5)
    out = loss(td.clone())
    (out["loss_value"] + out["loss_actor"]).backward()
    opt.step()
    tgt = loss.params_of("value_network", target=True)
    assert (tgt == target_before).all()  # the optimizer never touches the targets
    assert not torch.equal(tgt["module", "net", "weight"], loss.params_of("value_network")["module", "net", "weight"])
    updater = SoftUpdate(loss, tau=1.0)  # init_ copies the online params into the targets
    assert torch.equal(tgt["module", "net", "weight"], loss.params_of("value_network")["module", "net", "weight"])


def test_value_estimator_and_keys():
    loss = DDPGLoss(*networks())
    loss.make_value_estimator(ValueEstimators.TD1, gamma=0.5)
    td = batch()
    assert loss(td)["loss_value"].isfinite()
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)
    loss = DDPGLoss(*networks()).set_keys(reward=("next_info", "r"))
    assert loss.value_estimator.tensor_keys.reward == ("next_info", "r")


def test_shape_errors_name_the_keys():
    class WideCritic(Critic):
        def forward(self, observation, action):
            return super().forward(observation, action).unsqueeze(-1)

    actor, _ = networks()
    loss = DDPGLoss(actor, TensorDictModule(WideCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"]))
    td = batch()
    with pytest.raises(ValueError, match=r"'state_action_value' has shape \(6, 1\), expected \(6,\)"):
        loss(td)
    assert "td_error" not in td.keys()
    with pytest.raises(ValueError, match="loss_function"):
        DDPGLoss(*networks(), loss_function="huber")
    td = batch()
    del td["next", "observation"]
    with pytest.raises(KeyError, match="observation"):
        DDPGLoss(*networks())(td)


def test_caller_entries_untouched_except_td_error():
    loss = DDPGLoss(*networks())
    td = batch()
    before = td.clone()
    loss(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key]), key


def test_learns_a_one_step_continuous_bandit():
    # reward = -(a - 0.5)^2 at a single state, every step terminal: the actor must learn a ~= 0.5
    torch.manual_seed(0)
    actor = TensorDictModule(nn.Sequential(nn.Linear(1, 1), nn.Tanh()), in_keys=["observation"], out_keys=["action"])

    class QuadCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1)).squeeze(-1)

    critic = TensorDictModule(QuadCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = DDPGLoss(actor, critic)
    opt = torch.optim.Adam(loss.parameters(), lr=0.02)
    for _ in range(300):
        a = torch.rand(64, 1) * 2 - 1
        td = TensorDict(
            {"observation": torch.ones(64, 1), "action": a,
             "next": {"observation": torch.ones(64, 1), "reward": -(a.squeeze(-1) - 0.5) ** 2,
                      "done": torch.ones(64, dtype=torch.bool), "terminated": torch.ones(64, dtype=torch.bool)}},
            batch_size=[64],
        )
        out = loss(td)
        opt.zero_grad()
        (out["loss_actor"] + out["loss_value"]).backward()
        opt.step()
    with torch.no_grad():
        action = actor(TensorDict(observation=torch.ones(1, 1), batch_size=[1]))["action"]
    assert abs(float(action) - 0.5) < 0.1


def test_compiled_forward_matches_eager():
    loss = DDPGLoss(*networks())
    td = batch()
    eager = loss(td.clone())
    compiled = torch.compile(loss, fullgraph=True, backend="eager")(td.clone())
    for key in eager.keys():
        assert torch.allclose(compiled[key], eager[key], atol=1e-6), key
