"""rl-llm's chunked log-probs hand CUDA tensors to rl_kernels.chunked_log_probs, and work without it.

Without a GPU the dispatch is forced (``chunked._KERNELS_BACKEND``) and the Triton kernels run in
Triton's interpreter on tiny shapes.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():  # before any kernel module is imported (as tests/rl_kernels/conftest.py)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from rl_llm.losses import chunked, response_log_probs, token_log_probs_chunked  # noqa: E402

rl_kernels = pytest.importorskip("rl_kernels")

# where the forced-dispatch tests run: Triton's interpreter takes CPU tensors, a real Triton CUDA ones
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(device="cpu", bias=True):
    hidden = torch.randn(2, 5, 16, device=device, requires_grad=True)
    weight = (torch.randn(50, 16, device=device) / 4).requires_grad_()
    b = torch.randn(50, device=device, requires_grad=True) if bias else None
    targets = torch.randint(0, 50, (2, 5), device=device)
    return hidden, weight, b, targets


def _run(hidden, weight, bias, targets, grad_out, **kwargs):
    out = token_log_probs_chunked(hidden, weight, bias, targets, chunk_size=3, **kwargs)
    inputs = [x for x in (hidden, weight, bias) if x is not None]
    return out, torch.autograd.grad(out, inputs, grad_out)


@pytest.fixture
def calls(monkeypatch):
    """Records the backend of every call that reaches rl_kernels.chunked_log_probs."""
    seen: list[str] = []
    real = rl_kernels.chunked_log_probs

    def spy(*args, **kwargs):
        seen.append(kwargs["backend"])
        return real(*args, **kwargs)

    monkeypatch.setattr(rl_kernels, "chunked_log_probs", spy)
    return seen


def _own_path(monkeypatch, *args, **kwargs):
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", None)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "rl_kernels", None)  # as if rl-kernels were not installed
        return _run(*args, **kwargs)


def test_cpu_tensors_keep_the_own_path(calls):
    hidden, weight, bias, targets = _inputs()
    _run(hidden, weight, bias, targets, torch.randn(2, 5))
    assert calls == []


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("bias", [True, False])
def test_forced_dispatch_equals_the_own_path(monkeypatch, calls, backend, bias):
    if backend == "triton":
        pytest.importorskip("triton")
    hidden, weight, b, targets = _inputs(DEVICE, bias=bias)
    grad_out = torch.randn(2, 5, device=DEVICE)
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", backend)
    out, grads = _run(hidden, weight, b, targets, grad_out, temperature=0.8)
    assert calls == [backend]
    want, want_grads = _own_path(monkeypatch, hidden, weight, b, targets, grad_out, temperature=0.8)
    assert out.shape == want.shape == (2, 5) and out.dtype == want.dtype
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_without_rl_kernels_it_falls_back(monkeypatch, calls):
    hidden, weight, bias, targets = _inputs()
    grad_out = torch.randn(2, 5)
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", "triton")
    monkeypatch.setitem(sys.modules, "rl_kernels", None)
    out, grads = _run(hidden, weight, bias, targets, grad_out)
    assert calls == [] and bias is not None
    full = (hidden @ weight.T + bias).log_softmax(-1).gather(-1, targets[..., None])[..., 0]
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)
    full_grads = torch.autograd.grad(full, [hidden, weight, bias], grad_out)
    for got, expected in zip(grads, full_grads):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_autocast_and_mixed_dtypes_keep_the_own_path(monkeypatch, calls):
    hidden, weight, _, targets = _inputs(bias=False)
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", "torch")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        token_log_probs_chunked(hidden, weight, None, targets, chunk_size=4)
    token_log_probs_chunked(hidden.detach().bfloat16(), weight.detach().bfloat16(), None, targets, chunk_size=4)
    assert calls == ["torch"]  # only the plain bfloat16 call
    assert chunked._kernels_backend(hidden, weight.double(), None) is None


def test_response_log_probs_through_the_kernels(monkeypatch, calls, model):
    pytest.importorskip("triton")
    model = model.to(DEVICE)
    prompt = torch.tensor([[0, 5, 6], [7, 8, 9]], device=DEVICE)
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]], device=DEVICE)
    response = torch.tensor([[10, 11, 0], [12, 13, 14]], device=DEVICE)
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1]], device=DEVICE)
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", "triton")
    got, _ = response_log_probs(model, prompt, prompt_mask, response, response_mask, chunk_size=4)
    assert calls == ["triton"]
    monkeypatch.setattr(chunked, "_KERNELS_BACKEND", None)
    want, _ = response_log_probs(model, prompt, prompt_mask, response, response_mask)  # full logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_cuda_tensors_dispatch_by_default(monkeypatch, calls):
    pytest.importorskip("triton")
    hidden, weight, bias, targets = _inputs(device="cuda")
    grad_out = torch.randn(2, 5, device="cuda")
    out, grads = _run(hidden, weight, bias, targets, grad_out)
    assert calls == ["auto"]
    want, want_grads = _own_path(monkeypatch, hidden, weight, bias, targets, grad_out)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
