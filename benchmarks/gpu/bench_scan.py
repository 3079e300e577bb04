"""rl-kernels reverse scan on the GPU: the GAE scan's achieved bandwidth against a device copy.

Target (issue): the GAE scan (``discounted_reverse_scan(delta, gamma * lmbda, done)``) at ``[4096, 1000]``
reaches at least 50% of the bandwidth of a device-to-device copy of the same number of bytes, measured in
the same run. Bytes of the scan: ``delta`` read (4 B), ``done`` read (1 B), advantage written (4 B) per
element. The baseline is the torch doubling scan on the same device; the full :func:`rl_kernels.gae`
(per-step terms + scan) and the scan's forward+backward are timed too.

``run(dry_run=True)``: the same code on CPU, tiny shapes, Triton's interpreter, perf_counter timing.
"""

from __future__ import annotations

import functools

from collections.abc import Callable

import torch
from _timing import median_ms, peak_mb

GAMMA, LMBDA = 0.99, 0.95
HOW = {"timing": "perf_counter"}  # how the last GPU-timed row was timed


def _graph_timer(timed: Callable[[Callable[[], object]], float]) -> Callable[[Callable[[], object]], float]:
    """Times ``fn`` captured in a CUDA graph (replays), so the GPU time is not hidden behind the
    Python launch cost of a ~10 µs kernel; the copy probe is timed the same way."""

    def graph_ms(fn: Callable[[], object]) -> float:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
        except Exception as exc:  # noqa: BLE001 (report the eager time rather than nothing)
            torch.cuda.synchronize()
            HOW["timing"] = f"eager launches (graph capture failed: {type(exc).__name__})"
            return timed(fn)
        HOW["timing"] = "CUDA graph replays"
        return timed(graph.replay)

    return graph_ms


