"""rl_kernels.gae / td_lambda_return / vtrace against textbook loops (and rl-objectives' estimators)."""

from __future__ import annotations

import pytest
import torch

from rl_kernels import gae, td_lambda_return, vtrace

BACKENDS = ["torch", "triton"]


# --------------------------------------------------------------------------- references (time last)
def ref_gae(gamma, lmbda, value, next_value, reward, done, terminated):
    gamma, lmbda = (
        torch.as_tensor(v, dtype=reward.dtype, device=reward.device).expand_as(reward) for v in (gamma, lmbda)
    )
    adv, out = torch.zeros_like(reward[..., 0]), []
    for t in reversed(range(reward.shape[-1])):
        nv = torch.where(terminated[..., t], 0.0, next_value[..., t])
        delta = reward[..., t] + gamma[..., t] * nv - value[..., t]
        adv = delta + gamma[..., t] * lmbda[..., t] * torch.where(done[..., t], 0.0, adv)
        out.append(adv)
    adv = torch.stack(out[::-1], -1)
    return adv, adv + value


def ref_td_lambda(gamma, lmbda, next_value, reward, done, terminated):
    gamma, lmbda = (
        torch.as_tensor(v, dtype=reward.dtype, device=reward.device).expand_as(reward) for v in (gamma, lmbda)
    )
    steps, out, ret = reward.shape[-1], [], torch.zeros_like(reward[..., 0])
    for t in reversed(range(steps)):
        nv = torch.where(terminated[..., t], 0.0, next_value[..., t])
        follow = nv if t == steps - 1 else torch.where(done[..., t] | terminated[..., t], nv, ret)
        ret = reward[..., t] + gamma[..., t] * ((1 - lmbda[..., t]) * nv + lmbda[..., t] * follow)
        out.append(ret)
    return torch.stack(out[::-1], -1)


def ref_vtrace(gamma, log_pi, log_mu, value, next_value, reward, done, terminated, rho_thresh=1.0, c_thresh=1.0):
    gamma = torch.as_tensor(gamma, dtype=reward.dtype, device=reward.device).expand_as(reward)
    rho = (log_pi - log_mu).exp()
    rho_bar, c = rho.clamp(max=rho_thresh), rho.clamp(max=c_thresh)
    steps = reward.shape[-1]
    vs, adv = [None] * steps, [None] * steps
    for t in reversed(range(steps)):
        nv = torch.where(terminated[..., t], 0.0, next_value[..., t])
        end = done[..., t] | terminated[..., t]
        delta = rho_bar[..., t] * (reward[..., t] + gamma[..., t] * nv - value[..., t])
        corr = 0.0 if t == steps - 1 else torch.where(end, 0.0, vs[t + 1] - value[..., t + 1])
        vs[t] = value[..., t] + delta + gamma[..., t] * c[..., t] * corr
        v_next = nv if t == steps - 1 else torch.where(end, nv, vs[t + 1])
        adv[t] = rho_bar[..., t] * (reward[..., t] + gamma[..., t] * v_next - value[..., t])
    return torch.stack(adv, -1), torch.stack(vs, -1)


def rollout(shape, dtype=torch.float32, device="cpu", p=0.2):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()).item()))

    def rnd():
        return torch.randn(shape, generator=g, dtype=dtype).to(device)

    terminated = torch.rand(shape, generator=g) < p / 2
    done = (terminated | (torch.rand(shape, generator=g) < p / 2)).to(device)
    return {
        "value": rnd(),
        "next_value": rnd(),
        "reward": rnd(),
        "log_pi": 0.3 * rnd(),
        "log_mu": 0.3 * rnd(),
        "done": done,
        "terminated": terminated.to(device),
    }


def _need(backend):
    if backend == "triton":
        pytest.importorskip("triton")


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# --------------------------------------------------------------------------- the references themselves
def test_references_closed_form():
    v, nv, r = torch.zeros(3), torch.ones(3), torch.ones(3)
    done = torch.tensor([False, True, False])
    adv, _ = ref_gae(0.5, 1.0, v, nv, r, done, done)
    _close(adv, torch.tensor([2.0, 1.0, 1.5]))  # terminated at step 1: no bootstrap, no recursion there
    no = torch.zeros(2, dtype=torch.bool)
    _close(ref_td_lambda(1.0, 0.5, torch.tensor([2.0, 4.0]), torch.zeros(2), no, no), torch.tensor([3.0, 4.0]))
    z = torch.zeros(2)
    adv, vs = ref_vtrace(1.0, z, z, z, torch.ones(2), torch.ones(2), no, no)
    _close(vs, torch.tensor([4.0, 2.0]))
    _close(adv, torch.tensor([3.0, 2.0]))


