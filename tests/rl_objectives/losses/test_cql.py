"""CQLLoss and DiscreteCQLLoss against a hand-written reference: the importance-sampled log-sum-exp
penalty, the backups, the Lagrange multiplier, gradients, targets, keys, errors, bandits, compile."""

import math

import pytest
import torch
from rl_objectives.losses.cql import CQLLoss, DiscreteCQLLoss
from rl_objectives.modules import QValueActor
from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Bounded, Categorical, OneHot
from torch import nn

N_OBS, N_ACT, B, R = 3, 2, 5, 4


@pytest.fixture
def nets(normal_actor, q_critic):
    def build(seed=0, n_obs=N_OBS, n_act=N_ACT, critic=None):
        actor, lin = normal_actor(obs_dim=n_obs, act_dim=n_act, seed=seed, obs_key="observation")
        return actor, critic if critic is not None else q_critic(n_obs, n_act), lin

    return build


def q_all(p, obs, act):
    """:func:`q_critic` from stacked parameters on inputs of any leading shape: ``[N, *lead]``."""
    w, b = p["module", "net", "weight"][:, 0], p["module", "net", "bias"][:, 0]  # [N, F], [N]
    x = torch.cat([obs.expand(*act.shape[:-1], obs.shape[-1]), act], -1)
    return torch.einsum("...f,nf->n...", x, w) + b.view(-1, *([1] * (x.dim() - 1)))


def distance(x, loss_function):
    return x.pow(2) if loss_function == "l2" else torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


def cql_reference(loss, lin, td, seed, normal_dist, *, alpha, gamma, low=-1.0, high=1.0):
    """Every CQL output, drawing the random numbers in the loss's order."""
    q_p = loss.params_of("qvalue_network").detach()
    t_q = loss.params_of("qvalue_network", target=True)
    obs, next_obs, act = td["observation"], td["next", "observation"], td["action"]
    T, w = loss.temperature, loss.min_q_weight
    torch.manual_seed(seed)
    with torch.no_grad():
        if loss.max_q_backup:
            a_next = normal_dist(lin, next_obs.expand(R, B, N_OBS)).rsample()
            next_v = q_all(t_q, next_obs, a_next).max(1).values.min(0).values
        else:
            d_next = normal_dist(lin, next_obs)
            a_next = d_next.rsample()
            next_v = q_all(t_q, next_obs, a_next).min(0).values
            if not loss.deterministic_backup:
                next_v = next_v - alpha * d_next.log_prob(a_next).sum(-1)
    y = td["next", "reward"] + gamma * (~td["next", "terminated"]).float() * next_v
    pred = q_all(q_p, obs, act)
    with torch.no_grad():
        dist = normal_dist(lin, obs)
    a_new = dist.rsample()
    logp = dist.log_prob(a_new).sum(-1)
    bc_logp = dist.log_prob(act).sum(-1)
    rand = torch.rand(R, B, N_ACT) * (high - low) + low
    with torch.no_grad():
        d_c = normal_dist(lin, obs.expand(R, B, N_OBS))
        a_c = d_c.rsample()
        d_n = normal_dist(lin, next_obs.expand(R, B, N_OBS))
        a_n = d_n.rsample()
    log_dens = [torch.full((R, B), -N_ACT * math.log(high - low)), d_c.log_prob(a_c).sum(-1), d_n.log_prob(a_n).sum(-1)]
    cat = torch.cat([q_all(q_p, obs, a) - ld for a, ld in zip((rand, a_c, a_n), log_dens)], 1)  # all scored at s
    penalty = w * (T * torch.logsumexp(cat / T, 1) - pred)
    return {
        "loss_qvalue": distance(pred - y, loss.loss_function).sum(0).mean(),
        "loss_cql": penalty.sum(0).mean(),
        "loss_actor": (alpha * logp - q_all(q_p, obs, a_new).min(0).values).mean(),
        "loss_actor_bc": (alpha * logp - bc_logp).mean(),
        "loss_alpha": (-math.log(alpha) * (logp + -N_ACT)).mean(),
        "loss_alpha_prime": -0.5
        * ((penalty[0].mean() - loss.lagrange_thresh) + (penalty[1].mean() - loss.lagrange_thresh)),
        "entropy": -logp.mean(),
        "td_error": (pred - y).pow(2).max(0).values,
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"deterministic_backup": False, "loss_function": "l2"},
        {"max_q_backup": True, "temperature": 2.0, "min_q_weight": 5.0},
        {"with_lagrange": True, "lagrange_thresh": 3.0},
        {"action_spec": Bounded(-2.0, 2.0, shape=(N_ACT,))},
    ],
)
def test_cql_matches_reference(kwargs, nets, transition_batch, normal_dist, perturb):
    actor, critic, lin = nets()
    loss = CQLLoss(actor, critic, alpha_init=0.5, num_random=R, target_entropy=-N_ACT, **kwargs)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td = transition_batch(n=B)
    bounds = (-2.0, 2.0) if "action_spec" in kwargs else (-1.0, 1.0)
    ref = cql_reference(loss, lin, td, 11, normal_dist, alpha=0.5, gamma=0.9, low=bounds[0], high=bounds[1])
    torch.manual_seed(11)
    out = loss(td)
    assert sorted(out.keys()) == sorted(loss.out_keys) and out.batch_size == torch.Size([])
    assert ("loss_alpha_prime" in out.keys()) == loss.with_lagrange
    for key in out.keys():
        if key in ref:
            torch.testing.assert_close(out[key], ref[key], msg=lambda m, key=key: f"{key}: {m}")
    torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
    torch.testing.assert_close(td["td_error"], ref["td_error"])


