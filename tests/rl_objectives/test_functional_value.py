"""rl_objectives.functional value estimators against textbook references written out below.

The references work on one env at a time with Python floats and the definitions as sums over
n-step returns (no recursion shared with the code under test).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.functional import (
    generalized_advantage_estimate,
    reward2go,
    td0_advantage_estimate,
    td0_return_estimate,
    td1_advantage_estimate,
    td1_return_estimate,
    td_lambda_advantage_estimate,
    td_lambda_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td1_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_advantage_estimate,
    vec_td_lambda_return_estimate,
    vtrace_advantage_estimate,
)

BATCHES = [(), (3,), (2, 3)]
T = 7


# --------------------------------------------------------------------------- data
def make_data(batch, steps=T, seed=0, p_done=0.3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    shape = (*batch, steps)
    done = torch.rand(shape, generator=g) < p_done
    terminated = done & (torch.rand(shape, generator=g) < 0.5)  # the rest of done is truncation
    return {
        "state_value": torch.randn(shape, generator=g, dtype=dtype),
        "next_state_value": torch.randn(shape, generator=g, dtype=dtype),
        "reward": torch.randn(shape, generator=g, dtype=dtype),
        "done": done,
        "terminated": terminated,
        "log_pi": torch.randn(shape, generator=g, dtype=dtype) * 0.5,
        "log_mu": torch.randn(shape, generator=g, dtype=dtype) * 0.5,
        "gamma_t": 0.8 + 0.19 * torch.rand(shape, generator=g, dtype=dtype),
        "lmbda_t": 0.5 + 0.5 * torch.rand(shape, generator=g, dtype=dtype),
    }


def per_env(ref, data, names, shape, **scalars):
    """Run ``ref`` (lists of floats for one env -> list or tuple of lists) for every env of
    ``[*B, T]`` inputs; per-step coefficients given as tensors are split the same way."""
    steps = shape[-1]
    flat = {name: data[name].reshape(-1, steps).tolist() for name in names}
    coefs = {}
    for key, value in scalars.items():
        if isinstance(value, torch.Tensor):
            coefs[key] = value.broadcast_to(shape).reshape(-1, steps).tolist()
        else:
            coefs[key] = None
    outs = []
    for i in range(len(next(iter(flat.values())))):
        kwargs = {name: flat[name][i] for name in names}
        for key, value in scalars.items():
            kwargs[key] = coefs[key][i] if coefs[key] is not None else [value] * steps
        outs.append(ref(**kwargs))
    if isinstance(outs[0], tuple):
        return tuple(
            torch.tensor([o[j] for o in outs], dtype=torch.float64).reshape(shape) for j in range(len(outs[0]))
        )
    return torch.tensor(outs, dtype=torch.float64).reshape(shape)


def trajectory_end(t, done, steps):
    """Index of the last step of the trajectory containing t, inside the window."""
    k = t
    while k < steps - 1 and not done[k]:
        k += 1
    return k


def n_step_return(t, n, reward, next_state_value, terminated, gamma):
    """sum_{k<n} (prod_{j<k} gamma_{t+j}) r_{t+k} + (prod_{j<n} gamma_{t+j}) V'_{t+n-1} (0 if terminated)."""
    total, disc = 0.0, 1.0
    for k in range(n):
        total += disc * reward[t + k]
        disc *= gamma[t + k]
    last = t + n - 1
    return total + (0.0 if terminated[last] else disc * next_state_value[last])


def ref_td_lambda(state_value, next_state_value, reward, done, terminated, gamma, lmbda):
    """The lambda-return as the (1 - lambda) lambda^(n-1) weighted sum of n-step returns; the last
    available n-step return (to the trajectory or window end) takes the remaining weight."""
    steps = len(reward)
    out = []
    for t in range(steps):
        horizon = trajectory_end(t, done, steps) - t + 1
        lam = lmbda[t]
        g = 0.0
        for n in range(1, horizon):
            g += (1 - lam) * lam ** (n - 1) * n_step_return(t, n, reward, next_state_value, terminated, gamma)
        g += lam ** (horizon - 1) * n_step_return(t, horizon, reward, next_state_value, terminated, gamma)
        out.append(g)
    return out


