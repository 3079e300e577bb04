"""rl_objectives.value: the TensorDict estimators give the functional results and map keys, params,
grad mode, shifted calls and time dims as documented."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
from rl_objectives import functional as F
from rl_objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    ValueEstimators,
    VTrace,
)
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

N, T, OBS = 3, 6, 4
GAMMA, LMBDA = 0.9, 0.8


class Head(nn.Module):
    """nn.Linear(obs, out) with the 1-wide head squeezed: state values have the batch shape."""

    def __init__(self, out: int = 1, squeeze: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(OBS, out)
        self.squeeze = squeeze and out == 1
        self.calls = 0

    def forward(self, obs):
        self.calls += 1
        out = self.lin(obs)
        return out.squeeze(-1) if self.squeeze else out


def make_net(seed=0, **kwargs):
    torch.manual_seed(seed)
    return TensorDictModule(Head(**kwargs), in_keys=["obs"], out_keys=["state_value"])


def make_rollout(seed=0, truncate=True, terminate=True):
    """Batch [N, T], names [None, "time"]. next obs = following obs inside a trajectory; after a
    done step the next obs is a final observation and the following obs a reset one."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(N, T + 1, OBS, generator=g)
    done = torch.zeros(N, T, dtype=torch.bool)
    terminated = torch.zeros(N, T, dtype=torch.bool)
    if terminate:
        done[0, 2] = terminated[0, 2] = True
        done[2, 4] = terminated[2, 4] = True
    if truncate:
        done[1, 3] = True  # truncated
        done[2, 1] = True
    next_obs = obs[:, 1:].clone()
    next_obs[done] = torch.randn(int(done.sum()), OBS, generator=g)  # final obs differs from the reset obs
    return TensorDict(
        {
            "obs": obs[:, :-1],
            "next": {
                "obs": next_obs,
                "reward": torch.randn(N, T, generator=g),
                "done": done,
                "terminated": terminated,
            },
        },
        batch_size=[N, T],
        names=[None, "time"],
    )


def values(net, td):
    with torch.no_grad():
        head = net.module
        return head.lin(td["obs"]).squeeze(-1), head.lin(td["next", "obs"]).squeeze(-1)


def expected(kind, td, net):
    v, nv = values(net, td)
    r, d, term = td["next", "reward"], td["next", "done"], td["next", "terminated"]
    if kind.startswith("gae"):
        fn = F.generalized_advantage_estimate if kind == "gae_loop" else F.vec_generalized_advantage_estimate
        return fn(GAMMA, LMBDA, v, nv, r, d, term)
    if kind == "td0":
        target = F.td0_return_estimate(GAMMA, nv, r, term)
    elif kind.startswith("td1"):
        target = F.td1_return_estimate(GAMMA, nv, r, d, term)
    else:
        target = F.td_lambda_return_estimate(GAMMA, LMBDA, nv, r, d, term)
    return target - v, target


BUILDERS = {
    "gae": lambda net: GAE(GAMMA, LMBDA, net),
    "gae_loop": lambda net: GAE(GAMMA, LMBDA, net, vectorized=False),
    "td0": lambda net: TD0Estimator(GAMMA, net),
    "td1": lambda net: TD1Estimator(GAMMA, net),
    "td1_loop": lambda net: TD1Estimator(GAMMA, net, vectorized=False),
    "tdlambda": lambda net: TDLambdaEstimator(GAMMA, LMBDA, net),
    "tdlambda_loop": lambda net: TDLambdaEstimator(GAMMA, LMBDA, net, vectorized=False),
}


# --------------------------------------------------------------------------- values
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_estimator_matches_functional(kind):
    net = make_net()
    td = make_rollout()
    out = BUILDERS[kind](net)(td)
    assert out is td
    adv, target = expected(kind, td, net)
    assert td["advantage"].shape == td["value_target"].shape == (N, T)
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    v, nv = values(net, td)
    torch.testing.assert_close(td["state_value"], v)
    torch.testing.assert_close(td["next", "state_value"], nv)
    assert not td["advantage"].requires_grad


@pytest.mark.parametrize("kind", ["gae", "td0", "tdlambda"])
def test_value_estimate_returns_the_target_only(kind):
    net = make_net()
    td = make_rollout()
    target = BUILDERS[kind](net).value_estimate(td)
    torch.testing.assert_close(target, expected(kind, td, net)[1])
    assert "advantage" not in td and "value_target" not in td
    # a TD target needs only V(s_{t+1}): the network runs on td["next"] alone
    assert ("state_value" in td) == (kind == "gae")
    assert ("next", "state_value") in td