def test_lagrange_multiplier_scales_the_penalty_and_learns_the_gap(nets, transition_batch):
    actor, critic, _ = nets()
    loss = CQLLoss(actor, critic, num_random=R, with_lagrange=True, lagrange_thresh=1.0)
    with torch.no_grad():
        loss.log_alpha_prime.fill_(math.log(3.0))
    td = transition_batch(n=B)
    torch.manual_seed(0)
    out = loss(td.clone())
    plain = CQLLoss(*nets()[:2], num_random=R)
    plain.load_state_dict({k: v for k, v in loss.state_dict().items() if k != "log_alpha_prime"})
    torch.manual_seed(0)
    base = plain(td.clone())
    torch.testing.assert_close(out["loss_cql"], 3.0 * base["loss_cql"])
    # d loss_alpha_prime / d log_alpha_prime = -alpha_prime * (mean penalty - thresh), summed over critics / 2
    (grad,) = torch.autograd.grad(out["loss_alpha_prime"], loss.log_alpha_prime, retain_graph=True)
    torch.testing.assert_close(grad, out["loss_alpha_prime"])
    assert torch.autograd.grad(out["loss_cql"], loss.log_alpha_prime, allow_unused=True)[0] is None


def test_gradient_routing_and_targets(nets, transition_batch, perturb):
    actor, critic, _ = nets()
    loss = CQLLoss(actor, critic, num_random=R, with_lagrange=True)
    td = transition_batch(n=B)
    out = loss(td.clone())
    groups = {
        "actor": list(loss.params_of("actor_network").values(True, True)),
        "q": list(loss.params_of("qvalue_network").values(True, True)),
        "alpha": [loss.log_alpha],
        "alpha_prime": [loss.log_alpha_prime],
    }
    owner = {
        "loss_actor": "actor",
        "loss_actor_bc": "actor",
        "loss_qvalue": "q",
        "loss_cql": "q",
        "loss_alpha": "alpha",
        "loss_alpha_prime": "alpha_prime",
    }
    for loss_name, trained in owner.items():
        for name, params in groups.items():
            grads = torch.autograd.grad(out[loss_name], params, allow_unused=True, retain_graph=True)
            if name == trained:
                assert all(g is not None and g.abs().sum() > 0 for g in grads), (loss_name, name)
            else:
                assert all(g is None for g in grads), (loss_name, name)
    assert not out["alpha"].requires_grad and not out["entropy"].requires_grad
    torch.manual_seed(1)
    before = loss(td.clone())
    perturb(loss.params_of("qvalue_network", target=True))
    torch.manual_seed(1)
    after = loss(td.clone())
    assert not torch.allclose(before["loss_qvalue"], after["loss_qvalue"])
    for key in ("loss_cql", "loss_actor", "loss_actor_bc"):
        torch.testing.assert_close(before[key], after[key])
    assert not any(name.startswith("target_") for name, _ in loss.named_parameters())