def ref_gae(state_value, next_state_value, reward, done, terminated, gamma, lmbda):
    """A_t = sum_k (prod_{j<k} gamma_{t+j} lambda_{t+j}) delta_{t+k} over the rest of the trajectory."""
    steps = len(reward)
    delta = [
        reward[t] + (0.0 if terminated[t] else gamma[t] * next_state_value[t]) - state_value[t] for t in range(steps)
    ]
    adv = []
    for t in range(steps):
        end = trajectory_end(t, done, steps)
        a, w = 0.0, 1.0
        for k in range(t, end + 1):
            a += w * delta[k]
            w *= gamma[k] * lmbda[k]
        adv.append(a)
    return adv, [a + v for a, v in zip(adv, state_value)]


def ref_vtrace(
    state_value, next_state_value, reward, done, terminated, log_pi, log_mu, gamma, rho_thresh=1.0, c_thresh=1.0
):
    """Espeholt et al. (2018), eq. (1), truncated at trajectory ends; advantage per section 4.2."""
    steps = len(reward)
    rho = [math.exp(a - b) for a, b in zip(log_pi, log_mu)]
    rho_bar = [min(rho_thresh, r) for r in rho]
    c = [min(c_thresh, r) for r in rho]
    nv = [0.0 if terminated[t] else next_state_value[t] for t in range(steps)]
    delta = [rho_bar[t] * (reward[t] + gamma[t] * nv[t] - state_value[t]) for t in range(steps)]
    vs = []
    for s in range(steps):
        end = trajectory_end(s, done, steps)
        total, w = state_value[s], 1.0
        for t in range(s, end + 1):
            total += w * delta[t]
            w *= gamma[t] * c[t]
        vs.append(total)
    adv = []
    for s in range(steps):
        following = nv[s] if (done[s] or s == steps - 1) else vs[s + 1]
        adv.append(rho_bar[s] * (reward[s] + gamma[s] * following - state_value[s]))
    return adv, vs


def ref_reward2go(reward, done, gamma):
    steps = len(reward)
    out = []
    for t in range(steps):
        g, disc = 0.0, 1.0
        for k in range(t, trajectory_end(t, done, steps) + 1):
            g += disc * reward[k]
            disc *= gamma[k]
        out.append(g)
    return out


def coefs(data, kind):
    if kind == "float":
        return 0.9, 0.8
    return data["gamma_t"], data["lmbda_t"]


COMMON = ["state_value", "next_state_value", "reward", "done", "terminated"]


def args(data, *names):
    return [data[n] for n in names]


# --------------------------------------------------------------------------- against the references
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
@pytest.mark.parametrize("fn", [generalized_advantage_estimate, vec_generalized_advantage_estimate])
def test_gae_matches_reference(batch, kind, fn):
    data = make_data(batch, seed=len(batch))
    gamma, lmbda = coefs(data, kind)
    adv, target = fn(gamma, lmbda, *args(data, *COMMON))
    ref_adv, ref_target = per_env(ref_gae, data, COMMON, adv.shape, gamma=gamma, lmbda=lmbda)
    assert adv.shape == target.shape == (*batch, T)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(target, ref_target)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
@pytest.mark.parametrize("vec", [False, True])
def test_td_lambda_matches_reference(batch, kind, vec):
    data = make_data(batch, seed=10 + len(batch))
    gamma, lmbda = coefs(data, kind)
    if kind == "tensor":  # the n-step-sum reference takes one lambda per row: per-step gamma, fixed lambda
        lmbda = 0.7
    ret_fn = vec_td_lambda_return_estimate if vec else td_lambda_return_estimate
    adv_fn = vec_td_lambda_advantage_estimate if vec else td_lambda_advantage_estimate
    ret = ret_fn(gamma, lmbda, *args(data, "next_state_value", "reward", "done", "terminated"))
    ref = per_env(ref_td_lambda, data, COMMON, ret.shape, gamma=gamma, lmbda=lmbda)
    torch.testing.assert_close(ret, ref)
    adv = adv_fn(gamma, lmbda, *args(data, *COMMON))
    torch.testing.assert_close(adv, ref - data["state_value"])