def test_missing_terminated_reads_done():
    net = make_net()
    td = make_rollout(truncate=False)  # all ends are terminations: terminated == done
    full = GAE(GAMMA, LMBDA, net)(td.clone())
    del td["next", "terminated"]
    torch.testing.assert_close(GAE(GAMMA, LMBDA, net)(td)["advantage"], full["advantage"])


def test_per_step_gamma_tensor():
    net = make_net()
    td = make_rollout()
    gamma = torch.linspace(0.8, 0.99, T)
    est = GAE(gamma, LMBDA, net)
    assert "gamma" in dict(est.named_buffers())
    v, nv = values(net, td)
    adv, _ = F.generalized_advantage_estimate(
        gamma, LMBDA, v, nv, td["next", "reward"], td["next", "done"], td["next", "terminated"]
    )
    torch.testing.assert_close(est(td)["advantage"], adv)


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_steps_to_next_obs_discounts_each_step_by_gamma_to_the_steps(kind):
    """n-step transitions (MultiStep writes "steps_to_next_obs" at the root): the discount of a step
    is gamma ** steps, as in TorchRL; a [N, T, 1] count works like a [N, T] one."""
    net = make_net()
    td = make_rollout()
    steps = torch.randint(1, 4, (N, T), generator=torch.Generator().manual_seed(1))
    td["steps_to_next_obs"] = steps.unsqueeze(-1)
    v, nv = values(net, td)
    r, d, term = td["next", "reward"], td["next", "done"], td["next", "terminated"]
    gamma = GAMMA ** steps.float()
    if kind == "td0":  # a hand loop: r + gamma**k * V(s') unless terminated
        target = torch.stack(
            [
                torch.stack([r[i, t] + GAMMA ** int(steps[i, t]) * nv[i, t] * (not term[i, t]) for t in range(T)])
                for i in range(N)
            ]
        )
        adv = target - v
    elif kind.startswith("gae"):
        adv, target = F.generalized_advantage_estimate(gamma, LMBDA, v, nv, r, d, term)
    elif kind.startswith("td1"):
        target = F.td1_return_estimate(gamma, nv, r, d, term)
        adv = target - v
    else:
        target = F.td_lambda_return_estimate(gamma, LMBDA, nv, r, d, term)
        adv = target - v
    out = BUILDERS[kind](net)(td)
    torch.testing.assert_close(out["value_target"], target)
    torch.testing.assert_close(out["advantage"], adv)
    # without the counts: the plain discount, which differs wherever a count is above 1
    del td["steps_to_next_obs"]
    plain = BUILDERS[kind](net)(td)["value_target"]
    assert not torch.allclose(plain, target)
    td["steps_to_next_obs"] = torch.ones(N, T, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="steps_to_next_obs"):
        BUILDERS[kind](net)(td)


# --------------------------------------------------------------------------- value network calls
def test_skip_existing_reuses_values():
    net = make_net()
    td = make_rollout()
    td["state_value"] = torch.zeros(N, T)
    td["next", "state_value"] = torch.ones(N, T)
    out = GAE(GAMMA, LMBDA, net, skip_existing=True)(td.clone())
    assert net.module.calls == 0
    r, d, term = td["next", "reward"], td["next", "done"], td["next", "terminated"]
    adv, _ = F.generalized_advantage_estimate(GAMMA, LMBDA, torch.zeros(N, T), torch.ones(N, T), r, d, term)
    torch.testing.assert_close(out["advantage"], adv)
    # default: the network recomputes (and overwrites) both
    out = GAE(GAMMA, LMBDA, net)(td.clone())
    assert net.module.calls == 2
    torch.testing.assert_close(out["advantage"], expected("gae", td, net)[0])
    # only the missing one is computed
    del td["next", "state_value"]
    out = GAE(GAMMA, LMBDA, net, skip_existing=True)(td)
    assert net.module.calls == 3
    torch.testing.assert_close(out["state_value"], torch.zeros(N, T))


def test_values_without_network_must_be_present():
    td = make_rollout()
    with pytest.raises(KeyError, match="state_value.*value network is None"):
        GAE(GAMMA, LMBDA, None)(td)
    td["state_value"] = torch.zeros(N, T)
    with pytest.raises(KeyError, match=r"misses \(.{0,3}next.{0,6}state_value"):
        GAE(GAMMA, LMBDA, None)(td)
    assert "advantage" not in td
    td["next", "state_value"] = torch.zeros(N, T)
    r, d, term = td["next", "reward"], td["next", "done"], td["next", "terminated"]
    torch.testing.assert_close(
        TD1Estimator(GAMMA, None)(td)["value_target"], F.td1_return_estimate(GAMMA, torch.zeros(N, T), r, d, term)
    )


