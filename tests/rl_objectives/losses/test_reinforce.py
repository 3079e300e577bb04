"""ReinforceLoss against hand-written references (networks and rollouts: conftest.py fixtures)."""

import pytest
import torch
from rl_objectives import SoftUpdate
from rl_objectives.losses.reinforce import ReinforceLoss
from rl_objectives.value import ValueEstimators
from tdict.nn import NormalParamExtractor
from torch.nn import functional as F

BATCH = (2, 5)


def test_actor_loss_scores_the_stored_action(normal_actor, rollout, normal_dist):
    actor, lin = normal_actor()
    td = rollout(actor, batch=BATCH, with_adv=False)
    td["advantage"] = torch.randn(*BATCH)
    action = td["action"]
    log_prob = normal_dist(lin, td["obs"]).log_prob(action).sum(-1)
    out = ReinforceLoss(actor)(td)
    assert sorted(out.keys()) == ["loss_actor"]
    torch.testing.assert_close(out["loss_actor"], -(log_prob * td["advantage"]).mean())
    assert td["action"] is action  # the stored action is neither resampled nor overwritten
    out = ReinforceLoss(actor, reduction="sum")(td)
    torch.testing.assert_close(out["loss_actor"], -(log_prob * td["advantage"]).sum())


def test_default_estimator_is_gae_and_writes_advantage_and_target_into_the_input(
    normal_actor, state_value_critic, rollout, normal_dist, gae_reference, has_grads
):
    actor, lin = normal_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=BATCH, with_adv=False)
    keys_before = set(td.keys(True, True))
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = ReinforceLoss(actor, critic, gamma=0.9, loss_critic_type="l2")
    out = loss(td)
    assert loss.value_type is ValueEstimators.GAE
    assert set(td.keys(True, True)) == keys_before | {"advantage", "value_target"}
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(
        value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.9, 0.95
    )
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    log_prob = normal_dist(lin, td["obs"]).log_prob(td["action"]).sum(-1)
    torch.testing.assert_close(out["loss_actor"], -(log_prob * adv).mean())
    torch.testing.assert_close(out["loss_value"], F.mse_loss(clin(td["obs"]).squeeze(-1), target))
    out["loss_actor"].backward()
    assert all(has_grads(lin)) and not any(has_grads(clin))
    loss.zero_grad()
    out = loss(td)  # the advantage is now in the input: reused as is
    out["loss_value"].backward()
    assert all(has_grads(clin)) and not any(has_grads(lin))


def test_delay_value_bootstraps_from_the_target_critic(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, clin = state_value_critic()
    with pytest.warns(DeprecationWarning, match="gamma"):  # TorchRL's deprecated argument, still honoured
        loss = ReinforceLoss(actor, critic, delay_value=True, gamma=0.5)
    loss.make_value_estimator(ValueEstimators.TD0)
    assert loss.target_networks == ["critic_network"]
    with torch.no_grad():
        old_w, old_b = clin.weight.clone(), clin.bias.clone()
        clin.weight.add_(1.0)  # the online critic moves; the target copy does not
    td = rollout(actor, batch=BATCH, with_adv=False)
    loss(td)
    with torch.no_grad():
        value = clin(td["obs"]).squeeze(-1)
        next_value = F.linear(td["next", "obs"], old_w, old_b).squeeze(-1)
    target = td["next", "reward"] + 0.5 * next_value * (~td["next", "terminated"])
    torch.testing.assert_close(td["value_target"], target)
    torch.testing.assert_close(td["advantage"], target - value)
    SoftUpdate(loss, tau=1.0).step()
    torch.testing.assert_close(
        loss.params_of("critic_network", target=True)["module", "0", "weight"], clin.weight.detach()
    )


def test_errors(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(4,), with_adv=False)
    with pytest.raises(KeyError, match="no critic_network to estimate it"):
        ReinforceLoss(actor)(td)
    td["advantage"] = torch.randn(4, 1)
    with pytest.raises(ValueError, match="'advantage' has shape \\(4, 1\\)"):
        ReinforceLoss(actor)(td)
    with pytest.raises(ValueError, match="loss_function must be one of"):
        ReinforceLoss(actor, critic, loss_critic_type="mse")
    with pytest.raises(TypeError, match="must build a distribution"):
        ReinforceLoss(critic)


def test_compiled_forward_matches_eager(normal_actor, state_value_critic, rollout, assert_compiled_matches_eager):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=BATCH, with_adv=False)
    td["advantage"], td["value_target"] = torch.randn(*BATCH), torch.randn(*BATCH)
    assert_compiled_matches_eager(ReinforceLoss(actor, critic), td)


def test_reinforce_learns_a_bandit(normal_actor, bandit_rollout):
    """A 1-step continuous bandit: reward -(a - 0.7)^2; the policy's mean moves to 0.7."""
    torch.manual_seed(0)
    actor, lin = normal_actor(obs_dim=1, act_dim=1)
    loss = ReinforceLoss(actor)
    opt = torch.optim.Adam(loss.parameters(), lr=0.03)
    for _ in range(300):
        td = bandit_rollout(actor, lambda a: -((a.squeeze(-1) - 0.7) ** 2), 64)
        reward = td["next", "reward"]
        td["advantage"] = reward - reward.mean()
        opt.zero_grad()
        loss(td)["loss_actor"].backward()
        opt.step()
    loc = NormalParamExtractor()(lin(torch.ones(1)))[0]
    assert abs(float(loc.detach()) - 0.7) < 0.1, loc