@pytest.mark.parametrize("vec", [False, True])
def test_td_lambda_per_step_lambda_matches_recursion(vec):
    # with lambda_t varying per step the textbook form is the recursion
    # G_t = r_t + gamma_t ((1 - lambda_t) V'_t + lambda_t G_{t+1}), G_{t+1} := V'_t at an end
    data = make_data((3,), seed=5)
    fn = vec_td_lambda_return_estimate if vec else td_lambda_return_estimate
    ret = fn(data["gamma_t"], data["lmbda_t"], *args(data, "next_state_value", "reward", "done", "terminated"))

    def ref(state_value, next_state_value, reward, done, terminated, gamma, lmbda):
        out, g = [0.0] * len(reward), None
        for t in reversed(range(len(reward))):
            nv = 0.0 if terminated[t] else next_state_value[t]
            follow = nv if (done[t] or g is None) else g
            g = reward[t] + gamma[t] * ((1 - lmbda[t]) * nv + lmbda[t] * follow)
            out[t] = g
        return out

    torch.testing.assert_close(ret, per_env(ref, data, COMMON, ret.shape, gamma=data["gamma_t"], lmbda=data["lmbda_t"]))


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("lmbda", [0.7, 1.0])
def test_rolling_gamma_false_discounts_each_return_with_its_start_step(batch, lmbda):
    # TorchRL's rolling_gamma=False: G_t uses gamma_t (and lmbda_t) at every later step, i.e. the
    # n-step-sum reference run with the constant discount gamma_t, read at t
    data = make_data(batch, seed=30 + len(batch))
    gamma = data["gamma_t"]
    inputs = args(data, "next_state_value", "reward", "done", "terminated")
    ret = td_lambda_return_estimate(gamma, lmbda, *inputs, rolling_gamma=False)

    def ref(state_value, next_state_value, reward, done, terminated, gamma, lmbda):
        return [
            ref_td_lambda(state_value, next_state_value, reward, done, terminated, [gamma[t]] * len(reward), lmbda)[t]
            for t in range(len(reward))
        ]

    expected = per_env(ref, data, COMMON, ret.shape, gamma=gamma, lmbda=lmbda)
    torch.testing.assert_close(ret, expected)
    adv = td_lambda_advantage_estimate(gamma, lmbda, *args(data, *COMMON), rolling_gamma=False)
    torch.testing.assert_close(adv, expected - data["state_value"])
    if lmbda == 1.0:
        torch.testing.assert_close(td1_return_estimate(gamma, *inputs, rolling_gamma=False), expected)
    # True and None are the per-step rule; a number makes the switch moot
    for rolling in (True, None):
        torch.testing.assert_close(
            td_lambda_return_estimate(gamma, lmbda, *inputs, rolling_gamma=rolling),
            td_lambda_return_estimate(gamma, lmbda, *inputs),
        )
    torch.testing.assert_close(
        td_lambda_return_estimate(0.9, lmbda, *inputs, rolling_gamma=False),
        td_lambda_return_estimate(0.9, lmbda, *inputs),
    )


def test_rolling_gamma_false_is_loop_only_and_checked():
    data = make_data((3,), seed=4)
    gamma = data["gamma_t"]
    for fn, extra in (
        (vec_td_lambda_advantage_estimate, (0.7,)),
        (vec_td_lambda_return_estimate, (0.7,)),
        (vec_td1_advantage_estimate, ()),
        (vec_td1_return_estimate, ()),
    ):
        names = COMMON if "advantage" in fn.__name__ else ["next_state_value", "reward", "done", "terminated"]
        with pytest.raises(NotImplementedError, match=f"call {fn.__name__[4:]}, the loop version"):
            fn(gamma, *extra, *args(data, *names), rolling_gamma=False)
    with pytest.raises(TypeError, match="rolling_gamma must be True, False or None"):
        td_lambda_return_estimate(gamma, 0.7, *args(data, "next_state_value", "reward", "done"), rolling_gamma=0)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