def test_params_and_target_params():
    net = make_net(seed=0)
    other = make_net(seed=1)
    third = make_net(seed=2)
    params = TensorDict.from_module(other)
    target_params = TensorDict.from_module(third)
    td = make_rollout()
    est = TD0Estimator(GAMMA, net)
    est(td, params=params)
    v_other, nv_other = values(other, td)
    torch.testing.assert_close(td["state_value"], v_other)
    torch.testing.assert_close(td["next", "state_value"], nv_other)  # target_params default to params
    est(td, params=params, target_params=target_params)
    _, nv_third = values(third, td)
    torch.testing.assert_close(td["state_value"], v_other)
    torch.testing.assert_close(td["next", "state_value"], nv_third)
    torch.testing.assert_close(
        td["value_target"], F.td0_return_estimate(GAMMA, nv_third, td["next", "reward"], td["next", "terminated"])
    )
    # the network's own parameters are back in place
    v_own, _ = values(net, td)
    est(td)
    torch.testing.assert_close(td["state_value"], v_own)


@pytest.mark.parametrize("differentiable", [False, True])
def test_differentiable(differentiable):
    # TorchRL 0.14 (its test_diff_reward / test_non_differentiable): with differentiable=True the
    # estimate carries gradients to the inputs that require them (here the rewards and the
    # observations, through V(s_t)), never into the value network's parameters; without it the
    # results are detached leaves
    net = make_net()
    td = make_rollout()
    reward = td["next", "reward"].clone().requires_grad_(True)
    obs = td["obs"].clone().requires_grad_(True)
    td["next", "reward"], td["obs"] = reward, obs
    GAE(GAMMA, LMBDA, net, differentiable=differentiable)(td)
    assert td["advantage"].requires_grad == differentiable
    assert td["value_target"].requires_grad == differentiable
    if not differentiable:
        assert td["advantage"].is_leaf and td["value_target"].is_leaf
        return
    td["advantage"].sum().backward()
    assert all(p.grad is None for p in net.parameters())  # the value network is held out
    # d(sum of advantages)/d r_t = sum_{k <= t} (gamma * lambda)^(t - k) (no trajectory ends before t)
    done = td["next", "done"]
    expected = torch.zeros(N, T)
    for n in range(N):
        acc = 0.0
        for t in range(T):
            acc = 1.0 + GAMMA * LMBDA * acc
            expected[n, t] = acc
            if done[n, t]:
                acc = 0.0
    torch.testing.assert_close(reward.grad, expected)
    assert obs.grad is not None and obs.grad.abs().sum() > 0  # through V(s_t)
    # parameters passed functionally are held out too, and V(s_{t+1}) is a target (detached)
    params = TensorDict.from_module(net).apply(lambda p: p.detach().clone().requires_grad_(True))
    fresh = make_rollout()
    target = TD0Estimator(GAMMA, net, differentiable=True).value_estimate(fresh, params=params)
    assert not target.requires_grad


def test_differentiable_vtrace_holds_the_actor_out():
    net, actor = make_net(), make_actor()
    td = make_rollout()
    td["action"] = torch.randn(N, T, 2)
    td["action_log_prob"] = torch.randn(N, T) * 0.3 - 2.0
    reward = td["next", "reward"].clone().requires_grad_(True)
    td["next", "reward"] = reward
    VTrace(GAMMA, actor, net, differentiable=True)(td)
    td["advantage"].sum().backward()
    assert reward.grad is not None and reward.grad.abs().sum() > 0
    assert all(p.grad is None for p in actor.parameters()) and all(p.grad is None for p in net.parameters())


