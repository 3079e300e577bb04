"""chunked_log_probs against the full-logits formula: forward+backward time and peak memory.

Cases (GPU): N=8192 tokens, D=2048, V=65536 in bfloat16, and N=2048 at the same D, V in float32
(plain float32 matmuls are ~15x slower, so fewer tokens keep the run short). Implementations:

- ``naive`` (the baseline): ``(hidden @ weight.T).float().log_softmax(-1).gather(...)`` and autograd;
- ``torch-chunked``: ``chunked_log_probs(..., backend="torch")``;
- ``triton``: ``chunked_log_probs(..., backend="triton")`` (its default scheme: cuBLAS logits per chunk and
  Triton row kernels, where torch >= 2.8 forms float32 logits from half inputs);
- ``triton fused``: the other scheme, logits formed tile by tile by ``tl.dot`` inside the kernels.

Each is checked first against a float32 reference on the same (upcast) inputs: the largest absolute
error over the log-probs and the gradients of hidden and weight. The target (bfloat16, ``triton``):
forward+backward at least as fast as ``naive`` with at most a quarter of its peak memory above the
inputs. Forward-only rows (``naive``, ``triton``) show where the time goes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _timing import median_ms, peak_mb

OP = "chunked_log_probs"
TARGET = "fwd+bwd time <= naive and peak mem <= naive/4"


def _naive(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (hidden @ weight.T).float().log_softmax(-1).gather(-1, targets[:, None])[:, 0]


def _make_impls() -> dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]]:
    from rl_kernels import chunked_log_probs
    from rl_kernels._log_probs_triton import chunked_log_probs_triton

    return {
        "naive": lambda h, w, t, c: _naive(h, w, t),
        "torch-chunked": lambda h, w, t, c: chunked_log_probs(h, w, t, c, backend="torch"),
        "triton": lambda h, w, t, c: chunked_log_probs(h, w, t, c, backend="triton"),
        "triton fused": lambda h, w, t, c: chunked_log_probs_triton(h, w, None, t, c, 1.0, scheme="fused"),
    }


def _case(n: int, d: int, v: int, dtype: torch.dtype, chunk: int, device: str, cuda: bool, warmup: int, reps: int):
    gen = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(n, d, device=device, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(v, d, device=device, generator=gen) * (2.0 / d**0.5)).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), device=device, generator=gen)
    grad_out = torch.randn(n, device=device, generator=gen)
    case = f"N={n} D={d} V={v} {str(dtype).removeprefix('torch.')} chunk={chunk}"

    # the float32 reference on the same inputs (exact float32 matmuls)
    h32, w32 = hidden.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
    tf32, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    try:
        ref = _naive(h32, w32, targets)
        ref_grads = torch.autograd.grad(ref, [h32, w32], grad_out)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    ref = ref.detach()
    del h32, w32

    def error(out: torch.Tensor, grads: tuple[torch.Tensor, ...]) -> float:
        errs = [(out.detach().float() - ref).abs().max().item()]
        errs += [(g.float() - r).abs().max().item() for g, r in zip(grads, ref_grads)]
        return max(errs)

    rows: list[dict] = []
    base_time = base_peak = base_fwd = None
    for name, impl in _make_impls().items():

        def fwd_bwd(impl=impl) -> tuple:
            out = impl(hidden, weight, targets, chunk)
            return out, torch.autograd.grad(out, [hidden, weight], grad_out)

        row: dict = {"op": OP, "case": case, "impl": name, "target": None, "met": None, "note": None}
        try:
            out, grads = fwd_bwd()
            err = error(out, grads)
            del out, grads
            row["max_abs_err"] = None if name == "naive" else err
            if name == "naive":
                row["note"] = f"naive's own error vs the float32 reference: {err:.3g}"
            peak = peak_mb(fwd_bwd, cuda)
            ms = median_ms(fwd_bwd, cuda, warmup, reps)
            row.update(median_ms=ms, peak_mem_mb=peak)
            if name == "naive":
                base_time, base_peak = ms, peak
                row["ratio"] = None
            else:
                row["ratio"] = None if base_time is None else base_time / ms
            if name.startswith("triton") and dtype == torch.bfloat16:
                row["target"] = TARGET
                if cuda and base_time is not None and base_peak is not None and peak is not None:
                    row["met"] = ms <= base_time and peak <= base_peak / 4
            if name != "torch-chunked":  # forward alone
                with torch.no_grad():
                    fwd_ms = median_ms(lambda impl=impl: impl(hidden, weight, targets, chunk), cuda, warmup, reps)
                fwd = {"op": f"{OP} (forward)", "case": case, "impl": name, "median_ms": fwd_ms, "peak_mem_mb": None}
                fwd.update(max_abs_err=None, target=None, met=None, note=None)
                if name == "naive":
                    base_fwd = fwd_ms
                    fwd["ratio"] = None
                else:
                    fwd["ratio"] = None if base_fwd is None else base_fwd / fwd_ms
                rows.append(row)
                rows.append(fwd)
                continue
        except Exception as exc:  # a failing path becomes a row with its error; the others still run
            row.update(median_ms=None, peak_mem_mb=None, max_abs_err=None, ratio=None)
            row["note"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def run(dry_run: bool) -> list[dict]:
    """Rows for the bfloat16 and float32 cases (tiny float32 shapes on the CPU when ``dry_run``)."""
    if dry_run:
        return _case(24, 32, 100, torch.float32, 16, "cpu", cuda=False, warmup=1, reps=2)
    rows = _case(8192, 2048, 65536, torch.bfloat16, 2048, "cuda", cuda=True, warmup=3, reps=20)
    rows += _case(2048, 2048, 65536, torch.float32, 1024, "cuda", cuda=True, warmup=3, reps=20)
    return rows