@pytest.mark.parametrize("vec", [False, True])
def test_td1_matches_monte_carlo_reference(batch, kind, vec):
    data = make_data(batch, seed=20 + len(batch))
    gamma, _ = coefs(data, kind)

    def ref(state_value, next_state_value, reward, done, terminated, gamma):
        steps = len(reward)
        return [
            n_step_return(t, trajectory_end(t, done, steps) - t + 1, reward, next_state_value, terminated, gamma)
            for t in range(steps)
        ]

    ret_fn = vec_td1_return_estimate if vec else td1_return_estimate
    adv_fn = vec_td1_advantage_estimate if vec else td1_advantage_estimate
    ret = ret_fn(gamma, *args(data, "next_state_value", "reward", "done", "terminated"))
    expected = per_env(ref, data, COMMON, ret.shape, gamma=gamma)
    torch.testing.assert_close(ret, expected)
    torch.testing.assert_close(adv_fn(gamma, *args(data, *COMMON)), expected - data["state_value"])


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
def test_td0_matches_reference(batch, kind):
    data = make_data(batch, seed=30 + len(batch))
    gamma, _ = coefs(data, kind)

    def ref(state_value, next_state_value, reward, done, terminated, gamma):
        return [r + (0.0 if term else g * nv) for r, term, g, nv in zip(reward, terminated, gamma, next_state_value)]

    ret = td0_return_estimate(gamma, *args(data, "next_state_value", "reward", "terminated"))
    expected = per_env(ref, data, COMMON, ret.shape, gamma=gamma)
    torch.testing.assert_close(ret, expected)
    torch.testing.assert_close(td0_advantage_estimate(gamma, *args(data, *COMMON)), expected - data["state_value"])
    # TorchRL's older call: done read as terminated
    torch.testing.assert_close(
        td0_return_estimate(gamma, data["next_state_value"], data["reward"], done=data["terminated"]), expected
    )


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
@pytest.mark.parametrize("thresh", [(1.0, 1.0), (2.0, 0.5)])
def test_vtrace_matches_reference(batch, kind, thresh):
    data = make_data(batch, seed=40 + len(batch))
    gamma, _ = coefs(data, kind)
    rho_thresh, c_thresh = thresh
    adv, target = vtrace_advantage_estimate(
        gamma, data["log_pi"], data["log_mu"], *args(data, *COMMON), rho_thresh=rho_thresh, c_thresh=c_thresh
    )

    def ref(state_value, next_state_value, reward, done, terminated, log_pi, log_mu, gamma):
        return ref_vtrace(
            state_value, next_state_value, reward, done, terminated, log_pi, log_mu, gamma, rho_thresh, c_thresh
        )

    ref_adv, ref_target = per_env(ref, data, COMMON + ["log_pi", "log_mu"], adv.shape, gamma=gamma)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(target, ref_target)


def test_vtrace_on_policy_is_td1():
    # rho = c = 1 everywhere: v_s is the TD(1) return (Espeholt et al., remark after eq. 1) when the
    # next values are consistent (V'_t = V_{t+1} inside trajectories), so that the deltas telescope
    data = make_data((2, 3), seed=3)
    v, nv = data["state_value"], data["next_state_value"]
    data["next_state_value"] = torch.where(data["done"], nv, torch.cat([v[..., 1:], nv[..., -1:]], -1))
    _, target = vtrace_advantage_estimate(0.9, data["log_pi"], data["log_pi"], *args(data, *COMMON))
    torch.testing.assert_close(
        target, td1_return_estimate(0.9, *args(data, "next_state_value", "reward", "done", "terminated"))
    )


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", ["float", "tensor"])
def test_reward2go_matches_reference(batch, kind):
    data = make_data(batch, seed=50 + len(batch))
    gamma, _ = coefs(data, kind)
    out = reward2go(data["reward"], data["done"], gamma)
    torch.testing.assert_close(out, per_env(ref_reward2go, data, ["reward", "done"], out.shape, gamma=gamma))


