"""IQLLoss and DiscreteIQLLoss against a hand-written reference: expectile value regression, Q
regression onto V(s'), clipped advantage weights, gradients, targets, keys, errors, bandits, compile."""

import pytest
import torch
from rl_objectives.losses.iql import DiscreteIQLLoss, IQLLoss
from rl_objectives.modules import ValueOperator
from tdict import TensorDict
from tdict.nn import (
    OneHotCategorical,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import distributions as D
from torch import nn

N_OBS, N_ACT, B = 3, 2, 6
N_DISCRETE = 4


def value_net(n_obs=N_OBS, seed=2):
    torch.manual_seed(seed)
    lin = nn.Linear(n_obs, 1)
    return ValueOperator(lin, in_keys=["observation"]), lin


@pytest.fixture
def nets(normal_actor, q_critic):
    def build(seed=0, n_obs=N_OBS, n_act=N_ACT, critic=None):
        actor, lin = normal_actor(obs_dim=n_obs, act_dim=n_act, seed=seed, obs_key="observation")
        value, v_lin = value_net(n_obs)
        return actor, critic if critic is not None else q_critic(n_obs, n_act), value, lin, v_lin

    return build


def distance(x, loss_function):
    return x.pow(2) if loss_function == "l2" else torch.where(x.abs() < 1, 0.5 * x**2, x.abs() - 0.5)


def iql_reference(q_online, q_target, v_lin, log_prob, td, *, gamma, expectile, temperature, loss_function):
    """The three IQL losses from the critics' values ``[N, B]`` and the actor's log-probs ``[B]``."""
    with torch.no_grad():
        v = v_lin(td["observation"]).squeeze(-1)
        v_next = v_lin(td["next", "observation"]).squeeze(-1)
    min_q = q_target.min(0).values
    y = td["next", "reward"] + gamma * (~td["next", "terminated"]).float() * v_next
    diff = min_q - v
    weight = torch.where(diff > 0, torch.tensor(expectile), torch.tensor(1 - expectile))
    adv_weight = torch.exp(temperature * (min_q - v)).clamp(max=100.0)
    return {
        "loss_qvalue": distance(q_online - y, loss_function).sum(0).mean(),
        "loss_value": (weight * diff**2).mean(),
        "loss_actor": -(adv_weight * log_prob).mean(),
        "entropy": -log_prob.mean(),
        "td_error": (q_online - y).pow(2).max(0).values,
        "clipped": bool((adv_weight == 100.0).any()),
    }


@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
@pytest.mark.parametrize("expectile,temperature", [(0.5, 1.0), (0.8, 3.0), (0.7, 60.0), (1.0, 1.0)])
def test_iql_matches_reference(
    loss_function, expectile, temperature, nets, transition_batch, q_reference, normal_dist, perturb
):
    actor, critic, value, lin, v_lin = nets()
    loss = IQLLoss(actor, critic, value, loss_function=loss_function, expectile=expectile, temperature=temperature)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td = transition_batch(n=B)
    with torch.no_grad():
        q_online = q_reference(loss.params_of("qvalue_network"), td["observation"], td["action"])
        q_target = q_reference(loss.params_of("qvalue_network", target=True), td["observation"], td["action"])
        log_prob = normal_dist(lin, td["observation"]).log_prob(td["action"]).sum(-1)
    ref = iql_reference(
        q_online,
        q_target,
        v_lin,
        log_prob,
        td,
        gamma=0.9,
        expectile=expectile,
        temperature=temperature,
        loss_function=loss_function,
    )
    if temperature == 60.0:
        assert ref["clipped"]  # the case exercises the clip at 100
    out = loss(td)
    assert sorted(out.keys()) == sorted(IQLLoss.out_keys) and out.batch_size == torch.Size([])
    for key in ("loss_qvalue", "loss_value", "loss_actor", "entropy"):
        torch.testing.assert_close(out[key], ref[key], msg=lambda m, key=key: f"{key}: {m}")
    torch.testing.assert_close(td["td_error"], ref["td_error"])


def discrete_nets(space="categorical", seed=0, n_obs=N_OBS, n=N_DISCRETE):
    torch.manual_seed(seed)
    dist = D.Categorical if space == "categorical" else OneHotCategorical
    actor_lin = nn.Linear(n_obs, n)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor_lin, in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=dist),
    )
    qvalue = TensorDictModule(nn.Linear(n_obs, n), in_keys=["observation"], out_keys=["state_action_value"])
    value, v_lin = value_net(n_obs)
    return actor, qvalue, value, actor_lin, v_lin