def test_set_keys_and_untouched_input(nets, transition_batch):
    td = transition_batch(n=B)
    reference = CQLLoss(*nets()[:2], num_random=R)
    loss = CQLLoss(*nets()[:2], num_random=R).set_keys(reward="r", terminated="t", priority="prio")
    loss.load_state_dict(reference.state_dict())
    torch.manual_seed(0)
    expected = reference(td.clone())
    renamed = td.clone()
    renamed["next"].rename_key_("reward", "r")
    renamed["next"].rename_key_("terminated", "t")
    before = renamed.clone()
    torch.manual_seed(0)
    out = loss(renamed)
    for key in expected.keys():
        torch.testing.assert_close(out[key], expected[key])
    assert set(renamed.keys(True, True)) - set(before.keys(True, True)) == {"prio"}
    for key in before.keys(True, True):
        assert torch.equal(renamed[key], before[key]), key


def test_errors(nets, transition_batch):
    actor, critic, _ = nets()
    with pytest.raises(ValueError, match="num_random"):
        CQLLoss(actor, critic, num_random=0)
    with pytest.raises(ValueError, match="temperature"):
        CQLLoss(actor, critic, temperature=0.0)
    with pytest.raises(ValueError, match="min_alpha"):
        CQLLoss(actor, critic, min_alpha=1.0, max_alpha=0.5)
    with pytest.raises(ValueError, match="high > low"):
        CQLLoss(actor, critic, action_spec=Bounded(1.0, 1.0, shape=(N_ACT,)))
    with pytest.raises(TypeError, match="get_dist"):
        CQLLoss(critic, critic)
    loss = CQLLoss(actor, critic, num_random=R)
    td = transition_batch(n=B)
    td["next"].set("terminated", td["next", "terminated"].unsqueeze(-1))
    with pytest.raises(ValueError, match="terminated"):
        loss(td)
    assert "td_error" not in td.keys()
    with pytest.raises(NotImplementedError):
        loss.make_value_estimator("GAE")