# --------------------------------------------------------------------------- hand-computed cases
# T = 3, gamma = lambda = 0.5, V = [1, 2, 3], V' = [2, 3, 4], r = [1, 1, 1], the episode ends at step 1.
HAND = {
    "state_value": torch.tensor([1.0, 2.0, 3.0]),
    "next_state_value": torch.tensor([2.0, 3.0, 4.0]),
    "reward": torch.ones(3),
    "done": torch.tensor([False, True, False]),
}
TERMINATED = torch.tensor([False, True, False])
TRUNCATED = torch.zeros(3, dtype=torch.bool)  # done but not terminated: bootstrap from V'_1 = 3


@pytest.mark.parametrize("vec", [False, True])
def test_gae_terminated_vs_truncated_by_hand(vec):
    fn = vec_generalized_advantage_estimate if vec else generalized_advantage_estimate
    h = HAND
    # terminated: delta = [1 + .5*2 - 1, 1 + 0 - 2, 1 + .5*4 - 3] = [1, -1, 0]; A_0 = 1 + .25 * (-1)
    adv, target = fn(0.5, 0.5, h["state_value"], h["next_state_value"], h["reward"], h["done"], TERMINATED)
    torch.testing.assert_close(adv, torch.tensor([0.75, -1.0, 0.0]))
    torch.testing.assert_close(target, torch.tensor([1.75, 1.0, 3.0]))
    # truncated: delta_1 = 1 + .5*3 - 2 = 0.5; A_0 = 1 + .25 * 0.5; A_2 never sees A_1
    adv, _ = fn(0.5, 0.5, h["state_value"], h["next_state_value"], h["reward"], h["done"], TRUNCATED)
    torch.testing.assert_close(adv, torch.tensor([1.125, 0.5, 0.0]))
    # terminated=None reads done (= terminated here)
    adv, _ = fn(0.5, 0.5, h["state_value"], h["next_state_value"], h["reward"], h["done"])
    torch.testing.assert_close(adv, torch.tensor([0.75, -1.0, 0.0]))


@pytest.mark.parametrize("vec", [False, True])
def test_td_lambda_and_td1_terminated_vs_truncated_by_hand(vec):
    lam = vec_td_lambda_return_estimate if vec else td_lambda_return_estimate
    td1 = vec_td1_return_estimate if vec else td1_return_estimate
    h = HAND
    nv, r, d = h["next_state_value"], h["reward"], h["done"]
    # G_2 = 1 + .5*4 = 3 (window end); terminated: G_1 = 1, G_0 = 1 + .5*(.5*2 + .5*1) = 1.75
    torch.testing.assert_close(lam(0.5, 0.5, nv, r, d, TERMINATED), torch.tensor([1.75, 1.0, 3.0]))
    # truncated: G_1 = 1 + .5*3 = 2.5, G_0 = 1 + .5*(.5*2 + .5*2.5) = 2.125
    torch.testing.assert_close(lam(0.5, 0.5, nv, r, d, TRUNCATED), torch.tensor([2.125, 2.5, 3.0]))
    # TD(1): terminated G_0 = 1 + .5*1 = 1.5; truncated G_0 = 1 + .5*2.5 = 2.25
    torch.testing.assert_close(td1(0.5, nv, r, d, TERMINATED), torch.tensor([1.5, 1.0, 3.0]))
    torch.testing.assert_close(td1(0.5, nv, r, d, TRUNCATED), torch.tensor([2.25, 2.5, 3.0]))


def test_td0_terminated_vs_truncated_by_hand():
    h = HAND
    nv, r = h["next_state_value"], h["reward"]
    torch.testing.assert_close(td0_return_estimate(0.5, nv, r, TERMINATED), torch.tensor([2.0, 1.0, 3.0]))
    torch.testing.assert_close(td0_return_estimate(0.5, nv, r, TRUNCATED), torch.tensor([2.0, 2.5, 3.0]))


