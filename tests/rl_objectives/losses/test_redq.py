"""REDQLoss against a hand-written reference: the random target subset, the ensemble-mean actor loss,
gradients, targets, keys, errors, a bandit and compile."""

import pytest
import torch
from rl_objectives.losses.redq import REDQLoss
from tdict.nn import TensorDictModule
from tdict.specs import Bounded
from torch import nn

N_OBS, N_ACT, B = 3, 2, 6


@pytest.fixture
def nets(normal_actor, q_critic):
    def build(seed=0, n_obs=N_OBS, n_act=N_ACT, hidden=None):
        actor, lin = normal_actor(obs_dim=n_obs, act_dim=n_act, seed=seed, obs_key="observation")
        return actor, q_critic(n_obs, n_act, hidden), lin

    return build


def smooth_l1(x):
    return torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


@pytest.mark.parametrize("seed", [3, 7])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_losses_match_reference(seed, loss_function, nets, transition_batch, q_reference, normal_dist, perturb):
    actor, critic, lin = nets()
    loss = REDQLoss(
        actor,
        critic,
        num_qvalue_nets=5,
        sub_sample_len=2,
        alpha_init=0.5,
        loss_function=loss_function,
        action_spec=Bounded(-1.0, 1.0, shape=(N_ACT,)),
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td = transition_batch(n=B)
    q_p = loss.params_of("qvalue_network").detach()
    t_q = loss.params_of("qvalue_network", target=True)
    alpha = 0.5

    torch.manual_seed(seed)
    subset = torch.randperm(5)[:2].sort().values
    with torch.no_grad():
        dist = normal_dist(lin, td["observation"])
        dist_next = normal_dist(lin, td["next", "observation"])
    a = dist.rsample()
    a_next = dist_next.rsample()
    logp, logp_next = dist.log_prob(a).sum(-1), dist_next.log_prob(a_next).sum(-1)
    next_v = q_reference(t_q[subset], td["next", "observation"], a_next).min(0).values - alpha * logp_next
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * next_v
    pred = q_reference(q_p, td["observation"], td["action"])
    per = (pred - y).pow(2) if loss_function == "l2" else smooth_l1(pred - y)
    q_actor = q_reference(q_p, td["observation"], a)
    log_pi = torch.stack([logp, logp_next])

    torch.manual_seed(seed)
    out = loss(td)
    assert sorted(out.keys()) == sorted(REDQLoss.out_keys) and out.batch_size == torch.Size([])
    torch.testing.assert_close(out["loss_qvalue"], per.mean(0).mean())
    torch.testing.assert_close(out["loss_actor"], (alpha * logp - q_actor.mean(0)).mean())
    torch.testing.assert_close(out["loss_alpha"], (-alpha * (log_pi + -N_ACT)).mean())
    torch.testing.assert_close(out["entropy"], -log_pi.mean())
    torch.testing.assert_close(out["state_action_value_actor"], q_actor.mean())
    torch.testing.assert_close(out["action_log_prob_actor"], logp.mean())
    torch.testing.assert_close(out["next.state_value"], next_v.mean())
    torch.testing.assert_close(out["target_value"], y.mean())
    torch.testing.assert_close(td["td_error"], (pred - y).pow(2).max(0).values)
    for key in out.keys():
        assert out[key].shape == torch.Size([])
        if not key.startswith("loss"):
            assert not out[key].requires_grad


def test_subset_varies_and_uses_every_target(nets, transition_batch):
    # target critics that return their own index: the next value's Q part is the subset's min index
    actor, critic, _ = nets()
    loss = REDQLoss(
        actor,
        critic,
        num_qvalue_nets=4,
        sub_sample_len=2,
        fixed_alpha=True,
        alpha_init=1.0,
        min_alpha=None,
        max_alpha=None,
    )
    targets = loss.params_of("qvalue_network", target=True)
    targets["module", "net", "weight"].zero_()
    targets["module", "net", "bias"].copy_(torch.arange(4.0).unsqueeze(-1))
    td = transition_batch(n=B)
    seen = set()
    for seed in range(8):
        torch.manual_seed(seed)
        subset_min = float(torch.randperm(4)[:2].min())
        torch.manual_seed(seed)
        out = loss(td.clone())
        # next.state_value = subset min - mean log pi(a'|s') (alpha = 1); entropy averages both log-probs
        mean_next_log_prob = -2 * out["entropy"] - out["action_log_prob_actor"]
        assert float(out["next.state_value"] + mean_next_log_prob) == pytest.approx(subset_min, abs=1e-4)
        seen.add(subset_min)
    assert len(seen) >= 2


def test_gradient_routing_and_targets(nets, transition_batch, perturb):
    actor, critic, _ = nets()
    loss = REDQLoss(actor, critic, num_qvalue_nets=4)
    td = transition_batch(n=B)
    out = loss(td.clone())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    everything = a_params + q_params + [loss.log_alpha]
    n_a = len(a_params)

    def grads(name):
        return torch.autograd.grad(out[name], everything, allow_unused=True, retain_graph=True)

    g = grads("loss_actor")
    assert all(x is not None and x.abs().sum() > 0 for x in g[:n_a]) and all(x is None for x in g[n_a:])
    g = grads("loss_qvalue")
    assert all(x is None for x in g[:n_a]) and g[-1] is None and all(x is not None for x in g[n_a:-1])
    g = grads("loss_alpha")
    assert all(x is None for x in g[:-1]) and g[-1] is not None
    # the targets feed the bootstrap only
    torch.manual_seed(0)
    before = loss(td.clone())
    perturb(loss.params_of("qvalue_network", target=True))
    torch.manual_seed(0)
    after = loss(td.clone())
    assert not torch.allclose(before["loss_qvalue"], after["loss_qvalue"])
    torch.testing.assert_close(before["loss_actor"], after["loss_actor"])
    assert not any(name.startswith("target_") for name, _ in loss.named_parameters())


def test_delay_actor_samples_the_next_action_with_the_target_actor(nets, transition_batch, perturb):
    actor, critic, _ = nets()
    loss = REDQLoss(actor, critic, num_qvalue_nets=3, delay_actor=True)
    assert sorted(loss.target_networks) == ["actor_network", "qvalue_network"]
    td = transition_batch(n=B)
    torch.manual_seed(0)
    before = loss(td.clone())
    perturb(loss.params_of("actor_network", target=True))
    torch.manual_seed(0)
    after = loss(td.clone())
    assert not torch.allclose(before["next.state_value"], after["next.state_value"])
    torch.testing.assert_close(before["loss_actor"], after["loss_actor"])


def test_set_keys(nets, transition_batch):
    td = transition_batch(n=B)
    reference = REDQLoss(*nets()[:2], num_qvalue_nets=3)
    loss = REDQLoss(*nets()[:2], num_qvalue_nets=3).set_keys(reward="r", terminated="t", priority="prio")
    torch.manual_seed(0)
    expected = reference(td.clone())
    renamed = td.clone()
    renamed["next"].rename_key_("reward", "r")
    renamed["next"].rename_key_("terminated", "t")
    torch.manual_seed(0)
    out = loss(renamed)
    for key in expected.keys():
        torch.testing.assert_close(out[key], expected[key])
    assert "prio" in renamed.keys()


def test_target_entropy_inferred_and_alpha_bounds(nets, transition_batch):
    loss = REDQLoss(*nets()[:2], num_qvalue_nets=3)
    assert loss.target_entropy is None
    loss(transition_batch(n=B))
    assert loss.target_entropy == -N_ACT
    out = REDQLoss(*nets()[:2], num_qvalue_nets=3, alpha_init=50.0)(transition_batch(n=B))
    torch.testing.assert_close(out["alpha"], torch.tensor(10.0))  # TorchRL's default max_alpha
    loss = REDQLoss(*nets()[:2], num_qvalue_nets=3, fixed_alpha=True, target_entropy=-0.5)
    assert "log_alpha" in dict(loss.named_buffers()) and loss.target_entropy == -0.5


def test_errors(nets, transition_batch):
    actor, critic, _ = nets()
    with pytest.raises(ValueError, match="sub_sample_len"):
        REDQLoss(actor, critic, num_qvalue_nets=2, sub_sample_len=0)
    # a subset as large as the ensemble is lowered to a strict one (TorchRL's rule)
    assert REDQLoss(actor, critic, num_qvalue_nets=3, sub_sample_len=5).sub_sample_len == 2
    assert REDQLoss(actor, critic, num_qvalue_nets=1).sub_sample_len == 1
    with pytest.raises(ValueError, match="num_qvalue_nets"):
        REDQLoss(actor, critic, num_qvalue_nets=0)
    with pytest.raises(ValueError, match="loss_function"):
        REDQLoss(actor, critic, loss_function="huber")
    with pytest.raises(TypeError, match="get_dist"):
        REDQLoss(critic, critic)
    loss = REDQLoss(actor, critic, num_qvalue_nets=3)
    td = transition_batch(n=B)
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    assert "td_error" not in td.keys()
    td = transition_batch(n=B)
    del td["action"]
    with pytest.raises(KeyError, match="action"):
        loss(td)


def test_caller_entries_untouched_except_td_error(nets, transition_batch):
    td = transition_batch(n=B)
    before = td.clone()
    REDQLoss(*nets()[:2], num_qvalue_nets=3)(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key]), key