def test_shifted_single_call_equals_two_calls():
    net = make_net()
    td = make_rollout(truncate=False)  # consistent: every end inside the window is a termination
    ref = GAE(GAMMA, LMBDA, net)(td.clone())
    calls = net.module.calls
    out = GAE(GAMMA, LMBDA, net, shifted=True)(td.clone())
    assert net.module.calls == calls + 1
    torch.testing.assert_close(out["advantage"], ref["advantage"])
    torch.testing.assert_close(out["value_target"], ref["value_target"])
    torch.testing.assert_close(out["state_value"], ref["state_value"])
    # V(s_{t+1}) differs from the two-call one only where it is unused (after a termination)
    used = ~td["next", "terminated"]
    torch.testing.assert_close(out["next", "state_value"][used], ref["next", "state_value"][used])
    # TD estimators and params work the same way
    params = TensorDict.from_module(make_net(seed=3))
    torch.testing.assert_close(
        TDLambdaEstimator(GAMMA, LMBDA, net, shifted=True).value_estimate(td.clone(), params=params),
        TDLambdaEstimator(GAMMA, LMBDA, net).value_estimate(td.clone(), params=params),
    )
    with pytest.raises(ValueError, match="target_params"):
        GAE(GAMMA, LMBDA, net, shifted=True)(td, params=params, target_params=TensorDict.from_module(make_net(seed=4)))


def test_shifted_after_a_truncation_reads_the_reset_observation():
    # documented limit: a truncation inside the window makes V(s_{t+1}) the reset obs's value
    net = make_net()
    td = make_rollout(terminate=False)
    ref = GAE(GAMMA, LMBDA, net)(td.clone())
    out = GAE(GAMMA, LMBDA, net, shifted=True)(td.clone())
    trunc = td["next", "done"]
    assert not torch.allclose(out["next", "state_value"][trunc], ref["next", "state_value"][trunc])
    following = torch.cat([ref["state_value"][:, 1:], ref["next", "state_value"][:, -1:]], 1)
    torch.testing.assert_close(out["next", "state_value"], following)


# --------------------------------------------------------------------------- options and keys
def test_average_gae():
    net = make_net()
    td = make_rollout()
    raw = GAE(GAMMA, LMBDA, net)(td.clone())
    avg = GAE(GAMMA, LMBDA, net, average_gae=True)(td.clone())
    a = raw["advantage"]
    torch.testing.assert_close(avg["advantage"], (a - a.mean()) / a.std())
    torch.testing.assert_close(avg["value_target"], raw["value_target"])
    assert abs(float(avg["advantage"].mean())) < 1e-5 and abs(float(avg["advantage"].std()) - 1) < 1e-5


def test_average_rewards_td():
    net = make_net()
    td = make_rollout()
    reward = td["next", "reward"].clone()
    out = TD1Estimator(GAMMA, net, average_rewards=True)(td)
    _, nv = values(net, td)
    scaled = (reward - reward.mean()) / reward.std()
    torch.testing.assert_close(
        out["value_target"], F.td1_return_estimate(GAMMA, nv, scaled, td["next", "done"], td["next", "terminated"])
    )
    torch.testing.assert_close(td["next", "reward"], reward)  # stored rewards untouched


def test_set_keys():
    torch.manual_seed(0)
    net = TensorDictModule(Head(), in_keys=["o"], out_keys=[("critic", "v")])
    src = make_rollout()
    td = TensorDict(
        {
            "o": src["obs"],
            "next": {
                "o": src["next", "obs"],
                "r": src["next", "reward"],
                "d": src["next", "done"],
                "term": src["next", "terminated"],
            },
        },
        batch_size=[N, T],
        names=[None, "time"],
    )
    est = GAE(GAMMA, LMBDA, net).set_keys(
        value=("critic", "v"), reward="r", done="d", terminated="term", advantage=("out", "adv"), value_target="vt"
    )
    assert est.in_keys == ["o", ("next", "o"), ("next", "r"), ("next", "d"), ("next", "term")]
    assert est.out_keys == [("out", "adv"), "vt"]
    est(td)
    ref = GAE(GAMMA, LMBDA, make_net())(src)
    torch.testing.assert_close(td["out", "adv"], ref["advantage"])
    torch.testing.assert_close(td["vt"], ref["value_target"])
    torch.testing.assert_close(td["next", "critic", "v"], ref["next", "state_value"])
    with pytest.raises(ValueError, match=r"unknown key name\(s\) \['values'\]"):
        est.set_keys(values="x")
    with pytest.raises(ValueError, match="must be a str or a tuple of str"):
        est.set_keys(reward=3, done="dd")
    assert est.tensor_keys.done == "d"  # nothing changed by the failed call
    with pytest.raises(KeyError, match=r"did not write .{0,2}wrong"):
        GAE(GAMMA, LMBDA, net).set_keys(value="wrong", reward="r", done="d", terminated="term")(td)


