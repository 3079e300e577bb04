"""TD3Loss against a hand-written reference: clipped double Q, target smoothing, gradients, errors.

Networks, batches and the reference Q / policy: conftest.py fixtures.
"""

import pytest
import torch
from rl_objectives.losses.td3 import TD3Loss
from tdict import TensorDict
from tdict.specs import Bounded, Composite, Unbounded

N_OBS, N_ACT, B = 3, 2, 6  # conftest's default network and batch sizes
SPEC = Bounded(-1.0, 1.0, shape=(N_ACT,))


def smooth_l1(x):
    return torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


@pytest.mark.parametrize("num_qvalue_nets", [1, 2, 3])
def test_losses_match_reference(
    num_qvalue_nets, deterministic_actor_critic, transition_batch, perturb, tanh_policy, q_reference
):
    pi, q_all = tanh_policy, q_reference
    loss = TD3Loss(
        *deterministic_actor_critic(),
        action_spec=SPEC,
        num_qvalue_nets=num_qvalue_nets,
        policy_noise=0.4,
        noise_clip=0.3,
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("actor_network"))
    perturb(loss.params_of("qvalue_network"))
    td = transition_batch()
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
    assert torch.allclose(out["state_action_value_actor"], q_actor[0].mean(), atol=1e-5)
    assert torch.allclose(td["td_error"], (pred - y).pow(2).max(0).values, atol=1e-5)


def test_target_action_is_clamped_to_the_bounds(deterministic_actor_critic, transition_batch):
    # huge noise, tiny clip range: the target action must stay in [low, high]
    loss = TD3Loss(
        *deterministic_actor_critic(), bounds=(-0.1, 0.1), policy_noise=10.0, noise_clip=5.0, num_qvalue_nets=1
    )
    seen = []
    critic = loss.qvalue_network

    def hook(module, args, output):
        seen.append(args[1].detach().clone())

    handle = critic.module.register_forward_hook(hook)
    try:
        loss(transition_batch())
    finally:
        handle.remove()
    next_actions = seen[0]  # the first critic call is on the smoothed next action
    assert next_actions.abs().max() <= 0.1 + 1e-6


def test_bounds_from_spec_and_errors(deterministic_actor_critic, transition_batch):
    networks = deterministic_actor_critic
    loss = TD3Loss(*networks(), action_spec=Composite(action=Bounded(-2.0, 3.0, shape=(N_ACT,))))
    assert torch.equal(loss.min_action, torch.full((N_ACT,), -2.0)) and torch.equal(
        loss.max_action, torch.full((N_ACT,), 3.0)
    )
    with pytest.raises(ValueError, match="give action_spec"):
        TD3Loss(*networks())
    with pytest.raises(ValueError, match="Bounded"):
        TD3Loss(*networks(), action_spec=Unbounded(shape=(N_ACT,)))
    with pytest.raises(ValueError, match="low bound is above"):
        TD3Loss(*networks(), bounds=(1.0, -1.0))
    with pytest.raises(ValueError, match="num_qvalue_nets"):
        TD3Loss(*networks(), action_spec=SPEC, num_qvalue_nets=0)
    td = transition_batch()
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        TD3Loss(*networks(), action_spec=SPEC)(td)


def test_gradient_routing_and_targets(deterministic_actor_critic, transition_batch):
    actor, critic = deterministic_actor_critic()
    loss = TD3Loss(actor, critic, action_spec=SPEC)
    out = loss(transition_batch())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    g = torch.autograd.grad(out["loss_actor"], a_params + q_params, allow_unused=True)
    assert all(x is not None and x.abs().sum() > 0 for x in g[: len(a_params)]) and all(
        x is None for x in g[len(a_params) :]
    )
    g = torch.autograd.grad(out["loss_qvalue"], a_params + q_params, allow_unused=True)
    assert all(x is None for x in g[: len(a_params)])
    # every critic of the ensemble is trained
    w_grad = g[
        len(a_params)
        + [k for k in loss.params_of("qvalue_network").keys(True, True)].index(("module", "net", "weight"))
    ]
    assert (w_grad.flatten(1).abs().sum(1) > 0).all()
    # the targets never move under the optimizer
    targets = [loss.params_of(n, target=True).clone() for n in ("actor_network", "qvalue_network")]
    opt = torch.optim.SGD(loss.parameters(), lr=1.0)
    out = loss(transition_batch())
    (out["loss_actor"] + out["loss_qvalue"]).backward()
    opt.step()
    for before, name in zip(targets, ("actor_network", "qvalue_network")):
        assert (loss.params_of(name, target=True) == before).all()


def test_learns_a_one_step_continuous_bandit(deterministic_actor_critic, train_on_bandit):
    actor, critic = deterministic_actor_critic(n_obs=1, n_act=1, hidden=32)
    loss = TD3Loss(actor, critic, bounds=(-1.0, 1.0), delay_actor=False, delay_qvalue=False, loss_function="l2")
    train_on_bandit(
        loss, lambda n: torch.rand(n, 1) * 2 - 1, lambda a: -((a.squeeze(-1) + 0.4) ** 2), steps=300, n=64, lr=0.02
    )
    with torch.no_grad():
        action = actor(TensorDict(observation=torch.ones(1, 1), batch_size=[1]))["action"]
    assert abs(float(action) + 0.4) < 0.1, float(action)


def test_compiled_forward_matches_eager(deterministic_actor_critic, transition_batch, assert_compiled_matches_eager):
    assert_compiled_matches_eager(TD3Loss(*deterministic_actor_critic(), action_spec=SPEC), transition_batch(), seed=3)
