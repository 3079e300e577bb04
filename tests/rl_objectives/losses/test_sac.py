"""SACLoss against a hand-written reference: soft target, actor and temperature losses, gradients, errors."""

import math

import pytest
import torch
from torch import nn

from rl_objectives.losses.sac import SACLoss
from tdict import TensorDict
from tdict.nn import NormalParamExtractor, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
from tdict.specs import Bounded

N_OBS, N_ACT, B = 3, 2, 6


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(N_OBS + N_ACT, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1)).squeeze(-1)


def networks(seed=0, n_obs=N_OBS, n_act=N_ACT):
    torch.manual_seed(seed)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Sequential(nn.Linear(n_obs, 2 * n_act), NormalParamExtractor()), in_keys=["observation"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal),
    )
    critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    return actor, critic


def batch(n=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, generator=g) < 0.3
    return TensorDict(
        {
            "observation": torch.randn(n, N_OBS, generator=g),
            "action": torch.randn(n, N_ACT, generator=g),
            "next": {
                "observation": torch.randn(n, N_OBS, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[n],
    )


def q_all(p, obs, act):
    w, b = p["module", "net", "weight"], p["module", "net", "bias"]
    return torch.einsum("bf,nf->nb", torch.cat([obs, act], -1), w[:, 0]) + b


def perturb(params):
    with torch.no_grad():
        for t in params.values(True, True):
            t.add_(0.3 * torch.randn_like(t))


@pytest.mark.parametrize("alpha_init", [1.0, 0.3])
def test_losses_match_reference(alpha_init):
    actor, critic = networks()
    loss = SACLoss(actor, critic, alpha_init=alpha_init, loss_function="l2", action_spec=Bounded(-1.0, 1.0, shape=(N_ACT,)))
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


def test_gradient_routing():
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
    assert all(x is not None for x in g[n_a:n_a + n_q])
    g = grads("loss_alpha")
    assert all(x is None for x in g[:-1]) and g[-1] is not None
    for name in ("alpha", "entropy"):
        assert not out[name].requires_grad
    for t in loss.params_of("qvalue_network", target=True).values(True, True):
        assert not t.requires_grad


def test_fixed_alpha_min_max_and_target_entropy():
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


def test_errors():
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


def test_caller_entries_untouched_except_td_error():
    loss = SACLoss(*networks())
    td = batch()
    before = td.clone()
    loss(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key]), key


def test_learns_a_one_step_bandit_and_tunes_alpha():
    # reward = -(a - 0.5)^2, all steps terminal: the policy mean goes to ~0.5 and alpha falls
    actor, _ = networks(n_obs=1, n_act=1)

    class QuadCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1)).squeeze(-1)

    critic = TensorDictModule(QuadCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = SACLoss(actor, critic, alpha_init=0.1, loss_function="l2", target_entropy=-3.0)
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
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        opt.step()
    with torch.no_grad():
        loc = actor.get_dist(TensorDict(observation=torch.ones(1, 1), batch_size=[1])).mean
    assert abs(float(loc) - 0.5) < 0.15, float(loc)
    assert float(out["alpha"]) < 0.1


def test_compiled_forward_matches_eager():
    loss = SACLoss(*networks())
    td = batch()
    torch.manual_seed(3)
    eager = loss(td.clone())
    torch.manual_seed(3)
    compiled = torch.compile(loss, fullgraph=True, backend="eager")(td.clone())
    for key in eager.keys():
        assert torch.allclose(compiled[key], eager[key], atol=1e-6), key
