"""TD3Loss against a hand-written reference: clipped double Q, target smoothing, gradients, errors."""

import pytest
import torch
from torch import nn

from rl_objectives.losses.td3 import TD3Loss
from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Bounded, Composite, Unbounded

N_OBS, N_ACT, B = 3, 2, 6
SPEC = Bounded(-1.0, 1.0, shape=(N_ACT,))


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


def q_all(p, obs, act):
    """[num_nets, B] from stacked parameters."""
    w, b = p["module", "net", "weight"], p["module", "net", "bias"]  # [N, 1, F], [N, 1]
    x = torch.cat([obs, act], -1)
    return torch.einsum("bf,nf->nb", x, w[:, 0]) + b


def perturb(params):
    with torch.no_grad():
        for t in params.values(True, True):
            t.add_(0.3 * torch.randn_like(t))


def smooth_l1(x):
    return torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


@pytest.mark.parametrize("num_qvalue_nets", [1, 2, 3])
def test_losses_match_reference(num_qvalue_nets):
    loss = TD3Loss(*networks(), action_spec=SPEC, num_qvalue_nets=num_qvalue_nets, policy_noise=0.4, noise_clip=0.3)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("actor_network"))
    perturb(loss.params_of("qvalue_network"))
    td = batch()
    actor_p = loss.params_of("actor_network").detach()
    q_p = loss.params_of("qvalue_network").detach()
    t_actor = loss.params_of("actor_network", target=True)
    t_q = loss.params_of("qvalue_network", target=True)
    assert q_p["module", "net", "weight"].shape == (num_qvalue_nets, 1, N_OBS + N_ACT)

    torch.manual_seed(11)
    noise = (torch.randn(B, N_ACT) * 0.4).clamp(-0.3, 0.3)
    next_a = (pi(t_actor, td["next", "observation"]) + noise).clamp(-1.0, 1.0)
    next_v = q_all(t_q, td["next", "observation"], next_a).min(0).values
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * next_v
    pred = q_all(q_p, td["observation"], td["action"])
    expected_q = smooth_l1(pred - y).sum(0).mean()
    q_actor = q_all(q_p, td["observation"], pi(actor_p, td["observation"]))
    expected_actor = -q_actor[0].mean()

    torch.manual_seed(11)
    out = loss(td)
    assert sorted(out.keys()) == sorted(TD3Loss.out_keys)
    assert torch.allclose(out["loss_qvalue"], expected_q, atol=1e-5)
    assert torch.allclose(out["loss_actor"], expected_actor, atol=1e-5)
    assert torch.allclose(out["next_state_value"], next_v.mean(), atol=1e-5)
    assert torch.allclose(out["target_value"], y.mean(), atol=1e-5)
    assert torch.allclose(out["pred_value"], pred.mean(), atol=1e-5)
    assert torch.allclose(out["state_action_value_actor"], q_actor.mean(), atol=1e-5)
    assert torch.allclose(td["td_error"], (pred - y).pow(2).max(0).values, atol=1e-5)


def test_target_action_is_clamped_to_the_bounds():
    # huge noise, tiny clip range: the target action must stay in [low, high]
    loss = TD3Loss(*networks(), bounds=(-0.1, 0.1), policy_noise=10.0, noise_clip=5.0, num_qvalue_nets=1)
    seen = []
    critic = loss.qvalue_network

    def hook(module, args, output):
        seen.append(args[1].detach().clone())

    handle = critic.module.register_forward_hook(hook)
    try:
        loss(batch())
    finally:
        handle.remove()
    next_actions = seen[0]  # the first critic call is on the smoothed next action
    assert next_actions.abs().max() <= 0.1 + 1e-6


def test_bounds_from_spec_and_errors():
    loss = TD3Loss(*networks(), action_spec=Composite(action=Bounded(-2.0, 3.0, shape=(N_ACT,))))
    assert torch.equal(loss.min_action, torch.full((N_ACT,), -2.0)) and torch.equal(loss.max_action, torch.full((N_ACT,), 3.0))
    with pytest.raises(ValueError, match="give action_spec"):
        TD3Loss(*networks())
    with pytest.raises(ValueError, match="Bounded"):
        TD3Loss(*networks(), action_spec=Unbounded(shape=(N_ACT,)))
    with pytest.raises(ValueError, match="low bound is above"):
        TD3Loss(*networks(), bounds=(1.0, -1.0))
    with pytest.raises(ValueError, match="num_qvalue_nets"):
        TD3Loss(*networks(), action_spec=SPEC, num_qvalue_nets=0)
    td = batch()
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        TD3Loss(*networks(), action_spec=SPEC)(td)


def test_gradient_routing_and_targets():
    actor, critic = networks()
    loss = TD3Loss(actor, critic, action_spec=SPEC)
    out = loss(batch())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    g = torch.autograd.grad(out["loss_actor"], a_params + q_params, allow_unused=True)
    assert all(x is not None and x.abs().sum() > 0 for x in g[: len(a_params)]) and all(x is None for x in g[len(a_params):])
    g = torch.autograd.grad(out["loss_qvalue"], a_params + q_params, allow_unused=True)
    assert all(x is None for x in g[: len(a_params)])
    # every critic of the ensemble is trained
    w_grad = g[len(a_params) + [k for k in loss.params_of("qvalue_network").keys(True, True)].index(("module", "net", "weight"))]
    assert (w_grad.flatten(1).abs().sum(1) > 0).all()
    # the targets never move under the optimizer
    targets = [loss.params_of(n, target=True).clone() for n in ("actor_network", "qvalue_network")]
    opt = torch.optim.SGD(loss.parameters(), lr=1.0)
    out = loss(batch())
    (out["loss_actor"] + out["loss_qvalue"]).backward()
    opt.step()
    for before, name in zip(targets, ("actor_network", "qvalue_network")):
        assert (loss.params_of(name, target=True) == before).all()


def test_learns_a_one_step_continuous_bandit():
    torch.manual_seed(0)
    actor = TensorDictModule(nn.Sequential(nn.Linear(1, 1), nn.Tanh()), in_keys=["observation"], out_keys=["action"])

    class QuadCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1)).squeeze(-1)

    critic = TensorDictModule(QuadCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = TD3Loss(actor, critic, bounds=(-1.0, 1.0), delay_actor=False, delay_qvalue=False, loss_function="l2")
    opt = torch.optim.Adam(loss.parameters(), lr=0.02)
    for _ in range(300):
        a = torch.rand(64, 1) * 2 - 1
        td = TensorDict(
            {"observation": torch.ones(64, 1), "action": a,
             "next": {"observation": torch.ones(64, 1), "reward": -(a.squeeze(-1) + 0.4) ** 2,
                      "done": torch.ones(64, dtype=torch.bool), "terminated": torch.ones(64, dtype=torch.bool)}},
            batch_size=[64],
        )
        out = loss(td)
        opt.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"]).backward()
        opt.step()
    with torch.no_grad():
        action = actor(TensorDict(observation=torch.ones(1, 1), batch_size=[1]))["action"]
    assert abs(float(action) + 0.4) < 0.1, float(action)


def test_compiled_forward_matches_eager():
    loss = TD3Loss(*networks(), action_spec=SPEC)
    td = batch()
    torch.manual_seed(3)
    eager = loss(td.clone())
    torch.manual_seed(3)
    compiled = torch.compile(loss, fullgraph=True, backend="eager")(td.clone())
    for key in eager.keys():
        assert torch.allclose(compiled[key], eager[key], atol=1e-6), key