def test_vtrace_terminated_vs_truncated_by_hand():
    h = HAND
    zeros = torch.zeros(3)
    # on-policy, thresholds 1: terminated delta = [1, -1, 0], vs = [1 + 1 - .5, 2 - 1, 3] = [1.5, 1, 3]
    adv, vs = vtrace_advantage_estimate(
        0.5, zeros, zeros, h["state_value"], h["next_state_value"], h["reward"], h["done"], TERMINATED
    )
    torch.testing.assert_close(vs, torch.tensor([1.5, 1.0, 3.0]))
    # adv_0 = 1 + .5*vs_1 - 1, adv_1 = 1 + 0 - 2 (terminated), adv_2 = 1 + .5*4 - 3
    torch.testing.assert_close(adv, torch.tensor([0.5, -1.0, 0.0]))
    adv, vs = vtrace_advantage_estimate(
        0.5, zeros, zeros, h["state_value"], h["next_state_value"], h["reward"], h["done"], TRUNCATED
    )
    torch.testing.assert_close(vs, torch.tensor([2.25, 2.5, 3.0]))
    torch.testing.assert_close(adv, torch.tensor([1.25, 0.5, 0.0]))
    # off-policy at step 0: rho = 4 is clipped to rho_thresh = 2; c_0 = min(1, 4) = 1
    log_pi = torch.tensor([math.log(4.0), 0.0, 0.0])
    adv, vs = vtrace_advantage_estimate(
        0.5, log_pi, zeros, h["state_value"], h["next_state_value"], h["reward"], h["done"], TRUNCATED, rho_thresh=2.0
    )
    torch.testing.assert_close(vs, torch.tensor([1 + 2 * 1.0 + 0.5 * 0.5, 2.5, 3.0]))
    torch.testing.assert_close(adv, torch.tensor([2 * (1 + 0.5 * 2.5 - 1), 0.5, 0.0]))


def test_reward2go_by_hand():
    out = reward2go(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([False, True, False, False]), 0.5)
    torch.testing.assert_close(out, torch.tensor([2.0, 2.0, 5.0, 4.0]))


# --------------------------------------------------------------------------- loop vs vectorised
@settings(max_examples=40)
@given(
    steps=st.integers(1, 12),
    batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    data=st.data(),
    per_step=st.booleans(),
)
def test_loop_and_vectorised_agree(steps, batch, data, per_step):
    n = math.prod(batch) * steps
    codes = data.draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=n, max_size=n))  # 1 truncated, 2 terminated
    codes = torch.tensor(codes).reshape(*batch, steps)
    done, terminated = codes > 0, codes == 2
    d = make_data(batch, steps, seed=steps)
    gamma, lmbda = (d["gamma_t"], d["lmbda_t"]) if per_step else (0.95, 0.9)
    v, nv, r = d["state_value"], d["next_state_value"], d["reward"]
    a1, t1 = generalized_advantage_estimate(gamma, lmbda, v, nv, r, done, terminated)
    a2, t2 = vec_generalized_advantage_estimate(gamma, lmbda, v, nv, r, done, terminated)
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(t1, t2)
    torch.testing.assert_close(
        td_lambda_return_estimate(gamma, lmbda, nv, r, done, terminated),
        vec_td_lambda_return_estimate(gamma, lmbda, nv, r, done, terminated),
    )
    torch.testing.assert_close(
        td1_return_estimate(gamma, nv, r, done, terminated), vec_td1_return_estimate(gamma, nv, r, done, terminated)
    )
    # GAE's value target is the TD(lambda) return when V'_t = V_{t+1} inside trajectories
    consistent_nv = torch.cat([v[..., 1:], nv[..., -1:]], -1)
    consistent_nv = torch.where(done, nv, consistent_nv)
    _, target = vec_generalized_advantage_estimate(gamma, lmbda, v, consistent_nv, r, done, terminated)
    torch.testing.assert_close(target, vec_td_lambda_return_estimate(gamma, lmbda, consistent_nv, r, done, terminated))