def run(dry_run: bool) -> list[dict]:
    """Rows (op, case, impl, median_ms, peak_mem_mb, max_abs_err, ratio, target, met, note)."""
    from rl_kernels import gae
    from rl_kernels.scan import _doubling_scan, discounted_reverse_scan

    device = "cpu" if dry_run else "cuda"
    rows_, steps = (8, 64) if dry_run else (4096, 1000)
    timed = functools.partial(median_ms, cuda=not dry_run, warmup=1 if dry_run else 3, repeats=2 if dry_run else 25)
    case = f"[{rows_}, {steps}] fp32, 1% done"
    g = torch.Generator().manual_seed(0)
    value, next_value, reward = (torch.randn(rows_, steps, generator=g).to(device) for _ in range(3))
    done = (torch.rand(rows_, steps, generator=g) < 0.01).to(device)
    delta = reward + GAMMA * torch.where(done, 0.0, next_value) - value
    coef = GAMMA * LMBDA

    # reference: float64 doubling scan (exact enough, and independent of the kernels under test)
    ref = _doubling_scan(delta.double(), coef, done)
    scan_bytes = delta.numel() * (4 + 1 + 4)
    out: list[dict] = []

    # bandwidth probe: a device-to-device copy moving the same number of bytes (half read, half written)
    src = torch.empty(scan_bytes // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    gpu_ms = timed if dry_run else _graph_timer(timed)
    copy_ms = gpu_ms(lambda: dst.copy_(src))
    copy_eager_ms = timed(lambda: torch.empty_like(src).copy_(src))
    copy_gbs = scan_bytes / copy_ms / 1e6
    out.append(
        dict(
            op="copy (bandwidth probe)",
            case=f"{scan_bytes / 1e6:.1f} MB moved",
            impl="torch copy_",
            median_ms=copy_ms,
            peak_mem_mb=None,
            max_abs_err=None,
            ratio=None,
            target=None,
            met=None,
            note=f"{copy_gbs:.0f} GB/s ({HOW['timing']}); eager launch {copy_eager_ms:.4f} ms",
        )
    )

    impls: dict[str, Callable[[], torch.Tensor]] = {
        "torch doubling scan": lambda: _doubling_scan(delta, coef, done),
        "triton": lambda: discounted_reverse_scan(delta, coef, done, backend="triton"),
    }
    if not dry_run:
        from rl_kernels import _scan_triton

        coef_t = torch.tensor([coef], device=device)
        impls["triton BLOCK_T=1024"] = lambda: _scan_triton.reverse_scan(delta, coef_t, done, block_t=1024, block_r=2)
        impls["triton BLOCK_T=64"] = lambda: _scan_triton.reverse_scan(delta, coef_t, done, block_t=64, block_r=4)
    base_ms = None
    for name, fn in impls.items():
        err = (fn().double() - ref).abs().max().item()
        ms = gpu_ms(fn)
        eager_ms = timed(fn)
        gbs = scan_bytes / ms / 1e6
        is_base = name == "torch doubling scan"
        base_ms = ms if is_base else base_ms
        frac = gbs / copy_gbs
        out.append(
            dict(
                op="GAE scan",
                case=case,
                impl=name,
                median_ms=ms,
                peak_mem_mb=peak_mb(fn, device == "cuda"),
                max_abs_err=None if is_base else err,
                ratio=None if is_base else (base_ms or ms) / ms,
                target=None if is_base else ">= 50% of copy bandwidth",
                met=None if is_base else frac >= 0.5,
                note=f"{gbs:.0f} GB/s = {100 * frac:.0f}% of copy ({HOW['timing']}); eager launch"
                f" {eager_ms:.4f} ms; err vs fp64 {err:.2g}",
            )
        )

    # the whole estimator (per-step terms in torch + the scan), and the scan's forward+backward
    ref_adv, _ = gae(GAMMA, LMBDA, value.double(), next_value.double(), reward.double(), done, backend="torch")
    full = {
        "torch (doubling) gae": ("torch", lambda: gae(GAMMA, LMBDA, value, next_value, reward, done, backend="torch")),
        "triton gae": ("triton", lambda: gae(GAMMA, LMBDA, value, next_value, reward, done, backend="triton")),
    }
    base_ms = None
    for name, (backend, fn) in full.items():
        if backend == "torch" and device == "cpu":  # the CPU torch path is the compiled loop, not the baseline
            fn = lambda: _doubling_scan(delta, coef, done)  # noqa: E731
        err = None if backend == "torch" else (fn()[0].double() - ref_adv).abs().max().item()
        ms = timed(fn)
        base_ms = ms if base_ms is None else base_ms
        out.append(
            dict(
                op="gae (full)",
                case=case,
                impl=name,
                median_ms=ms,
                peak_mem_mb=peak_mb(fn, device == "cuda"),
                max_abs_err=err,
                ratio=None if err is None else base_ms / ms,
                target=None,
                met=None,
                note=None,
            )
        )

    grad_out = torch.randn_like(delta)
    base_ms = None
    for name, backend in (("torch doubling", None), ("triton", "triton")):
        x = delta.clone().requires_grad_(True)

        def step(x=x, backend=backend) -> torch.Tensor:
            x.grad = None
            y = (
                _doubling_scan(x, coef, done)
                if backend is None
                else discounted_reverse_scan(x, coef, done, backend=backend)
            )
            y.backward(grad_out)
            return x.grad  # pyright: ignore[reportReturnType]  # set by backward

        grad = step().clone()
        if backend is None:
            ref_grad = grad
        ms = timed(step)
        base_ms = ms if base_ms is None else base_ms
        out.append(
            dict(
                op="GAE scan fwd+bwd",
                case=case,
                impl=name,
                median_ms=ms,
                peak_mem_mb=peak_mb(step, device == "cuda"),
                max_abs_err=None if backend is None else (grad - ref_grad).abs().max().item(),
                ratio=None if backend is None else base_ms / ms,
                target=None,
                met=None,
                note=None,
            )
        )
    return out


if __name__ == "__main__":
    import os
    import sys

    dry = "--dry-run" in sys.argv
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for row in run(dry):
        print(row)
