"""TD3BCLoss against a hand-written TD3+BC reference: critics, BC-regularised actor, gradients,
targets, compile, errors.

Networks, batches and the reference Q / policy: conftest.py fixtures.
"""

import pytest
import torch
from rl_objectives import HardUpdate, TD3BCLoss, TD3Loss
from tdict.specs import Bounded

N_OBS, N_ACT, B = 3, 2, 6  # conftest's default network and batch sizes
SPEC = Bounded(-1.0, 1.0, shape=(N_ACT,))


def same(a, b):
    """Every leaf of two TensorDicts equal."""
    return all(torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True))


def smooth_l1(x):
    return torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


@pytest.mark.parametrize(("num_qvalue_nets", "alpha"), [(1, 2.5), (2, 2.5), (3, 0.7)])
def test_losses_match_reference(
    num_qvalue_nets, alpha, deterministic_actor_critic, transition_batch, perturb, tanh_policy, q_reference
):
    pi, q_all = tanh_policy, q_reference
    loss = TD3BCLoss(
        *deterministic_actor_critic(),
        action_spec=SPEC,
        num_qvalue_nets=num_qvalue_nets,
        policy_noise=0.4,
        noise_clip=0.3,
        alpha=alpha,
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("actor_network"))
    perturb(loss.params_of("qvalue_network"))
    td = transition_batch()
    actor_p, q_p = loss.params_of("actor_network").detach(), loss.params_of("qvalue_network").detach()
    t_actor, t_q = loss.params_of("actor_network", target=True), loss.params_of("qvalue_network", target=True)

    # critics: TD3's target with the target actor + clipped noise, min over the target critics
    torch.manual_seed(11)
    noise = (torch.randn(B, N_ACT) * 0.4).clamp(-0.3, 0.3)
    next_a = (pi(t_actor, td["next", "observation"]) + noise).clamp(-1.0, 1.0)
    next_v = q_all(t_q, td["next", "observation"], next_a).min(0).values
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * next_v
    pred = q_all(q_p, td["observation"], td["action"])
    expected_q = smooth_l1(pred - y).sum(0).mean()
    # actor: -lambda * Q_1(s, pi(s)) + (pi(s) - a)^2, lambda = alpha / mean |Q_1| (the paper's formula)
    a_pi = pi(actor_p, td["observation"])
    q1 = q_all(q_p, td["observation"], a_pi)[0]
    lmbd = alpha / q1.abs().mean()
    bc = ((a_pi - td["action"]) ** 2).mean()
    expected_actor = -lmbd * q1.mean() + bc

    torch.manual_seed(11)
    out = loss(td)
    assert sorted(out.keys()) == sorted(TD3BCLoss.out_keys)
    torch.testing.assert_close(out["loss_qvalue"], expected_q)
    torch.testing.assert_close(out["loss_actor"], expected_actor)
    torch.testing.assert_close(out["bc_loss"], bc)
    torch.testing.assert_close(out["lmbd"], lmbd)
    torch.testing.assert_close(out["state_action_value_actor"], q1.mean())
    torch.testing.assert_close(out["target_value"], y.mean())
    torch.testing.assert_close(td["td_error"], (pred - y).pow(2).max(0).values)


def test_alpha_zero_is_behaviour_cloning_and_critics_equal_td3(deterministic_actor_critic, transition_batch):
    td = transition_batch()
    bc_only = TD3BCLoss(*deterministic_actor_critic(), bounds=(-1.0, 1.0), alpha=0.0)
    td3 = TD3Loss(*deterministic_actor_critic(), bounds=(-1.0, 1.0))
    torch.manual_seed(0)
    out = bc_only(td.clone())
    torch.manual_seed(0)
    ref = td3(td.clone())
    torch.testing.assert_close(out["loss_qvalue"], ref["loss_qvalue"])  # the same critics' loss
    torch.testing.assert_close(out["loss_actor"], out["bc_loss"])


