"""rl_kernels.chunked_log_probs: values and gradients equal the full-logits formula, on both paths.

The Triton path runs in Triton's interpreter here (tests/rl_kernels/conftest.py), on shapes whose
vocabulary (50) and hidden size (20) are not multiples of the 16-wide tiles, so every mask is used.
"""

from __future__ import annotations

import pytest
import torch

import rl_kernels
from rl_kernels import chunked_log_probs
from rl_kernels import log_probs as log_probs_module


def naive(hidden, weight, targets, bias=None, temperature=1.0):
    """The formula, on full logits, in float32 (float64 for float64 inputs)."""
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    logits = hidden.to(dtype) @ weight.to(dtype).T
    if bias is not None:
        logits = logits + bias.to(dtype)
    return (logits / temperature).log_softmax(-1).gather(-1, targets[:, None])[:, 0]


def make(n, d, v, *, dtype=torch.float32, bias=True, device="cpu", seed=None):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    hidden = torch.randn(n, d, generator=gen).to(device, dtype).requires_grad_()
    weight = (torch.randn(v, d, generator=gen) / d**0.5).to(device, dtype).requires_grad_()
    b = torch.randn(v, generator=gen).to(device, dtype).requires_grad_() if bias else None
    targets = torch.randint(0, v, (n,), generator=gen).to(device)
    grad_out = torch.randn(n, generator=gen).to(device)
    return hidden, weight, b, targets, grad_out


def values_and_grads(fn, hidden, weight, bias, targets, grad_out, **kwargs):
    out = fn(hidden, weight, targets, bias=bias, **kwargs)
    inputs = [x for x in (hidden, weight, bias) if x is not None and x.requires_grad]
    return out, torch.autograd.grad(out, inputs, grad_out)


def assert_matches(hidden, weight, bias, targets, grad_out, *, atol, temperature=1.0, **kwargs):
    out, grads = values_and_grads(
        chunked_log_probs, hidden, weight, bias, targets, grad_out, temperature=temperature, **kwargs
    )
    ref, ref_grads = values_and_grads(naive, hidden, weight, bias, targets, grad_out, temperature=temperature)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=atol, rtol=atol)
    for got, want in zip(grads, ref_grads):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=atol)


# ---------------------------------------------------------------- torch path


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 10, 64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_torch_matches_naive(chunk_size, bias, temperature):
    hidden, weight, b, targets, grad_out = make(10, 6, 13, bias=bias)
    assert_matches(
        hidden, weight, b, targets, grad_out, atol=1e-5, temperature=temperature, chunk_size=chunk_size, backend="torch"
    )


def test_torch_gradcheck_float64():
    hidden, weight, bias, targets, _ = make(7, 4, 9, dtype=torch.float64)
    assert bias is not None
    assert torch.autograd.gradcheck(
        lambda h, w, b: chunked_log_probs(h, w, targets, 3, bias=b, temperature=0.8, backend="torch"),
        (hidden, weight, bias),
    )


def test_torch_holds_at_most_chunk_rows_of_logits(monkeypatch):
    seen = []
    real = log_probs_module._chunk_logits

    def spy(hidden, *args):
        logits = real(hidden, *args)
        seen.append(tuple(logits.shape))
        return logits

    monkeypatch.setattr(log_probs_module, "_chunk_logits", spy)
    hidden, weight, bias, targets, grad_out = make(11, 5, 8)
    out = chunked_log_probs(hidden, weight, targets, 4, bias=bias, backend="torch")
    out.backward(grad_out)
    assert seen and all(rows <= 4 and v == 8 for rows, v in seen)
    assert len(seen) == 2 * 3  # three chunks, forward and backward


def test_torch_half_inputs_accumulate_in_float32():
    hidden, weight, bias, targets, grad_out = make(9, 8, 20, dtype=torch.bfloat16)
    out, grads = values_and_grads(
        chunked_log_probs, hidden, weight, bias, targets, grad_out, chunk_size=4, backend="torch"
    )
    assert out.dtype == torch.float32 and bias is not None
    assert [g.dtype for g in grads] == [torch.bfloat16] * 3
    ref = naive(hidden.detach().float(), weight.detach().float(), targets, bias.detach().float())
    # only the bfloat16 logits' rounding separates the two
    torch.testing.assert_close(out, ref, atol=5e-2, rtol=0)