def test_time_dim():
    net = make_net()
    td = make_rollout()
    ref = GAE(GAMMA, LMBDA, net)(td.clone())
    # time first, found by name
    tt = td.clone().transpose(0, 1)
    tt.names = ["time", None]
    out = GAE(GAMMA, LMBDA, net)(tt)
    torch.testing.assert_close(out["advantage"], ref["advantage"].transpose(0, 1))
    # no names: the last batch dim, unless time_dim says otherwise
    tt.names = None
    out = GAE(GAMMA, LMBDA, net, time_dim=0)(tt)
    torch.testing.assert_close(out["advantage"], ref["advantage"].transpose(0, 1))
    out = GAE(GAMMA, LMBDA, net, time_dim=-2)(tt.clone())
    torch.testing.assert_close(out["advantage"], ref["advantage"].transpose(0, 1))
    with pytest.raises(ValueError, match="time_dim=2 is out of range"):
        GAE(GAMMA, LMBDA, net, time_dim=2)(tt)
    with pytest.raises(ValueError, match="needs a time dim"):
        GAE(GAMMA, LMBDA, net)(td[0, 0])


# --------------------------------------------------------------------------- shapes and errors
def test_shape_mix_raises_naming_the_keys():
    net = make_net()
    td = make_rollout()
    td["next", "reward"] = td["next", "reward"].unsqueeze(-1)  # TorchRL's [N, T, 1]
    with pytest.raises(ValueError, match=r"\('next', 'done'\).*\(3, 6\).*\('next', 'reward'\).*\(3, 6, 1\)"):
        GAE(GAMMA, LMBDA, net)(td)
    assert "state_value" not in td  # checked before the network ran
    td = make_rollout()
    wide = TensorDictModule(Head(squeeze=False), in_keys=["obs"], out_keys=["state_value"])  # [N, T, 1] values
    with pytest.raises(ValueError, match=r"'state_value' has shape \(3, 6, 1\)"):
        TDLambdaEstimator(GAMMA, LMBDA, wide)(td)
    assert "advantage" not in td and "value_target" not in td
    td = make_rollout()
    td["next", "done"] = td["next", "done"].float()
    with pytest.raises(TypeError, match=r"\('next', 'done'\) must be bool"):
        GAE(GAMMA, LMBDA, net)(td)
    with pytest.raises(KeyError, match=r"misses \(.{0,3}next.{0,6}reward"):
        GAE(GAMMA, LMBDA, net)(make_rollout().exclude(("next", "reward")))


def test_multi_objective_reward():
    torch.manual_seed(0)
    net = TensorDictModule(Head(out=2), in_keys=["obs"], out_keys=["state_value"])  # [N, T, 2] values
    td = make_rollout()
    td["next", "reward"] = torch.randn(N, T, 2)
    out = GAE(GAMMA, LMBDA, net)(td)
    assert out["advantage"].shape == (N, T, 2)
    d = td["next", "done"].unsqueeze(-1).expand(N, T, 2)
    term = td["next", "terminated"].unsqueeze(-1).expand(N, T, 2)
    adv, target = F.generalized_advantage_estimate(
        GAMMA, LMBDA, td["state_value"], td["next", "state_value"], td["next", "reward"], d, term, time_dim=1
    )
    torch.testing.assert_close(out["advantage"], adv.detach())
    torch.testing.assert_close(out["value_target"], target.detach())


# --------------------------------------------------------------------------- V-trace
def make_actor():
    torch.manual_seed(5)
    return ProbabilisticTensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(OBS, 4), NormalParamExtractor()), in_keys=["obs"], out_keys=["loc", "scale"]
        ),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )


def test_vtrace_matches_functional():
    net, actor = make_net(), make_actor()
    td = make_rollout()
    td["action"] = torch.randn(N, T, 2)
    behaviour = torch.randn(N, T) * 0.3 - 2.0
    td["action_log_prob"] = behaviour
    est = VTrace(GAMMA, actor, net, rho_thresh=1.5, c_thresh=0.9)
    assert est.tensor_keys.sample_log_prob == "action_log_prob"  # TorchRL 0.14's default
    assert "action_log_prob" in est.in_keys and "obs" in est.in_keys
    est(td)
    assert "loc" not in td and "scale" not in td  # the actor ran on a shallow copy
    with torch.no_grad():
        log_pi = actor.log_prob(td.copy())
    v, nv = values(net, td)
    adv, target = F.vtrace_advantage_estimate(
        GAMMA, log_pi, behaviour, v, nv, td["next", "reward"], td["next", "done"], td["next", "terminated"], 1.5, 0.9
    )
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    assert not td["advantage"].requires_grad
    torch.testing.assert_close(est.value_estimate(td), target)
    avg = VTrace(GAMMA, actor, net, rho_thresh=1.5, c_thresh=0.9, average_adv=True)(td.clone())
    torch.testing.assert_close(avg["advantage"], (adv - adv.mean()) / adv.std())