class QuadraticCritic(nn.Module):
    """``Q(s, a) = w . [a, a^2] + b``: represents the bandit's quadratic reward exactly."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([action, action**2], -1)).squeeze(-1)


def test_learns_a_one_step_bandit(nets):
    # uniform data, reward -(a - 0.5)^2, every step terminal: the policy mean goes to ~0.5 and the
    # TD error falls (the penalty keeps Q below the data but does not move its maximiser much)
    critic = TensorDictModule(QuadraticCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    actor, critic, lin = nets(n_obs=1, n_act=1, critic=critic)
    loss = CQLLoss(actor, critic, loss_function="l2", alpha_init=0.1, target_entropy=-3.0, num_random=4)
    opt = torch.optim.Adam(loss.parameters(), lr=0.025)
    history = []
    for _ in range(90):
        a = torch.rand(64, 1) * 2 - 1
        terminal = torch.ones(64, dtype=torch.bool)
        td = TensorDict(
            {
                "observation": torch.ones(64, 1),
                "action": a,
                "next": {
                    "observation": torch.ones(64, 1),
                    "reward": -((a.squeeze(-1) - 0.5) ** 2),
                    "done": terminal,
                    "terminated": terminal.clone(),
                },
            },
            batch_size=[64],
        )
        out = loss(td)
        opt.zero_grad()
        # the SAC actor loss (loss_actor_bc is the alternative for a behaviour-cloning warm-up)
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_cql"] + out["loss_alpha"]).backward()
        opt.step()
        history.append(float(out["loss_qvalue"].detach()))
    with torch.no_grad():
        loc = lin(torch.ones(1, 1))[0, 0]
    assert abs(float(loc) - 0.5) < 0.2, float(loc)
    assert sum(history[-10:]) < sum(history[:10]) / 4


def test_compiled_forward_matches_eager(nets, transition_batch, assert_compiled_matches_eager):
    loss = CQLLoss(*nets()[:2], num_random=R, with_lagrange=True)
    assert_compiled_matches_eager(loss, transition_batch(n=B), seed=4)


# ------------------------------------------------------------------------------ DiscreteCQLLoss
N_D = 4


def discrete_batch(space, n=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(N_D, (n,), generator=g)
    terminated = torch.rand(n, generator=g) < 0.3
    td = TensorDict(
        {
            "observation": torch.randn(n, N_OBS, generator=g),
            "action": idx if space == "categorical" else nn.functional.one_hot(idx, N_D),
            "next": {
                "observation": torch.randn(n, N_OBS, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[n],
    )
    return td, idx


def q_actor(space, seed=0, n_obs=N_OBS, n=N_D):
    torch.manual_seed(seed)
    lin = nn.Linear(n_obs, n)
    spec = OneHot(n) if space == "one_hot" else Categorical(n)
    return QValueActor(lin, spec=spec), lin


@pytest.mark.parametrize("space", ["one_hot", "categorical"])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_discrete_cql_matches_reference(space, loss_function, perturb):
    actor, lin = q_actor(space)
    target = nn.Linear(N_OBS, N_D)
    target.load_state_dict(lin.state_dict())
    loss = DiscreteCQLLoss(actor, action_space=space, loss_function=loss_function)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("value_network"))  # the online network moves off its target
    td, idx = discrete_batch(space)
    with torch.no_grad():
        y = (
            td["next", "reward"]
            + 0.9 * (~td["next", "terminated"]).float() * target(td["next", "observation"]).max(-1).values
        )
    q = lin(td["observation"])
    pred = q[torch.arange(B), idx]
    out = loss(td)
    assert sorted(out.keys()) == ["loss_cql", "loss_qvalue"] and out.batch_size == torch.Size([])
    torch.testing.assert_close(out["loss_qvalue"], distance(pred - y, loss_function).mean())
    torch.testing.assert_close(out["loss_cql"], (torch.logsumexp(q, -1) - pred).mean())
    torch.testing.assert_close(td["td_error"], (pred - y).pow(2).detach())
    # gradients reach the online network only; reductions
    grads = torch.autograd.grad(out["loss_cql"] + out["loss_qvalue"], list(lin.parameters()))
    assert all(g.abs().sum() > 0 for g in grads)
    assert not any(t.requires_grad for t in loss.params_of("value_network", target=True).values(True, True))
    none = DiscreteCQLLoss(q_actor(space)[0], action_space=space, reduction="none")(td.clone())
    assert none["loss_cql"].shape == (B,) and none["loss_qvalue"].shape == (B,)


def test_discrete_cql_target_network_and_set_keys(perturb):
    td, _ = discrete_batch("one_hot")
    loss = DiscreteCQLLoss(q_actor("one_hot")[0])  # space read from the action's shape
    before = loss(td.clone())
    perturb(loss.params_of("value_network", target=True))
    after = loss(td.clone())
    assert not torch.allclose(before["loss_qvalue"], after["loss_qvalue"])
    torch.testing.assert_close(before["loss_cql"], after["loss_cql"])
    renamed = td.clone()
    renamed.rename_key_("action", "a")
    renamed["next"].rename_key_("reward", "r")
    out = loss.set_keys(action="a", reward="r", priority="p")(renamed)
    for key in after.keys():
        torch.testing.assert_close(out[key], after[key])
    assert "p" in renamed.keys() and "td_error" not in renamed.keys()


def test_discrete_cql_errors():
    with pytest.raises(ValueError, match="action_space"):
        DiscreteCQLLoss(q_actor("one_hot")[0], action_space="continuous")
    with pytest.raises(ValueError, match="loss_function"):
        DiscreteCQLLoss(q_actor("one_hot")[0], loss_function="huber")
    loss = DiscreteCQLLoss(q_actor("categorical")[0], action_space="categorical")
    td, _ = discrete_batch("one_hot")
    with pytest.raises(ValueError, match="action"):
        loss(td)
    td, _ = discrete_batch("categorical")
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    assert "td_error" not in td.keys()


def test_discrete_cql_keeps_an_unseen_arm_below_the_data():
    # arm 2 never appears in the data and starts with a high value: CQL pushes it below the data's arms
    actor, lin = q_actor("categorical", n_obs=1, n=3)
    with torch.no_grad():
        lin.bias.copy_(torch.tensor([0.0, 0.0, 2.0]))
    loss = DiscreteCQLLoss(actor, action_space="categorical")
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    rewards = torch.tensor([0.0, 0.5, 1.0])
    for _ in range(150):
        a = torch.randint(2, (32,))
        terminal = torch.ones(32, dtype=torch.bool)
        td = TensorDict(
            {
                "observation": torch.ones(32, 1),
                "action": a,
                "next": {
                    "observation": torch.ones(32, 1),
                    "reward": rewards[a],
                    "done": terminal,
                    "terminated": terminal.clone(),
                },
            },
            batch_size=[32],
        )
        out = loss(td)
        opt.zero_grad()
        (out["loss_qvalue"] + out["loss_cql"]).backward()
        opt.step()
    with torch.no_grad():
        q = lin(torch.ones(1))
    assert int(q.argmax()) == 1 and float(q[2]) < float(q[1]), q


def test_discrete_cql_compiled_matches_eager(assert_compiled_matches_eager):
    assert_compiled_matches_eager(DiscreteCQLLoss(q_actor("one_hot")[0]), discrete_batch("one_hot")[0])


@pytest.mark.parametrize("max_q_backup", [False, True])
def test_two_batch_dims_match_the_flat_batch(max_q_backup, nets, transition_batch):
    # the random draws have the same layout for a [2, 3] batch and its flat [6] version
    td = transition_batch(n=6)
    loss = CQLLoss(*nets()[:2], num_random=R, max_q_backup=max_q_backup, with_lagrange=True)
    torch.manual_seed(0)
    flat = loss(td.clone())
    grid_td = td.clone().reshape(2, 3)
    torch.manual_seed(0)
    grid = loss(grid_td)
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])
    assert grid_td["td_error"].shape == (2, 3)
    loss = DiscreteCQLLoss(q_actor("categorical")[0], action_space="categorical")
    td, _ = discrete_batch("categorical", n=6)
    flat = loss(td.clone())
    grid = loss(td.clone().reshape(3, 2))
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])


@pytest.mark.parametrize("with_lagrange", [False, True])
def test_the_collectors_mask_leaves_padded_transitions_out(with_lagrange, nets, transition_batch):
    actor, critic, _ = nets()
    kwargs = {"with_lagrange": with_lagrange, "lagrange_thresh": 5.0} if with_lagrange else {}
    loss = CQLLoss(actor, critic, reduction="none", **kwargs)
    td = transition_batch(n=9)
    valid = torch.arange(9) % 3 != 1
    torch.manual_seed(0)
    per_sample = loss(td.clone())
    masked = td.clone()
    masked["collector", "mask"] = valid
    # prioritized weights are not CQL's (TorchRL's neither): present, they change nothing
    masked["priority_weight"] = torch.rand(9) + 0.5
    loss.reduction = "mean"
    torch.manual_seed(0)  # the same draws as the per-sample call
    out = loss(masked)
    for key in ("loss_actor", "loss_actor_bc", "loss_qvalue", "loss_cql", "loss_alpha"):
        torch.testing.assert_close(out[key], per_sample[key][valid].mean(), msg=key)


def test_discrete_cql_mask_leaves_padded_transitions_out():
    actor, _ = q_actor("categorical")
    td, _ = discrete_batch("categorical", n=9)
    loss = DiscreteCQLLoss(actor, action_space="categorical", reduction="none")
    per_sample = loss(td.clone())
    valid = torch.arange(9) % 3 != 1
    masked = td.clone()
    masked["shifted_valid"] = valid
    loss.reduction = "sum"
    out = loss(masked)
    for key in ("loss_qvalue", "loss_cql"):
        torch.testing.assert_close(out[key], per_sample[key][valid].sum(), msg=key)
