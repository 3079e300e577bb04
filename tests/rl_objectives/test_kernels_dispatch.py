"""rl-objectives' vectorised estimators with and without rl-kernels: the same numbers and gradients."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import rl_objectives.functional as F
from rl_objectives.functional import value as value_mod


def _rollout(shape=(3, 40), dtype=torch.float32):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()).item()))
    terminated = torch.rand(shape, generator=g) < 0.05
    done = terminated | (torch.rand(shape, generator=g) < 0.05)
    v, nv, r, lp, lm = (torch.randn(shape, generator=g, dtype=dtype) for _ in range(5))
    return v, nv, r, 0.3 * lp, 0.3 * lm, done, terminated


def _all_estimates(v, nv, r, lp, lm, done, term):
    return [
        *F.vec_generalized_advantage_estimate(0.99, 0.95, v, nv, r, done, term),
        F.vec_td_lambda_return_estimate(0.99, 0.95, nv, r, done, term),
        F.vec_td1_return_estimate(0.9, nv, r, done, term),
        F.reward2go(r, done, 0.9),
        *F.vtrace_advantage_estimate(0.99, lp, lm, v, nv, r, done, term, 1.1, 0.9),
    ]


def _loop_estimates(v, nv, r, lp, lm, done, term):
    return [
        *F.generalized_advantage_estimate(0.99, 0.95, v, nv, r, done, term),
        F.td_lambda_return_estimate(0.99, 0.95, nv, r, done, term),
        F.td1_return_estimate(0.9, nv, r, done, term),
    ]


def test_dispatches_to_rl_kernels(monkeypatch):
    pytest.importorskip("rl_kernels")
    real = value_mod._kernel_scan()
    assert real is not None
    calls = []

    def spy(a, b):
        calls.append(a.shape)
        return real(a, b)

    monkeypatch.setattr(value_mod, "_kernel_scan", lambda: spy)
    data = _rollout()
    with_kernels = _all_estimates(*data)
    assert len(calls) == 5  # one scan each: GAE, TD(lambda), TD(1), reward2go, V-trace
    for got, want in zip(with_kernels[:4], _loop_estimates(*data)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(value_mod, "_kernel_scan", lambda: None)  # the dispatch off: the doubling scan
    for got, want in zip(with_kernels, _all_estimates(*data)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_gradients_same_with_and_without_kernels(monkeypatch):
    pytest.importorskip("rl_kernels")
    data = _rollout(dtype=torch.float64)
    grads = []
    for scan in (value_mod._kernel_scan(), None):
        monkeypatch.setattr(value_mod, "_kernel_scan", lambda scan=scan: scan)
        v, nv, r = (x.clone().requires_grad_(True) for x in data[:3])
        out = _all_estimates(v, nv, r, *data[3:])
        torch.stack([(o * torch.linspace(-1, 1, o.shape[-1], dtype=o.dtype)).sum() for o in out]).sum().backward()
        grads.append((v.grad, nv.grad, r.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_integer_and_feature_inputs_keep_doubling_semantics(monkeypatch):
    """Non-floating scans stay on the doubling path; time_dim=-2 with features works either way."""
    r = torch.randint(0, 3, (2, 6, 2)).float()
    done = torch.rand(2, 6, 2) < 0.3
    got = F.reward2go(r, done, 0.5, time_dim=-2)
    monkeypatch.setattr(value_mod, "_kernel_scan", lambda: None)
    torch.testing.assert_close(got, F.reward2go(r, done, 0.5, time_dim=-2))


def test_errors_unchanged_with_kernels():
    v = torch.zeros(2, 5)
    done = torch.zeros(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="vec_generalized_advantage_estimate: gamma must be in"):
        F.vec_generalized_advantage_estimate(1.5, 0.9, v, v, v, done)
    with pytest.raises(ValueError, match="reward has shape"):
        F.vec_td_lambda_return_estimate(0.9, 0.9, v, torch.zeros(2, 5, 1), done)


def test_works_when_rl_kernels_cannot_be_imported():
    """A fresh interpreter where ``import rl_kernels`` fails: the doubling scan, same numbers as the loop."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["rl_kernels"] = None  # import rl_kernels -> ImportError
        import torch
        import rl_objectives.functional as F
        from rl_objectives.functional import value
        assert value._kernel_scan() is None
        g = torch.Generator().manual_seed(0)
        v, nv, r = (torch.randn(3, 30, generator=g) for _ in range(3))
        done = torch.rand(3, 30, generator=g) < 0.1
        a = F.vec_generalized_advantage_estimate(0.99, 0.95, v, nv, r, done)[0]
        b = F.generalized_advantage_estimate(0.99, 0.95, v, nv, r, done)[0]
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        adv, vs = F.vtrace_advantage_estimate(0.99, v * 0, v * 0, v, nv, r, done)
        assert adv.shape == vs.shape == (3, 30)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