def test_vtrace_errors():
    net, actor = make_net(), make_actor()
    td = make_rollout()
    td["action"] = torch.randn(N, T, 2)
    with pytest.raises(KeyError, match="action_log_prob"):
        VTrace(GAMMA, actor, net)(td)
    td["action_log_prob"] = torch.zeros(N, T, 1)
    with pytest.raises(ValueError, match="'action_log_prob' has shape"):
        VTrace(GAMMA, actor, net)(td)
    with pytest.raises(TypeError, match="log_prob"):
        VTrace(GAMMA, net, net)
    with pytest.raises(ValueError, match="rho_thresh"):
        VTrace(GAMMA, actor, net, rho_thresh=0.0)


# --------------------------------------------------------------------------- misc
def test_value_estimators_enum():
    assert [m.value for m in ValueEstimators] == [
        "TD(0)",
        "TD(1)",
        "TD(lambda)",
        "GAE",
        "Multi-agent generalized advantage estimate",
        "VTrace",
    ]
    assert ValueEstimators("GAE") is ValueEstimators.GAE
    assert ValueEstimators("tdlambda") is ValueEstimators.TDLambda
    assert ValueEstimators.TD1 == "TD(1)" and ValueEstimators.TD1 != "TD(0)"
    # a plain Enum as in TorchRL: str() names the member (pytest ids, logs), hashing works
    assert not isinstance(ValueEstimators.GAE, str) and str(ValueEstimators.TD0) == "ValueEstimators.TD0"
    assert {ValueEstimators.GAE: 1}[ValueEstimators.GAE] == 1
    with pytest.raises(ValueError):
        ValueEstimators("TD(2)")


def test_keyword_call_and_time_dim_per_call():
    net = make_net()
    td = make_rollout()
    gae = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=net)
    expected = gae(td.clone())
    # TorchRL's dispatch: tensors named after the in-keys (nested ones joined with "_")
    kwargs = {("_".join(k) if isinstance(k, tuple) else k): td[k] for k in gae.in_keys}
    advantage, value_target = gae(**kwargs)
    # (no "time" name on the gathered batch: the last dim is time, as in the rollout)
    torch.testing.assert_close(advantage, expected["advantage"])
    torch.testing.assert_close(value_target, expected["value_target"])
    # time_dim for one call: the transposed rollout with time_dim=0 gives the transposed result
    flipped = td.clone().transpose(0, 1)
    out = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=net)(flipped, time_dim=0)
    torch.testing.assert_close(out["advantage"], expected["advantage"].transpose(0, 1))
    target = TD1Estimator(gamma=GAMMA, value_network=net).value_estimate(flipped, time_dim=0)
    reference = TD1Estimator(gamma=GAMMA, value_network=net).value_estimate(td.clone())
    torch.testing.assert_close(target, reference.transpose(0, 1))
    with pytest.raises(ValueError, match="time_dim=2 is out of range"):
        gae(td.clone(), time_dim=2)


def test_vtrace_composite_policy_sums_the_heads():
    # per-head behaviour log-probs (a list of keys) and a composite actor: both summed to the batch
    from tdict.nn import CompositeDistribution

    torch.manual_seed(0)
    lin = nn.Linear(OBS, 5)

    def params(obs):
        out = lin(obs)
        b = obs.shape[:-1]
        return TensorDict(
            cont=TensorDict(loc=out[..., :2], scale=torch.ones(*b, 2), batch_size=b),
            disc=TensorDict(logits=out[..., 2:], batch_size=b),
            batch_size=b,
        )

    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(params, in_keys=["obs"], out_keys=["params"]),
        ProbabilisticTensorDictModule(
            in_keys=["params"],
            distribution_class=CompositeDistribution,
            return_log_prob=True,
            distribution_kwargs={
                "distribution_map": {"cont": torch.distributions.Normal, "disc": torch.distributions.Categorical}
            },
        ),
    )
    net = make_net()
    td = make_rollout()
    td["cont"], td["disc"] = torch.randn(N, T, 2), torch.randint(3, (N, T))
    td["cont_log_prob"], td["disc_log_prob"] = torch.full((N, T), -2.0), torch.full((N, T), -1.0)
    est = VTrace(GAMMA, actor, net).set_keys(sample_log_prob=["cont_log_prob", "disc_log_prob"])
    est(td)
    with torch.no_grad():
        p = params(td["obs"])
        log_pi = torch.distributions.Normal(p["cont", "loc"], 1.0).log_prob(td["cont"]).sum(
            -1
        ) + torch.distributions.Categorical(logits=p["disc", "logits"]).log_prob(td["disc"])
    v, nv = values(net, td)
    adv, target = F.vtrace_advantage_estimate(
        GAMMA,
        log_pi,
        torch.full((N, T), -3.0),
        v,
        nv,
        td["next", "reward"],
        td["next", "done"],
        td["next", "terminated"],
    )
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    with pytest.raises(ValueError, match="non-empty list of keys"):
        est.set_keys(sample_log_prob=[])