def test_only_needed_grads_are_computed():
    hidden, weight, bias, targets, grad_out = make(8, 4, 11)
    weight.requires_grad_(False)
    assert bias is not None
    bias.requires_grad_(False)
    for backend in ("torch", "auto"):
        out = chunked_log_probs(hidden, weight, targets, 3, bias=bias, backend=backend)
        (grad_h,) = torch.autograd.grad(out, [hidden], grad_out)
        (want,) = torch.autograd.grad(naive(hidden, weight, targets, bias), [hidden], grad_out)
        torch.testing.assert_close(grad_h, want, atol=1e-5, rtol=1e-5)


def test_empty_and_no_grad():
    hidden, weight, bias, targets, _ = make(0, 4, 5)
    out = chunked_log_probs(hidden, weight, targets, 2, bias=bias, backend="torch")
    assert out.shape == (0,)
    hidden, weight, bias, targets, _ = make(5, 4, 5)
    with torch.no_grad():
        out = chunked_log_probs(hidden, weight, targets, 2, bias=bias)
    assert not out.requires_grad
    torch.testing.assert_close(out, naive(hidden, weight, targets, bias).detach(), atol=1e-5, rtol=1e-5)


def test_auto_on_cpu_is_the_torch_path():
    hidden, weight, bias, targets, _ = make(6, 4, 7)
    auto = chunked_log_probs(hidden, weight, targets, 4, bias=bias)
    torch.testing.assert_close(auto, chunked_log_probs(hidden, weight, targets, 4, bias=bias, backend="torch"))


def test_exported_lazily():
    assert rl_kernels.chunked_log_probs is chunked_log_probs


# ---------------------------------------------------------------- errors


def _bad_inputs():
    h, w, t = torch.randn(4, 3), torch.randn(5, 3), torch.tensor([0, 1, 4, 2])
    return [
        ((torch.randn(2, 2, 3), w, t), {}, "hidden must be a floating \\[N, D\\]"),
        ((h.long(), w, t), {}, "hidden must be a floating"),
        ((h, torch.randn(5, 4), t), {}, "weight must be a \\[V, 3\\]"),
        ((h, torch.randn(0, 3), t), {}, "weight must be a \\[V, 3\\]"),
        ((h, w.double(), t), {}, "weight must have hidden's dtype"),
        ((h, w, t.float()), {}, "targets must be an integer \\[4\\]"),
        ((h, w, t[:3]), {}, "targets must be an integer \\[4\\]"),
        ((h, w, torch.tensor([0, 1, 5, 2])), {}, "targets must lie in \\[0, 5\\).*e.g. 5"),
        ((h, w, torch.tensor([0, -1, 4, 2])), {}, "targets must lie in \\[0, 5\\).*e.g. -1"),
        ((h, w, t), {"bias": torch.randn(4)}, "bias must be None or a \\[5\\] tensor"),
        ((h, w, t), {"bias": torch.randn(5).double()}, "bias must be None or a \\[5\\] tensor of dtype torch.float32"),
        ((h, w, t, 0), {}, "chunk_size must be a positive int"),
        ((h, w, t, 2.0), {}, "chunk_size must be a positive int"),
        ((h, w, t, True), {}, "chunk_size must be a positive int"),
        ((h, w, t), {"temperature": 0.0}, "temperature must be a finite number > 0"),
        ((h, w, t), {"temperature": float("nan")}, "temperature must be a finite number > 0"),
        ((h, w, t), {"backend": "cuda"}, "backend must be one of"),
    ]


@pytest.mark.parametrize("args, kwargs, match", _bad_inputs())
def test_bad_inputs_raise_clear_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        chunked_log_probs(*args, **kwargs)


# ---------------------------------------------------------------- Triton path (interpreter on CPU)


@pytest.fixture(params=["matmul", "fused"])
def scheme(request, monkeypatch):
    """Each test of the Triton path runs under both schemes (the default is replaced for the test)."""
    pytest.importorskip("triton")
    from rl_kernels import _log_probs_triton

    monkeypatch.setattr(_log_probs_triton, "default_scheme", lambda device, dtype: request.param)
    return request.param