def discrete_batch(space, n=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(N_DISCRETE, (n,), generator=g)
    terminated = torch.rand(n, generator=g) < 0.3
    td = TensorDict(
        {
            "observation": torch.randn(n, N_OBS, generator=g),
            "action": idx if space == "categorical" else nn.functional.one_hot(idx, N_DISCRETE),
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


def q_table(p, obs):
    return torch.einsum("bf,naf->nba", obs, p["module", "weight"]) + p["module", "bias"].unsqueeze(1)


@pytest.mark.parametrize("space", ["categorical", "one_hot"])
def test_discrete_iql_matches_reference(space, perturb):
    actor, qvalue, value, actor_lin, v_lin = discrete_nets(space)
    loss = DiscreteIQLLoss(actor, qvalue, value, action_space=space, expectile=0.7, temperature=2.0)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td, idx = discrete_batch(space)
    rows = torch.arange(B)
    with torch.no_grad():
        q_online = q_table(loss.params_of("qvalue_network"), td["observation"])[:, rows, idx]
        q_target = q_table(loss.params_of("qvalue_network", target=True), td["observation"])[:, rows, idx]
        log_prob = actor_lin(td["observation"]).log_softmax(-1)[rows, idx]
    ref = iql_reference(
        q_online, q_target, v_lin, log_prob, td, gamma=0.9, expectile=0.7, temperature=2.0, loss_function="smooth_l1"
    )
    out = loss(td)
    for key in ("loss_qvalue", "loss_value", "loss_actor", "entropy"):
        torch.testing.assert_close(out[key], ref[key], msg=lambda m, key=key: f"{key}: {m}")
    torch.testing.assert_close(td["td_error"], ref["td_error"])


def test_reduction_none(nets, transition_batch):
    td = transition_batch(n=B)
    mean = IQLLoss(*nets()[:3])(td.clone())
    none = IQLLoss(*nets()[:3], reduction="none", scalar_output_mode="exclude")(td.clone())
    for key in ("loss_actor", "loss_qvalue", "loss_value"):
        assert none[key].shape == (B,)
        torch.testing.assert_close(none[key].mean(), mean[key])


def test_gradient_routing_and_targets(nets, transition_batch, perturb):
    actor, critic, value, _, _ = nets()
    loss = IQLLoss(actor, critic, value)
    td = transition_batch(n=B)
    out = loss(td.clone())
    groups = {
        name: list(loss.params_of(name).values(True, True))
        for name in ("actor_network", "qvalue_network", "value_network")
    }
    owner = {"loss_actor": "actor_network", "loss_qvalue": "qvalue_network", "loss_value": "value_network"}
    for loss_name, trained in owner.items():
        for name, params in groups.items():
            grads = torch.autograd.grad(out[loss_name], params, allow_unused=True, retain_graph=True)
            if name == trained:
                assert all(g is not None and g.abs().sum() > 0 for g in grads), (loss_name, name)
            else:
                assert all(g is None for g in grads), (loss_name, name)
    assert not out["entropy"].requires_grad
    assert loss.target_networks == ["qvalue_network"]
    # the target critics feed the value and actor losses, never the Q regression
    before = loss(td.clone())
    perturb(loss.params_of("qvalue_network", target=True))
    after = loss(td.clone())
    torch.testing.assert_close(before["loss_qvalue"], after["loss_qvalue"])
    assert not torch.allclose(before["loss_value"], after["loss_value"])
    assert not torch.allclose(before["loss_actor"], after["loss_actor"])
    assert not any(name.startswith("target_") for name, _ in loss.named_parameters())


def test_set_keys(nets, transition_batch):
    td = transition_batch(n=B)
    networks = nets()[:3]
    torch.manual_seed(5)  # the same draws for the critics' second set
    expected = IQLLoss(*networks)(td.clone())
    actor, critic, _, _, _ = nets()
    value = ValueOperator(value_net()[1], in_keys=["observation"], out_keys=["v"])
    torch.manual_seed(5)
    loss = IQLLoss(actor, critic, value).set_keys(value="v", reward="r", done="d", terminated="t", priority="prio")
    renamed = td.clone()
    for old, new in (("reward", "r"), ("done", "d"), ("terminated", "t")):
        renamed["next"].rename_key_(old, new)
    out = loss(renamed)
    for key in expected.keys():
        torch.testing.assert_close(out[key], expected[key])
    assert "prio" in renamed.keys() and "td_error" not in renamed.keys()


def test_errors(nets, transition_batch):
    actor, critic, value, _, _ = nets()
    with pytest.raises(ValueError, match=r"expectile must be in \(0, 1\], got 1.5"):
        IQLLoss(actor, critic, value, expectile=1.5)
    with pytest.raises(ValueError, match="expectile"):
        IQLLoss(actor, critic, value, expectile=0.0)
    with pytest.raises(ValueError, match="temperature"):
        IQLLoss(actor, critic, value, temperature=-1.0)
    with pytest.raises(TypeError, match="value_network"):
        IQLLoss(actor, critic, None)
    with pytest.raises(TypeError, match="get_dist"):
        IQLLoss(critic, critic, value)
    loss = IQLLoss(actor, critic, value)
    td = transition_batch(n=B)
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    assert "td_error" not in td.keys()
    wide_value = TensorDictModule(nn.Linear(N_OBS, 1), in_keys=["observation"], out_keys=["state_value"])  # [B, 1]
    with pytest.raises(ValueError, match="state_value"):
        IQLLoss(actor, critic, wide_value)(transition_batch(n=B))
    d_actor, d_q, d_value, _, _ = discrete_nets()
    with pytest.raises(ValueError, match="action_space"):
        DiscreteIQLLoss(d_actor, d_q, d_value, action_space="box")
    td, _ = discrete_batch("categorical")
    td.set("action", td["action"].unsqueeze(-1))  # a trailing 1
    with pytest.raises(ValueError, match="action"):
        DiscreteIQLLoss(d_actor, d_q, d_value)(td)
    assert "td_error" not in td.keys()


def test_caller_entries_untouched_except_td_error(nets, transition_batch):
    td = transition_batch(n=B)
    before = td.clone()
    IQLLoss(*nets()[:3])(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key]), key


class QuadraticCritic(nn.Module):
    """``Q(s, a) = w . [a, a^2] + b``: represents the bandit's quadratic reward exactly."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([action, action**2], -1)).squeeze(-1)


def test_learns_from_uniform_data_on_a_bandit(nets):
    # offline data: uniform actions, reward -(a - 0.5)^2; advantage weighting moves the policy to ~0.5
    critic = TensorDictModule(QuadraticCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    actor, critic, value, lin, _ = nets(n_obs=1, n_act=1, critic=critic)
    loss = IQLLoss(actor, critic, value, loss_function="l2", expectile=0.9, temperature=10.0)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    for _ in range(150):
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
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
        opt.step()
        with torch.no_grad():  # the target critics follow the online ones (hard update)
            loss.params_of("qvalue_network", target=True).update_(loss.params_of("qvalue_network").detach())
    with torch.no_grad():
        loc = lin(torch.ones(1, 1))[0, 0]
    assert abs(float(loc) - 0.5) < 0.15, float(loc)


def test_discrete_learns_the_best_arm_in_the_data():
    actor, qvalue, value, actor_lin, _ = discrete_nets("categorical", n_obs=1, n=3)
    loss = DiscreteIQLLoss(actor, qvalue, value, loss_function="l2", expectile=0.9, temperature=5.0)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    rewards = torch.tensor([0.0, 0.5, 1.0])
    for _ in range(100):
        a = torch.randint(3, (32,))
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
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
        opt.step()
        with torch.no_grad():
            loss.params_of("qvalue_network", target=True).update_(loss.params_of("qvalue_network").detach())
    with torch.no_grad():
        probs = actor_lin(torch.ones(1)).softmax(-1)
    assert int(probs.argmax()) == 2 and float(probs[2]) > 0.6, probs


def test_compiled_forward_matches_eager(nets, transition_batch, assert_compiled_matches_eager):
    assert_compiled_matches_eager(IQLLoss(*nets()[:3]), transition_batch(n=B))
    actor, qvalue, value, _, _ = discrete_nets("one_hot")
    assert_compiled_matches_eager(
        DiscreteIQLLoss(actor, qvalue, value, action_space="one_hot"), discrete_batch("one_hot")[0]
    )


def test_two_batch_dims_match_the_flat_batch(nets, transition_batch):
    td = transition_batch(n=6)
    loss = IQLLoss(*nets()[:3])
    flat = loss(td.clone())
    grid_td = td.clone().reshape(2, 3)
    grid = loss(grid_td)
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])
    assert grid_td["td_error"].shape == (2, 3)
    actor, qvalue, value, _, _ = discrete_nets("categorical")
    loss = DiscreteIQLLoss(actor, qvalue, value)
    td, _ = discrete_batch("categorical", n=6)
    flat = loss(td.clone())
    grid = loss(td.clone().reshape(3, 2))
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])


def test_the_collectors_mask_leaves_padded_transitions_out(nets, transition_batch):
    actor, critic, value, _, _ = nets()
    loss = IQLLoss(actor, critic, value, reduction="none")
    td = transition_batch()
    per_sample = loss(td.clone())
    n = td.batch_size[0]
    valid = torch.arange(n) % 3 != 1
    masked = td.clone()
    masked["collector", "mask"] = valid
    loss.reduction = "mean"
    out = loss(masked)
    for key in ("loss_actor", "loss_qvalue", "loss_value"):
        torch.testing.assert_close(out[key], per_sample[key][valid].mean())
