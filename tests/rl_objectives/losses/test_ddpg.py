"""DDPGLoss against a hand-written reference: critic target, actor loss, gradient routing, keys, errors.

Networks, batches and the reference Q / policy: conftest.py fixtures.
"""

import pytest
import torch
from rl_objectives.losses.ddpg import DDPGLoss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn


@pytest.mark.parametrize("delay_actor", [False, True])
@pytest.mark.parametrize("loss_function", ["l2", "l1"])
def test_losses_match_reference(
    delay_actor, loss_function, deterministic_actor_critic, transition_batch, perturb, tanh_policy, q_reference
):
    pi, q = tanh_policy, q_reference
    loss = DDPGLoss(*deterministic_actor_critic(), delay_actor=delay_actor, loss_function=loss_function)
    loss.make_value_estimator(gamma=0.8)
    perturb(loss.params_of("actor_network"))
    perturb(loss.params_of("value_network"))
    td = transition_batch()
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


def test_gradient_routing(deterministic_actor_critic, transition_batch):
    actor, critic = deterministic_actor_critic()
    loss = DDPGLoss(actor, critic)
    out = loss(transition_batch())
    actor_params = list(actor.parameters())
    critic_params = list(critic.parameters())
    g_actor = torch.autograd.grad(out["loss_actor"], actor_params + critic_params, allow_unused=True)
    assert all(g is not None and g.abs().sum() > 0 for g in g_actor[: len(actor_params)])
    assert all(g is None for g in g_actor[len(actor_params) :])  # the critic is detached in the actor loss
    g_value = torch.autograd.grad(out["loss_value"], actor_params + critic_params, allow_unused=True)
    assert all(g is None for g in g_value[: len(actor_params)])  # the target side is under no_grad
    assert all(g is not None and g.abs().sum() > 0 for g in g_value[len(actor_params) :])
    assert {n for n, _ in loss.named_buffers()} >= {"target_value_network_params.module.net.weight"}
    assert not any(n.startswith("target_actor") for n, _ in loss.named_buffers())


def test_target_critic_is_frozen_until_updated(deterministic_actor_critic, transition_batch):
    from rl_objectives import SoftUpdate

    loss = DDPGLoss(*deterministic_actor_critic())
    td = transition_batch()
    target_before = loss.params_of("value_network", target=True).clone()
    opt = torch.optim.SGD(loss.parameters(), lr=0.5)
    out = loss(td.clone())
    (out["loss_value"] + out["loss_actor"]).backward()
    opt.step()
    tgt = loss.params_of("value_network", target=True)
    assert (tgt == target_before).all()  # the optimizer never touches the targets
    assert not torch.equal(tgt["module", "net", "weight"], loss.params_of("value_network")["module", "net", "weight"])
    SoftUpdate(loss, tau=1.0)  # init_ copies the online params into the targets
    assert torch.equal(tgt["module", "net", "weight"], loss.params_of("value_network")["module", "net", "weight"])


def test_value_estimator_and_keys(deterministic_actor_critic, transition_batch):
    loss = DDPGLoss(*deterministic_actor_critic())
    loss.make_value_estimator(ValueEstimators.TD1, gamma=0.5)
    assert loss(transition_batch())["loss_value"].isfinite()
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)
    loss = DDPGLoss(*deterministic_actor_critic()).set_keys(reward=("next_info", "r"))
    assert loss.value_estimator.tensor_keys.reward == ("next_info", "r")


def test_shape_errors_name_the_keys(deterministic_actor_critic, transition_batch):
    class Wide(nn.Module):  # a [B, 1] head
        def __init__(self, critic):
            super().__init__()
            self.critic = critic

        def forward(self, observation, action):
            return self.critic(observation, action).unsqueeze(-1)

    actor, critic = deterministic_actor_critic()
    loss = DDPGLoss(
        actor, TensorDictModule(Wide(critic.module), in_keys=["observation", "action"], out_keys=["state_action_value"])
    )
    td = transition_batch()
    with pytest.raises(ValueError, match=r"'state_action_value' has shape \(6, 1\), expected \(6,\)"):
        loss(td)
    assert "td_error" not in td.keys()
    with pytest.raises(ValueError, match="loss_function"):
        DDPGLoss(*deterministic_actor_critic(), loss_function="huber")
    td = transition_batch()
    del td["next", "observation"]
    with pytest.raises(KeyError, match="observation"):
        DDPGLoss(*deterministic_actor_critic())(td)


def test_caller_entries_untouched_except_td_error(
    deterministic_actor_critic, transition_batch, assert_writes_only_td_error
):
    assert_writes_only_td_error(DDPGLoss(*deterministic_actor_critic()), transition_batch())


def test_learns_a_one_step_continuous_bandit(deterministic_actor_critic, train_on_bandit):
    # reward = -(a - 0.5)^2 at a single state, every step terminal: the actor must learn a ~= 0.5
    actor, critic = deterministic_actor_critic(n_obs=1, n_act=1, hidden=32)
    loss = DDPGLoss(actor, critic)
    train_on_bandit(
        loss, lambda n: torch.rand(n, 1) * 2 - 1, lambda a: -((a.squeeze(-1) - 0.5) ** 2), steps=300, n=64, lr=0.02
    )
    with torch.no_grad():
        action = actor(TensorDict(observation=torch.ones(1, 1), batch_size=[1]))["action"]
    assert abs(float(action) - 0.5) < 0.1


def test_compiled_forward_matches_eager(deterministic_actor_critic, transition_batch, assert_compiled_matches_eager):
    assert_compiled_matches_eager(DDPGLoss(*deterministic_actor_critic()), transition_batch())