class QuadraticCritic(nn.Module):
    """``Q(s, a) = w . [a, a^2] + b``: can represent the bandit's quadratic reward exactly."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([action, action**2], -1)).squeeze(-1)


def test_learns_a_one_step_bandit(nets, train_on_bandit):
    # reward = -(a - 0.5)^2, every step terminal: the policy mean goes to ~0.5
    actor, _, lin = nets(n_obs=1, n_act=1)
    critic = TensorDictModule(QuadraticCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = REDQLoss(
        actor,
        critic,
        num_qvalue_nets=4,
        sub_sample_len=2,
        loss_function="l2",
        alpha_init=0.1,
        min_alpha=0.01,
        target_entropy=-3.0,
    )
    train_on_bandit(
        loss, lambda n: torch.rand(n, 1) * 2 - 1, lambda a: -((a.squeeze(-1) - 0.5) ** 2), steps=60, n=64, lr=0.05
    )
    with torch.no_grad():
        loc = lin(torch.ones(1, 1))[0, 0]
    assert abs(float(loc) - 0.5) < 0.15, float(loc)


def test_compiled_forward_matches_eager(nets, transition_batch, assert_compiled_matches_eager):
    loss = REDQLoss(*nets()[:2], num_qvalue_nets=4, action_spec=Bounded(-1.0, 1.0, shape=(N_ACT,)))
    assert_compiled_matches_eager(loss, transition_batch(n=B), seed=3)


def test_two_batch_dims_match_the_flat_batch(nets, transition_batch):
    td = transition_batch(n=6)
    loss = REDQLoss(*nets()[:2], num_qvalue_nets=3)
    torch.manual_seed(0)
    flat = loss(td.clone())
    grid_td = td.clone().reshape(2, 3)
    torch.manual_seed(0)
    grid = loss(grid_td)
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])
    assert grid_td["td_error"].shape == (2, 3)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_collectors_mask_leaves_padded_transitions_out(weighted, nets, transition_batch):
    actor, critic, _ = nets()
    loss = REDQLoss(actor, critic, num_qvalue_nets=4, sub_sample_len=2, reduction="none")
    td = transition_batch(n=9)
    if weighted:
        td["priority_weight"] = torch.rand(9) + 0.5
    valid = torch.arange(9) % 3 != 1
    torch.manual_seed(0)
    per_sample = loss(td.clone())  # [K, 9]: the weights already applied
    masked = td.clone()
    masked["collector", "mask"] = valid
    torch.manual_seed(0)  # the same subset and draws
    kept = loss(masked)
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        assert (kept[key][:, ~valid] == 0).all() and torch.equal(kept[key][:, valid], per_sample[key][:, valid]), key
    loss.reduction = "sum"
    torch.manual_seed(0)
    out = loss(masked)
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        torch.testing.assert_close(out[key], per_sample[key][:, valid].sum(), msg=key)
