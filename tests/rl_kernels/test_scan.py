"""rl_kernels.discounted_reverse_scan: every path (Triton under the interpreter, the compiled CPU loop,
the doubling scan) against a plain loop over time, values and gradients."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import rl_kernels
from rl_kernels import discounted_reverse_scan
from rl_kernels import scan as scan_mod


def reference_scan(x: torch.Tensor, discount, done: torch.Tensor | None) -> torch.Tensor:
    """The textbook loop: y_t = x_t + discount_t * (1 - done_t) * y_{t+1}, y_T = 0."""
    disc = discount if isinstance(discount, torch.Tensor) else torch.full_like(x, float(discount))
    disc = disc.expand_as(x)
    keep = torch.ones_like(x) if done is None else (~done).to(x.dtype)
    out, y = [], torch.zeros_like(x[..., 0])
    for t in reversed(range(x.shape[-1])):
        y = x[..., t] + disc[..., t] * keep[..., t] * y
        out.append(y)
    return torch.stack(out[::-1], -1)


def _inputs(shape, dtype=torch.float32, device="cpu", p_done=0.2, seed=None):
    g = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(0, 2**31, ()).item()))
    x = torch.randn(shape, generator=g, dtype=dtype).to(device)
    disc = (torch.rand(shape, generator=g, dtype=dtype) * 0.5 + 0.5).to(device)
    done = (torch.rand(shape, generator=g) < p_done).to(device)
    return x, disc, done


def _backends():
    return ["torch", "triton"]


def _need(backend: str) -> None:
    if backend == "triton":
        pytest.importorskip("triton")


# --------------------------------------------------------------------------- the reference itself
def test_reference_matches_closed_form_and_finite_differences():
    x = torch.tensor([1.0, 2.0, 3.0])
    # y_2 = 3, y_1 = 2 + 0.5 * 3, y_0 = 1 + 0.5 * 3.5
    assert torch.allclose(reference_scan(x, 0.5, None), torch.tensor([2.75, 3.5, 3.0]))
    done = torch.tensor([False, True, False])
    assert torch.allclose(reference_scan(x, 0.5, done), torch.tensor([2.0, 2.0, 3.0]))
    x, disc, done = _inputs((3, 6), torch.float64)
    x.requires_grad_(True)
    disc.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, c: reference_scan(a, c, done), (x, disc))


# --------------------------------------------------------------------------- values
@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("shape", [(1,), (5,), (3, 7), (2, 3, 37)])
@pytest.mark.parametrize("disc_kind", ["float", "tensor", "broadcast"])
@pytest.mark.parametrize("with_done", [True, False])
def test_scan_matches_reference(backend, shape, disc_kind, with_done, device):
    _need(backend)
    x, disc, done = _inputs(shape, device=device)
    discount = {"float": 0.9, "tensor": disc, "broadcast": disc[..., :1]}[disc_kind]
    mask = done if with_done else None
    got = discounted_reverse_scan(x, discount, mask, backend=backend)
    want = reference_scan(x, discount, mask)
    assert got.shape == x.shape and got.dtype == x.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_t", [1, 4, 8])
def test_triton_kernel_chunks_carry(block_t, device):
    """Several chunks per row: the carry between chunks (forced chunk lengths)."""
    pytest.importorskip("triton")
    from rl_kernels import _scan_triton

    x, disc, done = _inputs((5, 21), device=device)
    for coef in (disc, torch.tensor([0.8], device=device)):
        for mask in (done, None):
            got = _scan_triton.reverse_scan(x, coef, mask, block_t=block_t)
            torch.testing.assert_close(got, reference_scan(x, coef, mask), rtol=1e-5, atol=1e-5)


def test_triton_long_rows_two_chunks(device):
    pytest.importorskip("triton")
    x, disc, done = _inputs((2, 1100), p_done=0.01, device=device)
    got = discounted_reverse_scan(x, disc, done, backend="triton")
    torch.testing.assert_close(got, reference_scan(x, disc, done), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", ["compiled", "doubling"])
def test_cpu_paths(path, monkeypatch):
    monkeypatch.setenv("RL_KERNELS_CPU_SCAN", path)
    for dtype in (torch.float32, torch.float64):
        x, disc, done = _inputs((4, 3, 50), dtype)
        for discount in (0.97, disc):
            got = discounted_reverse_scan(x, discount, done, backend="torch")
            torch.testing.assert_close(got, reference_scan(x, discount, done))


def test_cpu_compiled_loop_is_used_and_fallback(monkeypatch):
    """The compiled loop runs when it builds; without it (no compiler) the doubling scan gives the same."""
    x, disc, done = _inputs((3, 40))
    if scan_mod.cpu_kernel(torch.float32) is None:
        pytest.skip("no C++ compiler here")
    calls = []
    real = scan_mod.cpu_kernel

    def spy(dtype):
        calls.append(dtype)
        return real(dtype)

    monkeypatch.setattr(scan_mod, "cpu_kernel", spy)
    want = reference_scan(x, disc, done)
    torch.testing.assert_close(discounted_reverse_scan(x, disc, done, backend="torch"), want)
    assert calls == [torch.float32]
    monkeypatch.setattr(scan_mod, "cpu_kernel", lambda dtype: None)
    torch.testing.assert_close(discounted_reverse_scan(x, disc, done, backend="torch"), want)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes(backend, dtype, device):
    _need(backend)
    x, disc, done = _inputs((3, 9), dtype, device=device)
    got = discounted_reverse_scan(x, disc, done, backend=backend)
    assert got.dtype == dtype
    want = reference_scan(x.double(), disc.double(), done)
    tol = 1e-12 if dtype is torch.float64 else 5e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_mixed_dtypes_promote():
    x, disc, done = _inputs((2, 5))
    got = discounted_reverse_scan(x, disc.double(), done, backend="torch")
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, reference_scan(x.double(), disc.double(), done))


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("with_done", [True, False])
def test_gradients_match_reference(backend, with_done, device):
    _need(backend)
    x, disc, done = _inputs((3, 13), device=device)
    mask = done if with_done else None
    w = torch.randn_like(x)
    grads = []
    for fn in (
        lambda a, c: discounted_reverse_scan(a, c, mask, backend=backend),
        lambda a, c: reference_scan(a, c, mask),
    ):
        a, c = x.clone().requires_grad_(True), disc.clone().requires_grad_(True)
        (fn(a, c) * w).sum().backward()
        grads.append((a.grad, c.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", _backends())
def test_gradcheck_float64(backend, device):
    """The custom backward (the forward-in-time scan) against finite differences, and its own derivative."""
    _need(backend)
    x, disc, done = _inputs((2, 7), torch.float64, device=device)
    x.requires_grad_(True)
    disc.requires_grad_(True)

    def fn(a, c):
        return discounted_reverse_scan(a, c, done, backend=backend)

    assert torch.autograd.gradcheck(fn, (x, disc))
    assert torch.autograd.gradgradcheck(fn, (x, disc))


def test_scalar_tensor_discount_gradient():
    x, _, done = _inputs((2, 6), torch.float64)
    gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, g: discounted_reverse_scan(a, g, done, backend="torch"), (x, gamma))


def test_inside_torch_compile():
    x, disc, done = _inputs((2, 9))
    compiled = torch.compile(lambda a, c, d: discounted_reverse_scan(a, c, d, backend="torch"), backend="eager")
    torch.testing.assert_close(compiled(x, disc, done), reference_scan(x, disc, done))


def test_empty_batch_and_package_export():
    assert discounted_reverse_scan(torch.zeros(0, 4), 0.5, backend="torch").shape == (0, 4)
    assert rl_kernels.discounted_reverse_scan is discounted_reverse_scan


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([1.0, 2.0], 0.5, None), TypeError, "x must be a torch.Tensor"),
        ((torch.ones(3, dtype=torch.long), 0.5, None), TypeError, "x must be a floating-point"),
        ((torch.tensor(1.0), 0.5, None), ValueError, "time axis"),
        ((torch.ones(3), True, None), TypeError, "discount must be a number or a tensor"),
        ((torch.ones(3), "0.5", None), TypeError, "discount must be a number or a tensor"),
        ((torch.ones(3), torch.ones(4), None), ValueError, "discount of shape"),
        ((torch.ones(3), torch.ones(2, 3), None), ValueError, "discount of shape"),
        ((torch.ones(3), torch.ones(3, dtype=torch.long), None), TypeError, "discount must be"),
        ((torch.ones(3), 0.5, torch.zeros(3)), TypeError, "done must be a bool tensor"),
        ((torch.ones(3), 0.5, torch.zeros(4, dtype=torch.bool)), ValueError, "done has shape"),
        ((torch.ones(3), 0.5, [False] * 3), TypeError, "done must be a bool torch.Tensor"),
    ],
)
def test_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        discounted_reverse_scan(*args, backend="torch")


def test_bad_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        discounted_reverse_scan(torch.ones(3), 0.5, backend="cuda")


# --------------------------------------------------------------------------- GPU, bigger shapes
@pytest.mark.gpu
def test_gpu_large_matches_cpu_loop():
    pytest.importorskip("triton")
    x, disc, done = _inputs((512, 1000), p_done=0.01, device="cuda")
    got = discounted_reverse_scan(x, 0.99 * disc, done)  # auto: Triton on CUDA
    want = discounted_reverse_scan(x.double().cpu(), 0.99 * disc.double().cpu(), done.cpu(), backend="torch")
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-4)
    a = x.clone().requires_grad_(True)
    discounted_reverse_scan(a, 0.97, done).sum().backward()
    b = x.double().cpu().requires_grad_(True)
    discounted_reverse_scan(b, 0.97, done.cpu(), backend="torch").sum().backward()
    assert a.grad is not None and b.grad is not None
    torch.testing.assert_close(a.grad.double().cpu(), b.grad, rtol=1e-4, atol=1e-4)


def _fresh_process(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


_PROBE = """
    import torch
    from rl_kernels._cpu_scan import cpu_kernel
    from rl_kernels import discounted_reverse_scan
    raw = cpu_kernel(torch.float64)
    x = torch.arange(1.0, 5.0, dtype=torch.float64).reshape(1, 4)
    done = torch.tensor([[False, True, False, False]])
    print(raw is not None, discounted_reverse_scan(x, 0.5, done, backend="torch").tolist())