def test_reductions_are_per_sample(deterministic_actor_critic, transition_batch, tanh_policy, q_reference):
    td = transition_batch()
    loss = TD3BCLoss(*deterministic_actor_critic(), bounds=(-1.0, 1.0), num_qvalue_nets=1, reduction="none")
    out = loss(td.clone())
    p, q_p = loss.params_of("actor_network").detach(), loss.params_of("qvalue_network").detach()
    a_pi = tanh_policy(p, td["observation"])
    q1 = q_reference(q_p, td["observation"], a_pi)[0]  # an ensemble of one
    per_sample = -(2.5 / q1.abs().mean()) * q1 + ((a_pi - td["action"]) ** 2).mean(-1)
    assert out["loss_actor"].shape == (B,) and out["loss_qvalue"].shape == (B,)
    torch.testing.assert_close(out["loss_actor"], per_sample)
    summed = TD3BCLoss(*deterministic_actor_critic(), bounds=(-1.0, 1.0), num_qvalue_nets=1, reduction="sum")
    torch.testing.assert_close(summed(td.clone())["loss_actor"], per_sample.sum())


def test_gradient_routing_and_targets(deterministic_actor_critic, transition_batch):
    actor, critic = deterministic_actor_critic()
    loss = TD3BCLoss(actor, critic, action_spec=SPEC)
    out = loss(transition_batch())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    g = torch.autograd.grad(out["loss_actor"], a_params + q_params, allow_unused=True, retain_graph=True)
    assert all(x is not None and x.abs().sum() > 0 for x in g[: len(a_params)])
    assert all(x is None for x in g[len(a_params) :])
    g = torch.autograd.grad(out["loss_qvalue"], a_params + q_params, allow_unused=True)
    assert all(x is None for x in g[: len(a_params)])
    assert all(x is not None and x.abs().sum() > 0 for x in g[len(a_params) :])
    assert not out["lmbd"].requires_grad and not out["bc_loss"].requires_grad
    # the targets never move under the optimizer; a hard update copies the online parameters
    updater = HardUpdate(loss, value_network_update_interval=1)
    targets = {n: loss.params_of(n, target=True).clone() for n in ("actor_network", "qvalue_network")}
    opt = torch.optim.SGD(loss.parameters(), lr=1.0)
    out = loss(transition_batch())
    (out["loss_actor"] + out["loss_qvalue"]).backward()
    opt.step()
    for name, before in targets.items():
        assert same(loss.params_of(name, target=True), before)
    updater.step()
    for name in targets:
        assert same(loss.params_of(name, target=True), loss.params_of(name).detach())


def test_compiled_forward_matches_eager(deterministic_actor_critic, transition_batch, assert_compiled_matches_eager):
    loss = TD3BCLoss(*deterministic_actor_critic(), bounds=(-1.0, 1.0), num_qvalue_nets=2)
    assert_compiled_matches_eager(loss, transition_batch(), seed=3)


def test_errors(deterministic_actor_critic, transition_batch):
    networks = deterministic_actor_critic
    with pytest.raises(ValueError, match="TD3BCLoss: alpha"):
        TD3BCLoss(*networks(), bounds=(-1.0, 1.0), alpha=-1.0)
    with pytest.raises(TypeError, match="alpha must be a number"):
        TD3BCLoss(*networks(), bounds=(-1.0, 1.0), alpha=True)
    with pytest.raises(ValueError, match="TD3BCLoss: the target action is clamped"):
        TD3BCLoss(*networks())
    with pytest.raises(ValueError, match="TD3BCLoss: give action_spec or bounds, not both"):
        TD3BCLoss(*networks(), bounds=(-1.0, 1.0), action_spec=SPEC)
    with pytest.raises(TypeError, match="gamma"):
        TD3BCLoss(*networks(), bounds=(-1.0, 1.0), gamma=0.9)  # type: ignore[call-arg]  (not TorchRL's)
    loss = TD3BCLoss(*networks(), bounds=(-1.0, 1.0))
    td = transition_batch()
    td["action"] = td["action"][:, :1]
    with pytest.raises(ValueError, match="behaviour-cloning term compares them"):
        loss.actor_loss(td)
    with pytest.raises(KeyError, match="TD3BCLoss: the input misses"):
        loss(transition_batch().exclude("action"))
    with pytest.warns(DeprecationWarning, match="priority_key"):
        renamed = TD3BCLoss(*networks(), bounds=(-1.0, 1.0), priority_key="prio")
    td = transition_batch()
    renamed(td)
    assert "prio" in td.keys()