# --------------------------------------------------------------------------- feature dims, time_dim
@pytest.mark.parametrize("time_dim", [-2, 1])
def test_feature_dims_after_time(time_dim):
    # a [B, T, F] multi-objective reward: each feature column is an independent estimate
    data = make_data((2,), seed=7)
    feats = {k: torch.stack([data[k], data[k].flip(-1)], -1) for k in COMMON}  # [2, T, 2]
    gamma = data["gamma_t"].unsqueeze(-1)  # per-step gamma with a trailing 1 for the feature dim
    adv, target = vec_generalized_advantage_estimate(gamma, 0.9, *args(feats, *COMMON), time_dim=time_dim)
    loop_adv, _ = generalized_advantage_estimate(gamma, 0.9, *args(feats, *COMMON), time_dim=time_dim)
    ret = vec_td_lambda_return_estimate(
        gamma, 0.9, *args(feats, "next_state_value", "reward", "done", "terminated"), time_dim=time_dim
    )
    assert adv.shape == target.shape == ret.shape == (2, T, 2)
    torch.testing.assert_close(adv, loop_adv)
    for f in range(2):
        cols = [feats[k][..., f] for k in COMMON]
        exp_adv, exp_target = vec_generalized_advantage_estimate(data["gamma_t"], 0.9, *cols)
        torch.testing.assert_close(adv[..., f], exp_adv)
        torch.testing.assert_close(target[..., f], exp_target)
        torch.testing.assert_close(ret[..., f], vec_td_lambda_return_estimate(data["gamma_t"], 0.9, *cols[1:]))


def test_time_dim_first():
    data = make_data((3,), seed=8)
    moved = {k: v.movedim(-1, 0) for k, v in data.items()}  # [T, 3]
    adv, _ = vec_generalized_advantage_estimate(0.9, 0.8, *args(moved, *COMMON), time_dim=0)
    exp, _ = vec_generalized_advantage_estimate(0.9, 0.8, *args(data, *COMMON))
    torch.testing.assert_close(adv, exp.movedim(-1, 0))
    r2g = reward2go(moved["reward"], moved["done"], 0.9, time_dim=0)
    torch.testing.assert_close(r2g, reward2go(data["reward"], data["done"], 0.9).movedim(-1, 0))


# --------------------------------------------------------------------------- errors
def test_shape_mix_raises_naming_both_arguments():
    v = torch.zeros(2, 4)
    done = torch.zeros(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"reward has shape \(2, 4, 1\).*state_value has shape \(2, 4\)"):
        vec_generalized_advantage_estimate(0.9, 0.9, v, v, torch.zeros(2, 4, 1), done)
    with pytest.raises(ValueError, match=r"done has shape \(2, 4, 1\)"):
        td_lambda_return_estimate(0.9, 0.9, v, v, done.unsqueeze(-1))
    with pytest.raises(ValueError, match="log_mu"):
        vtrace_advantage_estimate(0.9, v, v[:, :1], v, v, v, done)
    with pytest.raises(ValueError, match="reward"):
        td0_return_estimate(0.9, v, v.unsqueeze(-1), done)


def test_bad_inputs_raise():
    v = torch.zeros(2, 4)
    done = torch.zeros(2, 4, dtype=torch.bool)
    with pytest.raises(TypeError, match="done must be a bool tensor"):
        vec_generalized_advantage_estimate(0.9, 0.9, v, v, v, done.float())
    with pytest.raises(TypeError, match="terminated must be a bool tensor"):
        td1_return_estimate(0.9, v, v, done, done.long())
    with pytest.raises(ValueError, match="time_dim=2 is out of range"):
        reward2go(v, done, 0.9, time_dim=2)
    with pytest.raises(ValueError, match="gamma of shape"):
        vec_td_lambda_return_estimate(torch.ones(3), 0.9, v, v, done)
    with pytest.raises(TypeError, match="lmbda must be a number or a tensor"):
        generalized_advantage_estimate(0.9, "0.9", v, v, v, done)
    with pytest.raises(ValueError, match="empty"):
        reward2go(torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.bool), 0.9)
    with pytest.raises(ValueError, match="terminated"):
        td0_return_estimate(0.9, v, v)


