"""DiscreteSACLoss against a hand-written reference: exact expectations over the actions, gradients,
targets, keys, errors, a bandit and compile."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.losses.discrete_sac import DiscreteSACLoss
from tdict import TensorDict
from tdict.nn import (
    OneHotCategorical,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from tdict.specs import Categorical, OneHot
from torch import distributions as D
from torch import nn

N_OBS, N_ACT, B = 3, 4, 7


def networks(space="one_hot", seed=0, n_obs=N_OBS, n_act=N_ACT):
    torch.manual_seed(seed)
    dist = OneHotCategorical if space == "one_hot" else D.Categorical
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(n_obs, n_act), in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=dist),
    )
    qvalue = TensorDictModule(nn.Linear(n_obs, n_act), in_keys=["observation"], out_keys=["action_value"])
    return actor, qvalue


def batch(space="one_hot", n=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(N_ACT, (n,), generator=g)
    terminated = torch.rand(n, generator=g) < 0.3
    td = TensorDict(
        {
            "observation": torch.randn(n, N_OBS, generator=g),
            "action": idx if space == "categorical" else nn.functional.one_hot(idx, N_ACT),
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


def q_all(p, obs):
    """``[num_nets, B, n]`` action values from the stacked linear parameters."""
    return torch.einsum("bf,naf->nba", obs, p["module", "weight"]) + p["module", "bias"].unsqueeze(1)


def policy(p, obs):
    logits = obs @ p["module", "0", "module", "weight"].T + p["module", "0", "module", "bias"]
    probs = logits.softmax(-1)
    return probs, probs.log()


def perturb(params, scale=0.3):
    with torch.no_grad():
        for t in params.values(True, True):
            t.add_(scale * torch.randn_like(t))


def reference(loss, td, idx, alpha, gamma, loss_function):
    q_p = loss.params_of("qvalue_network").detach()
    t_q = loss.params_of("qvalue_network", target=True)
    a_p = loss.params_of("actor_network").detach()
    next_probs, next_logp = policy(a_p, td["next", "observation"])
    next_v = (next_probs * (q_all(t_q, td["next", "observation"]).min(0).values - alpha * next_logp)).sum(-1)
    y = td["next", "reward"] + gamma * (~td["next", "terminated"]).float() * next_v
    q = q_all(q_p, td["observation"])
    pred = q[:, torch.arange(len(idx)), idx]
    err = pred - y
    if loss_function == "l2":
        per = err.pow(2)
    else:
        per = torch.where(err.abs() < 1, 0.5 * err**2, err.abs() - 0.5)
    probs, logp = policy(a_p, td["observation"])
    actor = (probs * (alpha * logp - q.min(0).values)).sum(-1)
    neg_ent = (probs * logp).sum(-1)
    return {
        "loss_qvalue": per.sum(0).mean(),
        "loss_actor": actor.mean(),
        "neg_entropy": neg_ent,
        "td_error": err.abs().max(0).values,
    }


@pytest.mark.parametrize("space", ["one_hot", "categorical"])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_losses_match_reference(space, loss_function):
    loss = DiscreteSACLoss(
        *networks(space), action_space=space, num_actions=N_ACT, alpha_init=0.4, loss_function=loss_function
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td, idx = batch(space)
    ref = reference(loss, td, idx, 0.4, 0.9, loss_function)
    out = loss(td)
    assert out.batch_size == torch.Size([]) and sorted(out.keys()) == sorted(DiscreteSACLoss.out_keys)
    torch.testing.assert_close(out["loss_qvalue"], ref["loss_qvalue"])
    torch.testing.assert_close(out["loss_actor"], ref["loss_actor"])
    target_entropy = 0.98 * math.log(N_ACT)
    assert loss.target_entropy == pytest.approx(target_entropy)
    torch.testing.assert_close(out["loss_alpha"], (-math.log(0.4) * (ref["neg_entropy"] + target_entropy)).mean())
    torch.testing.assert_close(out["entropy"], -ref["neg_entropy"].mean())
    torch.testing.assert_close(out["alpha"], torch.tensor(0.4))
    torch.testing.assert_close(td["td_error"], ref["td_error"])


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), n=st.integers(1, 9))
def test_categorical_and_one_hot_agree(seed, n):
    # the same transitions stored as indices or one-hot vectors give the same losses
    td_c, idx = batch("categorical", n=n, seed=seed)
    td_o = td_c.clone()
    td_o.set("action", nn.functional.one_hot(idx, N_ACT))
    out_c = DiscreteSACLoss(*networks("categorical"), num_actions=N_ACT)(td_c)  # space read from the shape
    out_o = DiscreteSACLoss(*networks("categorical"), action_space=OneHot(N_ACT), num_actions=N_ACT)(td_o)
    for key in out_c.keys():
        torch.testing.assert_close(out_c[key], out_o[key])


def test_reduction_none_and_sum():
    td, _ = batch()
    mean = DiscreteSACLoss(*networks(), num_actions=N_ACT)(td.clone())
    none = DiscreteSACLoss(*networks(), num_actions=N_ACT, reduction="none", scalar_output_mode="exclude")(td.clone())
    total = DiscreteSACLoss(*networks(), num_actions=N_ACT, reduction="sum")(td.clone())
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        assert none[key].shape == (B,)
        torch.testing.assert_close(none[key].mean(), mean[key])
        torch.testing.assert_close(none[key].sum(), total[key])


def test_gradient_routing():
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    out = loss(batch()[0])
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    everything = a_params + q_params + [loss.log_alpha]
    n_a, n_q = len(a_params), len(q_params)

    def grads(name):
        return torch.autograd.grad(out[name], everything, allow_unused=True, retain_graph=True)

    g = grads("loss_actor")
    assert all(x is not None and x.abs().sum() > 0 for x in g[:n_a]) and all(x is None for x in g[n_a:])
    g = grads("loss_qvalue")
    assert all(x is None for x in g[:n_a]) and g[-1] is None
    assert all(x is not None and x.abs().sum() > 0 for x in g[n_a : n_a + n_q])
    g = grads("loss_alpha")
    assert all(x is None for x in g[:-1]) and g[-1] is not None
    assert not out["alpha"].requires_grad and not out["entropy"].requires_grad
    names = {name for name, _ in loss.named_parameters()}
    assert not any(name.startswith("target_") for name in names)


def test_target_network_drives_the_bootstrap_only():
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    td, _ = batch()
    before = loss(td.clone())
    perturb(loss.params_of("qvalue_network", target=True), scale=1.0)
    after = loss(td.clone())
    assert not torch.allclose(before["loss_qvalue"], after["loss_qvalue"])
    torch.testing.assert_close(before["loss_actor"], after["loss_actor"])
    # an optimizer step moves the online critics, never the targets
    targets = loss.params_of("qvalue_network", target=True).clone()
    opt = torch.optim.SGD(loss.parameters(), lr=0.1)
    opt.zero_grad()
    sum(v for k, v in loss(td.clone()).items() if k.startswith("loss")).backward()
    opt.step()
    assert (loss.params_of("qvalue_network", target=True) == targets).all()
    no_delay = DiscreteSACLoss(*networks(), num_actions=N_ACT, delay_qvalue=False)
    assert no_delay.target_networks == []


def test_set_keys():
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    td, _ = batch()
    expected = loss(td.clone())
    loss2 = DiscreteSACLoss(*networks(), num_actions=N_ACT).set_keys(
        action="act", reward="r", done="d", terminated="t", priority="prio"
    )
    renamed = td.clone()
    renamed.rename_key_("action", "act")
    for old, new in (("reward", "r"), ("done", "d"), ("terminated", "t")):
        renamed["next"].rename_key_(old, new)
    out = loss2(renamed)
    for key in expected.keys():
        torch.testing.assert_close(out[key], expected[key])
    assert "prio" in renamed.keys() and "td_error" not in renamed.keys()


def test_fixed_alpha_bounds_and_target_entropy():
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT, fixed_alpha=True, alpha_init=0.5, target_entropy=0.3)
    assert "log_alpha" in dict(loss.named_buffers())
    out = loss(batch()[0])
    assert not out["loss_alpha"].requires_grad and loss.target_entropy == 0.3
    torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
    out = DiscreteSACLoss(*networks(), num_actions=N_ACT, alpha_init=5.0, max_alpha=2.0)(batch()[0])
    torch.testing.assert_close(out["alpha"], torch.tensor(2.0))
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT, target_entropy_weight=0.5)
    assert loss.target_entropy == pytest.approx(0.5 * math.log(N_ACT))


def test_errors():
    actor, qvalue = networks()
    with pytest.raises(ValueError, match="action_space"):
        DiscreteSACLoss(actor, qvalue, num_actions=N_ACT, action_space="binary")
    with pytest.raises(ValueError, match="num_actions"):
        DiscreteSACLoss(actor, qvalue, num_actions=0)
    with pytest.raises(ValueError, match="alpha_init"):
        DiscreteSACLoss(actor, qvalue, num_actions=N_ACT, alpha_init=-1.0)
    with pytest.raises(ValueError, match="target_entropy"):
        DiscreteSACLoss(actor, qvalue, num_actions=N_ACT, target_entropy="max")
    with pytest.raises(TypeError, match="get_dist"):
        DiscreteSACLoss(qvalue, qvalue, num_actions=N_ACT)
    loss = DiscreteSACLoss(actor, qvalue, num_actions=N_ACT, action_space=Categorical(N_ACT))
    td, _ = batch("one_hot")
    with pytest.raises(ValueError, match="action"):
        loss(td)  # one-hot action given to a categorical loss
    loss = DiscreteSACLoss(*networks("categorical"), num_actions=N_ACT + 1)
    with pytest.raises(ValueError, match="num_actions"):
        loss(batch("categorical")[0])
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    td, _ = batch()
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError):
        loss(td)
    assert "td_error" not in td.keys()


def test_caller_entries_untouched_except_td_error():
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    td, _ = batch()
    before = td.clone()
    loss(td)
    assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key]), key


def test_learns_a_three_armed_bandit():
    torch.manual_seed(0)
    actor, qvalue = networks("categorical", n_obs=1, n_act=3)
    loss = DiscreteSACLoss(actor, qvalue, num_actions=3, loss_function="l2", alpha_init=0.2, target_entropy=0.2)
    opt = torch.optim.Adam(loss.parameters(), lr=0.1)
    rewards = torch.tensor([0.0, 0.5, 1.0])
    for _ in range(80):
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
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        opt.step()
    with torch.no_grad():
        probs = actor.get_dist(TensorDict(observation=torch.ones(1, 1), batch_size=[1])).probs[0]
        q = loss.call_network("qvalue_network", TensorDict(observation=torch.ones(1, 1), batch_size=[1]))[
            "action_value"
        ][:, 0]
    assert int(probs.argmax()) == 2 and float(probs[2]) > 0.8, probs
    torch.testing.assert_close(q, rewards.expand(2, 3), atol=0.1, rtol=0)


def test_compiled_forward_matches_eager(assert_compiled_matches_eager):
    loss = DiscreteSACLoss(*networks(), num_actions=N_ACT)
    assert_compiled_matches_eager(loss, batch()[0])


def test_two_batch_dims_match_the_flat_batch():
    td, _ = batch("categorical", n=6)
    flat = DiscreteSACLoss(*networks("categorical"), num_actions=N_ACT)(td.clone())
    grid_td = td.clone().reshape(2, 3)
    grid = DiscreteSACLoss(*networks("categorical"), num_actions=N_ACT)(grid_td)
    for key in flat.keys():
        torch.testing.assert_close(grid[key], flat[key])
    assert grid_td["td_error"].shape == (2, 3)