def test_references_finite_differences():
    d = rollout((2, 6), torch.float64)
    inputs = [d[k].clone().requires_grad_(True) for k in ("value", "next_value", "reward")]
    m = (d["done"], d["terminated"])
    assert torch.autograd.gradcheck(lambda v, nv, r: ref_gae(0.9, 0.8, v, nv, r, *m), inputs)
    assert torch.autograd.gradcheck(lambda v, nv, r: ref_td_lambda(0.9, 0.8, nv, r, *m) + 0 * v, inputs)
    lp = d["log_pi"].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda lp, v, nv, r: ref_vtrace(0.9, lp, d["log_mu"], v, nv, r, *m, 1.5, 1.2), [lp, *inputs]
    )


# --------------------------------------------------------------------------- values
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(9,), (3, 17)])
@pytest.mark.parametrize("coef", ["float", "tensor"])
def test_estimators_match_references(backend, shape, coef, device):
    _need(backend)
    d = rollout(shape, device=device)
    gamma = 0.97 if coef == "float" else torch.rand(shape, device=device) * 0.2 + 0.8
    lmbda = 0.9 if coef == "float" else torch.rand(shape, device=device) * 0.2 + 0.8
    v, nv, r, done, term = d["value"], d["next_value"], d["reward"], d["done"], d["terminated"]
    for got, want in zip(
        gae(gamma, lmbda, v, nv, r, done, term, backend=backend), ref_gae(gamma, lmbda, v, nv, r, done, term)
    ):
        _close(got, want)
    _close(
        td_lambda_return(gamma, lmbda, nv, r, done, term, backend=backend),
        ref_td_lambda(gamma, lmbda, nv, r, done, term),
    )
    got = vtrace(gamma, d["log_pi"], d["log_mu"], v, nv, r, done, term, 1.2, 0.9, backend=backend)
    want = ref_vtrace(gamma, d["log_pi"], d["log_mu"], v, nv, r, done, term, 1.2, 0.9)
    for a, b in zip(got, want):
        _close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_done_none_and_terminated_default(backend, device):
    _need(backend)
    d = rollout((2, 11), device=device)
    v, nv, r, done = d["value"], d["next_value"], d["reward"], d["done"]
    no = torch.zeros_like(done)
    _close(gae(0.9, 0.8, v, nv, r, backend=backend)[0], ref_gae(0.9, 0.8, v, nv, r, no, no)[0])
    _close(gae(0.9, 0.8, v, nv, r, done, backend=backend)[0], ref_gae(0.9, 0.8, v, nv, r, done, done)[0])
    _close(td_lambda_return(0.9, 0.8, nv, r, backend=backend), ref_td_lambda(0.9, 0.8, nv, r, no, no))
    lp, lm = d["log_pi"], d["log_mu"]
    _close(vtrace(0.9, lp, lm, v, nv, r, backend=backend)[1], ref_vtrace(0.9, lp, lm, v, nv, r, no, no)[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_dim_with_features(backend, device):
    _need(backend)
    d = rollout((2, 10, 3), device=device)  # [B, T, F]
    v, nv, r, done, term = d["value"], d["next_value"], d["reward"], d["done"], d["terminated"]
    adv, target = gae(0.9, 0.95, v, nv, r, done, term, time_dim=-2, backend=backend)
    want = ref_gae(0.9, 0.95, *(x.movedim(1, -1) for x in (v, nv, r, done, term)))
    _close(adv, want[0].movedim(-1, 1))
    _close(target, want[1].movedim(-1, 1))
    ret = td_lambda_return(0.9, 0.95, nv, r, done, term, time_dim=1, backend=backend)
    _close(ret, ref_td_lambda(0.9, 0.95, *(x.movedim(1, -1) for x in (nv, r, done, term))).movedim(-1, 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_match_references(backend, device):
    _need(backend)
    d = rollout((3, 12), device=device)
    m = (d["done"], d["terminated"])
    grads = []
    for impl in ("ours", "ref"):
        v, nv, r = (d[k].clone().requires_grad_(True) for k in ("value", "next_value", "reward"))
        if impl == "ours":
            adv, target = gae(0.9, 0.8, v, nv, r, *m, backend=backend)
            ret = td_lambda_return(0.9, 0.8, nv, r, *m, backend=backend)
            vadv, vs = vtrace(0.9, d["log_pi"], d["log_mu"], v, nv, r, *m, backend=backend)
        else:
            adv, target = ref_gae(0.9, 0.8, v, nv, r, *m)
            ret = ref_td_lambda(0.9, 0.8, nv, r, *m)
            vadv, vs = ref_vtrace(0.9, d["log_pi"], d["log_mu"], v, nv, r, *m)
        (adv.sum() + 2 * target.pow(2).sum() + ret.sum() + vadv.sum() + vs.pow(2).sum()).backward()
        grads.append((v.grad, nv.grad, r.grad))
    for a, b in zip(*grads):
        _close(a, b, 1e-4)


def test_matches_rl_objectives():
    F = pytest.importorskip("rl_objectives.functional")
    d = rollout((4, 30))
    v, nv, r, done, term = d["value"], d["next_value"], d["reward"], d["done"], d["terminated"]
    for a, b in zip(
        gae(0.99, 0.95, v, nv, r, done, term), F.generalized_advantage_estimate(0.99, 0.95, v, nv, r, done, term)
    ):
        _close(a, b)
    _close(td_lambda_return(0.99, 0.95, nv, r, done, term), F.td_lambda_return_estimate(0.99, 0.95, nv, r, done, term))
    lp, lm = d["log_pi"], d["log_mu"]
    for a, b in zip(
        vtrace(0.99, lp, lm, v, nv, r, done, term), F.vtrace_advantage_estimate(0.99, lp, lm, v, nv, r, done, term)
    ):
        _close(a, b)


# --------------------------------------------------------------------------- bad input
def test_bad_input():
    v = torch.zeros(2, 5)
    done = torch.zeros(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="reward has shape"):
        gae(0.9, 0.9, v, v, torch.zeros(2, 5, 1), done)
    with pytest.raises(TypeError, match="done must be a bool tensor"):
        gae(0.9, 0.9, v, v, v, done.float())
    with pytest.raises(ValueError, match="gamma must be in"):
        gae(1.5, 0.9, v, v, v, done)
    with pytest.raises(ValueError, match="lmbda must be in"):
        td_lambda_return(0.9, torch.full((2, 5), -0.1), v, v, done)
    with pytest.raises(ValueError, match="time_dim=2 is out of range"):
        td_lambda_return(0.9, 0.9, v, v, done, time_dim=2)
    with pytest.raises(TypeError, match="log_pi must be a torch.Tensor"):
        vtrace(0.9, [0.0], v, v, v, v, done)  # pyright: ignore[reportArgumentType]  # the error under test
    with pytest.raises(TypeError, match="gamma must be a number or a tensor"):
        vtrace(None, v, v, v, v, v, done)  # pyright: ignore[reportArgumentType]  # the error under test
    with pytest.raises(ValueError, match="backend must be one of"):
        gae(0.9, 0.9, v, v, v, done, backend="cuda")


# --------------------------------------------------------------------------- GPU, bigger shapes
@pytest.mark.gpu
def test_gpu_gae_large():
    pytest.importorskip("triton")
    d = rollout((1024, 1000), device="cuda", p=0.02)
    v, nv, r, done, term = d["value"], d["next_value"], d["reward"], d["done"], d["terminated"]
    adv, _ = gae(0.99, 0.95, v, nv, r, done, term)
    v64, nv64, r64 = (x.double().cpu() for x in (v, nv, r))
    want, _ = gae(0.99, 0.95, v64, nv64, r64, done.cpu(), term.cpu(), backend="torch")
    torch.testing.assert_close(adv.double().cpu(), want, rtol=1e-4, atol=1e-4)