# --------------------------------------------------------------------------- autograd, no in-place
def test_differentiable_and_inputs_untouched():
    data = make_data((2,), steps=5, seed=9)
    v = data["state_value"].clone().requires_grad_(True)
    nv = data["next_state_value"].clone().requires_grad_(True)
    before = {k: t.clone() for k, t in data.items()}
    for fn in (generalized_advantage_estimate, vec_generalized_advantage_estimate):
        torch.autograd.gradcheck(
            lambda a, b, fn=fn: fn(0.9, 0.8, a, b, data["reward"], data["done"], data["terminated"])[0], (v, nv)
        )
    torch.autograd.gradcheck(
        lambda b: vec_td_lambda_return_estimate(0.9, 0.8, b, data["reward"], data["done"], data["terminated"]), (nv,)
    )
    torch.autograd.gradcheck(
        lambda a, b: vtrace_advantage_estimate(0.9, data["log_pi"], data["log_mu"], a, b, data["reward"], data["done"])[
            1
        ],
        (v, nv),
    )
    # the loop and the scan give the same gradient
    g1 = torch.autograd.grad(
        generalized_advantage_estimate(0.9, 0.8, v, nv, data["reward"], data["done"])[0].sum(), (v, nv)
    )
    g2 = torch.autograd.grad(
        vec_generalized_advantage_estimate(0.9, 0.8, v, nv, data["reward"], data["done"])[0].sum(), (v, nv)
    )
    torch.testing.assert_close(g1, g2)
    for k, t in before.items():
        assert torch.equal(t, data[k]), k


def test_float32_in_float32_out():
    data = make_data((3,), seed=11, dtype=torch.float32)
    adv, target = vec_generalized_advantage_estimate(0.99, 0.95, *args(data, *COMMON))
    assert adv.dtype == target.dtype == torch.float32
    assert (
        vec_td_lambda_return_estimate(0.99, 0.95, *args(data, "next_state_value", "reward", "done")).dtype
        == torch.float32
    )


# --------------------------------------------------------------------------- torch.compile
def test_compile_vec_gae_fullgraph_matches_eager():
    torch.compiler.reset()
    try:
        data = make_data((2, 3), seed=12, dtype=torch.float32)

        def f(v, nv, r, d, term):
            return vec_generalized_advantage_estimate(0.99, 0.95, v, nv, r, d, term)

        compiled = torch.compile(f, fullgraph=True, backend="eager")
        out = compiled(*args(data, *COMMON))
        exp = f(*args(data, *COMMON))
        torch.testing.assert_close(out, exp)
    finally:
        torch.compiler.reset()


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda v, r, d: generalized_advantage_estimate(-0.5, 0.9, v, v, r, d),
            r"generalized_advantage_estimate: gamma must be in \[0, 1\], got -0.5",
        ),
        (
            lambda v, r, d: vec_generalized_advantage_estimate(0.9, 1.1, v, v, r, d),
            r"vec_generalized_advantage_estimate: lmbda must be in \[0, 1\], got 1.1",
        ),
        (lambda v, r, d: td0_return_estimate(1.5, v, r, d), r"td0_return_estimate: gamma must be in \[0, 1\], got 1.5"),
        (
            lambda v, r, d: vec_td_lambda_return_estimate(0.9, torch.full((2, 4), 2.0), v, r, d),
            r"lmbda must be in \[0, 1\], got a tensor with values in \[2, 2\]",
        ),
        (
            lambda v, r, d: td1_return_estimate(torch.tensor(-1.0), v, r, d),
            r"td1_return_estimate: gamma must be in \[0, 1\], got -1",
        ),
        (lambda v, r, d: reward2go(r, d, 3.0), r"reward2go: gamma must be in \[0, 1\], got 3.0"),
        (
            lambda v, r, d: vtrace_advantage_estimate(float("nan"), v, v, v, v, r, d),
            r"vtrace_advantage_estimate: gamma must be in \[0, 1\], got nan",
        ),
    ],
)
def test_gamma_and_lmbda_outside_the_unit_interval_raise(call, match):
    v, r, d = torch.zeros(2, 4), torch.ones(2, 4), torch.zeros(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        call(v, r, d)
    # the bounds themselves are valid discounts
    adv, _ = generalized_advantage_estimate(1.0, 0.0, v, v, r, d)
    torch.testing.assert_close(adv, r)
    torch.testing.assert_close(td0_return_estimate(0.0, torch.full((2, 4), 5.0), r, d), r)