@pytest.mark.parametrize(
    "n, d, v, chunk_size, bias, temperature",
    [
        (10, 16, 50, 3, True, 0.7),  # one row block, tiles that do not divide V, chunks that do not divide N
        (10, 16, 50, 64, False, 1.0),  # one chunk
        (37, 20, 50, 16, True, 1.0),  # several row blocks, a hidden size that is not a tile multiple
        (5, 16, 16, 2, True, 1.3),  # a single vocabulary tile
    ],
)
def test_triton_matches_naive(scheme, device, n, d, v, chunk_size, bias, temperature):
    pytest.importorskip("triton")
    hidden, weight, b, targets, grad_out = make(n, d, v, bias=bias, device=device)
    assert_matches(
        hidden,
        weight,
        b,
        targets,
        grad_out,
        atol=1e-4,
        temperature=temperature,
        chunk_size=chunk_size,
        backend="triton",
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_half_inputs_accumulate_in_float32(scheme, device, dtype):
    pytest.importorskip("triton")
    hidden, weight, bias, targets, grad_out = make(12, 16, 40, dtype=dtype, device=device)
    out, grads = values_and_grads(
        chunked_log_probs, hidden, weight, bias, targets, grad_out, chunk_size=5, backend="triton"
    )
    assert out.dtype == torch.float32 and [g.dtype for g in grads] == [dtype] * 3
    assert bias is not None
    exact = [x.detach().float().requires_grad_() for x in (hidden, weight, bias)]
    ref, ref_grads = values_and_grads(naive, exact[0], exact[1], exact[2], targets, grad_out)
    # the logits are accumulated in float32 from the half inputs: the values match the float32 formula
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    # d logits is rounded to the input dtype before the matmuls (as autograd does on the naive path)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


def test_triton_matches_torch_path_on_frozen_head(scheme, device):
    pytest.importorskip("triton")
    hidden, weight, bias, targets, grad_out = make(9, 16, 33, device=device)
    assert bias is not None
    weight.requires_grad_(False)
    out = chunked_log_probs(hidden, weight, targets, 4, bias=bias, backend="triton")
    grads = torch.autograd.grad(out, [hidden, bias], grad_out)
    ref = chunked_log_probs(hidden, weight, targets, 4, bias=bias, backend="torch")
    ref_grads = torch.autograd.grad(ref, [hidden, bias], grad_out)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_triton_rejects_float64(device):
    pytest.importorskip("triton")
    hidden, weight, _, targets, _ = make(4, 16, 20, dtype=torch.float64, bias=False, device=device)
    with pytest.raises(ValueError, match="backend='triton' takes"):
        chunked_log_probs(hidden, weight, targets, backend="triton")
    # auto falls back to the torch path for float64
    torch.testing.assert_close(chunked_log_probs(hidden, weight, targets), naive(hidden, weight, targets))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_triton_gpu_shapes(scheme, dtype, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # exact float32 on both sides
    hidden, weight, bias, targets, grad_out = make(1000, 256, 5003, dtype=dtype, device="cuda", seed=0)
    assert bias is not None
    out, grads = values_and_grads(chunked_log_probs, hidden, weight, bias, targets, grad_out, chunk_size=384)
    exact = [x.detach().float().requires_grad_() for x in (hidden, weight, bias)]
    ref, ref_grads = values_and_grads(naive, exact[0], exact[1], exact[2], targets, grad_out)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def test_triton_matmul_scheme_forms_at_most_chunk_rows_of_logits(monkeypatch):
    pytest.importorskip("triton")
    from rl_kernels import _log_probs_triton

    seen = []
    form = _log_probs_triton._logits_into

    def recording(out, h, weight, bias):
        seen.append(tuple(out.shape))
        form(out, h, weight, bias)

    monkeypatch.setattr(_log_probs_triton, "_logits_into", recording)
    hidden, weight, bias, targets, grad_out = make(11, 16, 30)
    out, _ = values_and_grads(
        chunked_log_probs, hidden, weight, bias, targets, grad_out, chunk_size=4, backend="triton"
    )
    # forward and backward each form the three chunks' logits (4 + 4 + 3 rows), never more rows at once
    assert seen == [(4, 30), (4, 30), (3, 30)] * 2
    torch.testing.assert_close(out, naive(hidden, weight, targets, bias), atol=1e-5, rtol=1e-5)


def test_triton_scheme_choice():
    pytest.importorskip("triton")
    from rl_kernels import _log_probs_triton

    cpu = torch.device("cpu")
    assert _log_probs_triton.default_scheme(cpu, torch.bfloat16) == "matmul"
    hidden, weight, _, targets, _ = make(3, 16, 20, bias=False)
    with pytest.raises(ValueError, match="scheme must be one of \\('matmul', 'fused'\\), got 'tiles'"):
        _log_probs_triton.chunked_log_probs_triton(hidden, weight, None, targets, 2, 1.0, scheme="tiles")