def test_multi_agent_gae_broadcasts_the_team_reward():
    # per-agent values [N, T, A] and a team reward [N, T]: the same as GAE on the reward copied per agent
    A = 3
    g = torch.Generator().manual_seed(3)
    value, next_value = torch.randn(N, T, A, generator=g), torch.randn(N, T, A, generator=g)
    reward = torch.randn(N, T, generator=g)
    done = torch.zeros(N, T, dtype=torch.bool)
    done[:, 2] = True
    td = TensorDict(
        {
            "agents": TensorDict(state_value=value, batch_size=[N, T, A]),
            "next": {
                "agents": TensorDict(state_value=next_value, batch_size=[N, T, A]),
                "reward": reward,
                "done": done,
                "terminated": done,
            },
        },
        batch_size=[N, T],
    )
    from rl_objectives.value import MultiAgentGAE

    est = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=None).set_keys(value=("agents", "state_value"))
    est(td)
    shared = reward.unsqueeze(-1).expand(N, T, A)
    mask = done.unsqueeze(-1).expand(N, T, A)
    adv, target = F.generalized_advantage_estimate(GAMMA, LMBDA, value, next_value, shared, mask, mask, time_dim=1)
    assert td["advantage"].shape == (N, T, A)
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    # average_gae standardises per agent (over the batch and time, each agent on its own)
    avg = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=None, average_gae=True).set_keys(
        value=("agents", "state_value")
    )
    out = avg(td.clone())["advantage"]
    torch.testing.assert_close(out, (adv - adv.mean((0, 1), keepdim=True)) / adv.std((0, 1), keepdim=True))
    bad = td.clone()
    bad["next", "reward"] = torch.zeros(N, T, A, 2)
    with pytest.raises(ValueError, match=r"reward of shape \(3, 6, 3, 2\)"):
        est(bad)


