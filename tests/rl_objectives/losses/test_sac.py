"""SACLoss against a hand-written reference: soft target, actor and temperature losses, gradients, errors.

Networks, batches and the reference Q: conftest.py fixtures.
"""

import functools
import math

import pytest
import torch
from rl_objectives.losses.sac import SACLoss
from tdict import TensorDict
from tdict.specs import Bounded

N_OBS, N_ACT = 3, 2  # conftest's default network sizes


@pytest.fixture
def networks(normal_actor, q_critic):
    """``(seed=0, n_obs=3, n_act=2, hidden=None) -> (actor, critic)``: a Normal policy on
    ``"observation"`` and conftest's Q-network."""

    def build(seed=0, n_obs=N_OBS, n_act=N_ACT, hidden=None):
        actor, _ = normal_actor(n_obs, n_act, seed=seed, obs_key="observation")
        return actor, q_critic(n_obs, n_act, hidden)

    return build


@pytest.fixture
def batch(transition_batch):
    """Replay batches with Gaussian stored actions."""
    return functools.partial(transition_batch, action="normal")


@pytest.mark.parametrize("alpha_init", [1.0, 0.3])
def test_losses_match_reference(alpha_init, networks, batch, perturb, q_reference):
    q_all = q_reference
    actor, critic = networks()
    loss = SACLoss(
        actor, critic, alpha_init=alpha_init, loss_function="l2", action_spec=Bounded(-1.0, 1.0, shape=(N_ACT,))
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td = batch()
    q_p = loss.params_of("qvalue_network").detach()
    t_q = loss.params_of("qvalue_network", target=True)
    alpha = alpha_init
    with torch.no_grad():
        dist_next = actor.get_dist(td["next"].copy())
        dist = actor.get_dist(td.copy())
    torch.manual_seed(7)
    a_next = dist_next.rsample()
    a = dist.rsample()
    logp_next = dist_next.log_prob(a_next).sum(-1)
    logp = dist.log_prob(a).sum(-1)
    next_v = q_all(t_q, td["next", "observation"], a_next).min(0).values - alpha * logp_next
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * next_v
    pred = q_all(q_p, td["observation"], td["action"])
    expected_q = (pred - y).pow(2).sum(0).mean()
    expected_actor = (alpha * logp - q_all(q_p, td["observation"], a).min(0).values).mean()
    expected_alpha = (-math.log(alpha_init) * (logp + (-N_ACT))).mean()

    torch.manual_seed(7)
    out = loss(td)
    assert sorted(out.keys()) == sorted(SACLoss.out_keys)
    assert torch.allclose(out["loss_qvalue"], expected_q, atol=1e-5)
    assert torch.allclose(out["loss_actor"], expected_actor, atol=1e-5)
    assert torch.allclose(out["loss_alpha"], expected_alpha, atol=1e-5)
    assert torch.allclose(out["alpha"], torch.tensor(alpha), atol=1e-6)
    assert torch.allclose(out["entropy"], -logp.mean(), atol=1e-5)
    assert torch.allclose(td["td_error"], (pred - y).abs().max(0).values, atol=1e-5)
    assert loss.target_entropy == -N_ACT


def test_gradient_routing(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic)
    out = loss(batch())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    everything = a_params + q_params + [loss.log_alpha]
    n_a, n_q = len(a_params), len(q_params)

    def grads(name):
        return torch.autograd.grad(out[name], everything, allow_unused=True, retain_graph=True)

    g = grads("loss_actor")
    assert all(x is not None and x.abs().sum() > 0 for x in g[:n_a])
    assert all(x is None for x in g[n_a:])  # critics detached, alpha detached
    g = grads("loss_qvalue")
    assert all(x is None for x in g[:n_a]) and g[-1] is None
    assert all(x is not None for x in g[n_a : n_a + n_q])
    g = grads("loss_alpha")
    assert all(x is None for x in g[:-1]) and g[-1] is not None
    for name in ("alpha", "entropy"):
        assert not out[name].requires_grad
    for t in loss.params_of("qvalue_network", target=True).values(True, True):
        assert not t.requires_grad


def test_fixed_alpha_min_max_and_target_entropy(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic, fixed_alpha=True, alpha_init=0.5, target_entropy=-0.7)
    assert "log_alpha" in dict(loss.named_buffers()) and "log_alpha" not in dict(loss.named_parameters())
    out = loss(batch())
    assert not out["loss_alpha"].requires_grad
    assert torch.allclose(out["alpha"], torch.tensor(0.5))
    assert loss.target_entropy == -0.7
    loss = SACLoss(*networks(), alpha_init=5.0, max_alpha=2.0)
    assert torch.allclose(loss(batch())["alpha"], torch.tensor(2.0))
    loss = SACLoss(*networks(), alpha_init=0.01, min_alpha=0.1)
    assert torch.allclose(loss(batch())["alpha"], torch.tensor(0.1))
    # no spec anywhere: "auto" reads the sampled action's shape on the first call
    loss = SACLoss(*networks())
    assert loss.target_entropy is None
    loss(batch())
    assert loss.target_entropy == -N_ACT


def test_errors(networks, batch):
    actor, critic = networks()
    with pytest.raises(NotImplementedError, match="SAC v1"):
        SACLoss(actor, critic, value_network=critic)
    with pytest.raises(ValueError, match="alpha_init must be > 0"):
        SACLoss(actor, critic, alpha_init=0.0)
    with pytest.raises(ValueError, match="min_alpha"):
        SACLoss(actor, critic, min_alpha=2.0, max_alpha=1.0)
    with pytest.raises(ValueError, match="target_entropy"):
        SACLoss(actor, critic, target_entropy="max")
    with pytest.raises(TypeError, match="get_dist"):
        SACLoss(critic, critic)
    loss = SACLoss(actor, critic)
    td = batch()
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    assert "td_error" not in td.keys()


def test_caller_entries_untouched_except_td_error(networks, batch, assert_writes_only_td_error):
    assert_writes_only_td_error(SACLoss(*networks()), batch())


def test_learns_a_one_step_bandit_and_tunes_alpha(networks, train_on_bandit):
    # reward = -(a - 0.5)^2, all steps terminal: the policy mean goes to ~0.5 and alpha falls
    actor, critic = networks(n_obs=1, n_act=1, hidden=32)
    loss = SACLoss(actor, critic, alpha_init=0.1, loss_function="l2", target_entropy=-3.0)
    out = train_on_bandit(
        loss, lambda n: torch.rand(n, 1) * 2 - 1, lambda a: -((a.squeeze(-1) - 0.5) ** 2), steps=300, n=64, lr=0.02
    )
    with torch.no_grad():
        loc = actor.get_dist(TensorDict(observation=torch.ones(1, 1), batch_size=[1])).mean
    assert abs(float(loc) - 0.5) < 0.15, float(loc)
    assert float(out["alpha"]) < 0.1


def test_compiled_forward_matches_eager(networks, batch, assert_compiled_matches_eager):
    assert_compiled_matches_eager(SACLoss(*networks()), batch(), seed=3)