"""


def test_cpu_loop_is_built_once_into_the_cache_and_loaded_after(tmp_path):
    if scan_mod.cpu_kernel(torch.float64) is None:
        pytest.skip("no C++ compiler here")
    want = "True [[2.0, 2.0, 5.0, 4.0]]"  # y3 = 4, y2 = 3 + 2, y1 = 2 (done), y0 = 1 + 0.5 * 2
    assert _fresh_process(_PROBE, RL_KERNELS_CACHE=str(tmp_path)) == want
    built = sorted(p.name for p in tmp_path.iterdir())
    assert len(built) == 1 and built[0].startswith("reverse_scan_") and built[0].endswith(".so")  # no leftovers
    stamp = (tmp_path / built[0]).stat().st_mtime_ns
    assert _fresh_process(_PROBE, RL_KERNELS_CACHE=str(tmp_path)) == want
    assert (tmp_path / built[0]).stat().st_mtime_ns == stamp  # loaded, not rebuilt


def test_without_a_compiler_the_doubling_scan_gives_the_same(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    got = _fresh_process(_PROBE, RL_KERNELS_CACHE=str(tmp_path / "cache"), PATH=str(empty), CXX="no-such-compiler")
    assert got == "False [[2.0, 2.0, 5.0, 4.0]]"
    assert not (tmp_path / "cache").exists()