def test_value_module_exposes_torchrl_names():
    import rl_objectives.value as value
    import rl_objectives.value.functional as vf

    # torchrl.objectives.value.__all__ (0.14.1) and its functional module's public functions
    assert sorted(value.__all__) == sorted(
        [
            "GAE",
            "MultiAgentGAE",
            "TD0Estimate",
            "TD0Estimator",
            "TD1Estimate",
            "TD1Estimator",
            "TDLambdaEstimate",
            "TDLambdaEstimator",
            "ValueEstimatorBase",
            "VTrace",
            "ValueEstimators",
        ]
    )
    expected = [
        "generalized_advantage_estimate",
        "reward2go",
        "td0_advantage_estimate",
        "td0_return_estimate",
        "td1_advantage_estimate",
        "td1_return_estimate",
        "td_lambda_advantage_estimate",
        "td_lambda_return_estimate",
        "vec_generalized_advantage_estimate",
        "vec_td1_advantage_estimate",
        "vec_td1_return_estimate",
        "vec_td_lambda_advantage_estimate",
        "vec_td_lambda_return_estimate",
        "vtrace_advantage_estimate",
    ]
    assert sorted(vf.__all__) == expected
    assert vf.vec_generalized_advantage_estimate is F.vec_generalized_advantage_estimate
    # the deprecated names still build the estimator, with a DeprecationWarning
    with pytest.warns(DeprecationWarning, match="TD0Estimate is deprecated, use TD0Estimator"):
        old = value.TD0Estimate(gamma=GAMMA, value_network=None)
    assert isinstance(old, TD0Estimator)
    td = make_rollout()
    td["state_value"], td["next", "state_value"] = torch.zeros(N, T), torch.ones(N, T)
    torch.testing.assert_close(old.value_estimate(td), TD0Estimator(GAMMA, None).value_estimate(td))


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: GAE(gamma=-0.1, lmbda=0.9, value_network=None), r"GAE: gamma must be in \[0, 1\], got -0.1"),
        (lambda: GAE(gamma=0.9, lmbda=1.5, value_network=None), r"GAE: lmbda must be in \[0, 1\], got 1.5"),
        (lambda: GAE(gamma=float("nan"), lmbda=0.9, value_network=None), r"gamma must be in \[0, 1\], got nan"),
        (
            lambda: GAE(gamma=torch.tensor([0.9, 1.2]), lmbda=0.9, value_network=None),
            r"gamma must be in \[0, 1\], got a tensor with values in \[0.9, 1.2\]",
        ),
        (
            lambda: TDLambdaEstimator(gamma=0.9, lmbda=torch.tensor(-0.5), value_network=None),
            r"lmbda must be in \[0, 1\], got -0.5",
        ),
        (lambda: TD0Estimator(gamma=2.0, value_network=None), r"TD0Estimator: gamma must be in \[0, 1\], got 2.0"),
        (lambda: TD1Estimator(gamma=-1, value_network=None), r"TD1Estimator: gamma must be in \[0, 1\], got -1"),
        (
            lambda: VTrace(gamma=1.01, actor_network=make_actor(), value_network=None),
            r"VTrace: gamma must be in \[0, 1\]",
        ),
    ],
)
def test_gamma_and_lmbda_outside_the_unit_interval_are_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_constructor_errors_and_module_layout():
    net = make_net()
    with pytest.raises(TypeError, match="gamma"):
        GAE("0.9", LMBDA, net)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="value_network"):
        TD0Estimator(GAMMA, value_network=3)
    est = GAE(GAMMA, LMBDA, net)
    assert isinstance(est, ValueEstimatorBase)
    assert list(est.parameters()) == []  # the owning loss holds the value network's parameters
    assert est.value_network is net


def test_compile_gae_forward_fullgraph_matches_eager():
    torch.compiler.reset()
    try:
        net = make_net()
        est = GAE(GAMMA, LMBDA, net)
        td = make_rollout()
        eager = est(td.clone())
        compiled = torch.compile(est, fullgraph=True, backend="eager")
        out = compiled(td.clone())
        for key in ("advantage", "value_target", "state_value", ("next", "state_value")):
            torch.testing.assert_close(out[key], eager[key])
    finally:
        torch.compiler.reset()


@pytest.mark.parametrize(
    "name",
    [
        "rl_objectives.functional",
        "rl_objectives.functional.value",
        "rl_objectives.functional.vtrace",
        "rl_objectives.value",
        "rl_objectives.value.base",
        "rl_objectives.value.advantages",
    ],
)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("average_rewards", [False, True])
@pytest.mark.parametrize("batch", [(6,), (2, 3)])
def test_td0_target_from_next_value_equals_value_estimate(batch, average_rewards):
    # the off-policy losses' one-step target: what value_estimate gives with the next value
    # written at ("next", "state_value"), without the write; n-step counts discount by gamma ** n
    torch.manual_seed(0)
    done = torch.rand(batch) < 0.3
    td = TensorDict(
        {
            "next": {"reward": torch.randn(batch), "done": done, "terminated": done & (torch.rand(batch) < 0.5)},
            "steps_to_next_obs": torch.randint(1, 4, batch),
        },
        batch_size=batch,
    )
    next_value = torch.randn(batch)
    est = TD0Estimator(gamma=0.9, value_network=None, average_rewards=average_rewards)
    got = est.target_from_next_value(td, next_value)
    work = td.clone()
    work["next", "state_value"] = next_value
    torch.testing.assert_close(got, est.value_estimate(work), rtol=0, atol=0)
    assert "state_value" not in td["next"].keys()
    if not average_rewards:
        gamma = 0.9 ** td["steps_to_next_obs"].float()
        expected = td["next", "reward"] + gamma * torch.where(td["next", "terminated"], 0.0, next_value)
        torch.testing.assert_close(got, expected)
    tracked = next_value.clone().requires_grad_(True)
    assert not est.target_from_next_value(td, tracked).requires_grad  # a target carries no gradient
    differentiable = TD0Estimator(gamma=0.9, value_network=None, average_rewards=average_rewards, differentiable=True)
    assert differentiable.target_from_next_value(td, tracked).requires_grad
    with pytest.raises(ValueError, match="state_value"):
        est.target_from_next_value(td, next_value.unsqueeze(-1))  # a [*B, 1] mix is refused, naming the keys
