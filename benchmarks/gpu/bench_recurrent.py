"""LSTM / GRU with per-step resets, forward + backward: rl-kernels' fused Triton kernels against the
path rl-objectives' LSTMModule / GRUModule take today in sequence mode with resets (``_segmented``:
split the rows at resets, pack, cuDNN, scatter back), timed as the module call it is.

Target (LSTM, B=128, T=128, I=H=256, 3% resets): the Triton path at least 2x faster than the module's
pad path, forward + backward. Every implementation's output ``y`` and input gradient are checked
against rl-kernels' pure-torch loop (``lstm_reference`` / ``gru_reference``) before timing.

``run(dry_run)`` follows benchmarks/gpu/run_all.py's contract (dry run: CPU, tiny shapes,
Triton's interpreter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from _timing import median_ms, peak_mb

TARGET = ">= 2x faster than LSTMModule's pad path (split/pack/cuDNN/scatter), fwd+bwd"


def _case(kind: str, dry_run: bool, device: torch.device) -> tuple[str, dict[str, Any]]:
    B, T, n_in, H = (4, 5, 8, 16) if dry_run else (128, 128, 256, 256)
    gen = torch.Generator().manual_seed(0)
    rnn_cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    torch.manual_seed(0)
    rnn = rnn_cls(n_in, H, batch_first=True, device=device)
    x = torch.randn(B, T, n_in, generator=gen).to(device).requires_grad_(True)
    is_init = (torch.rand(B, T, generator=gen) < 0.03).to(device)
    is_init[:, 0] = True
    if dry_run:
        is_init[0, 2] = True
    out_shape = (B, T, H)
    grad_y = torch.randn(out_shape, generator=gen).to(device)
    case = f"B={B} T={T} I={n_in} H={H} resets=3% ({int(is_init[:, 1:].sum())} mid-sequence)"
    return case, {"rnn": rnn, "x": x, "is_init": is_init, "grad_y": grad_y}


def _impls(kind: str, data: dict[str, Any]) -> list[tuple[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]]]:
    """(name, fn) pairs; fn runs forward + backward and returns (y, dx)."""
    import rl_kernels
    from rl_kernels.recurrent import gru_reference, lstm_reference
    from tdict import TensorDict

    from rl_objectives.modules.recurrent import GRUModule, LSTMModule, set_recurrent_mode

    rnn, x, is_init, grad_y = data["rnn"], data["x"], data["is_init"], data["grad_y"]
    params = list(rnn.parameters())
    B, T = is_init.shape
    cls = LSTMModule if kind == "lstm" else GRUModule

    def module_fn(module: Any) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        def fn() -> tuple[torch.Tensor, torch.Tensor]:
            td = TensorDict(obs=x, is_init=is_init, batch_size=[B, T])
            with set_recurrent_mode(True):
                y = module(td)["out"]
            grads = torch.autograd.grad(y, [x, *params], grad_y)
            return y, grads[0]

        return fn

    def functional(**kw: Any) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        op = rl_kernels.lstm_with_resets if kind == "lstm" else rl_kernels.gru_with_resets

        def fn() -> tuple[torch.Tensor, torch.Tensor]:
            out = op(x, is_init, *params, **kw)
            y = out[0] if isinstance(out, tuple) else out
            grads = torch.autograd.grad(y, [x, *params], grad_y)
            return y, grads[0]

        return fn

    def reference() -> tuple[torch.Tensor, torch.Tensor]:
        out = (lstm_reference if kind == "lstm" else gru_reference)(x, is_init, *params)
        y = out[0] if isinstance(out, tuple) else out
        return y, torch.autograd.grad(y, [x, *params], grad_y)[0]

    pad = cls(**{kind: rnn}, in_key="obs", out_key="out")
    fused = cls(**{kind: rnn}, in_key="obs", out_key="out", recurrent_backend="triton")
    fused_tf32 = cls(
        **{kind: rnn}, in_key="obs", out_key="out", recurrent_backend="triton", recurrent_matmul_precision="tf32"
    )
    impls = [
        ("torch reference loop", reference),
        ("module pad (baseline)", module_fn(pad)),
        ("module triton ieee", module_fn(fused)),
        ("module triton tf32", module_fn(fused_tf32)),
        ("triton tf32 recompute", functional(backend="triton", matmul_precision="tf32", recompute=True)),
    ]
    if kind == "lstm":  # the default num_splits=0 picks 8 here on an H200 (B=128: 8 row blocks)
        for splits in (1, 16):
            impls.append(
                (
                    f"triton tf32 num_splits={splits}",
                    functional(backend="triton", matmul_precision="tf32", kernel_config={"num_splits": splits}),
                )
            )
    return impls


def run(dry_run: bool) -> list[dict]:
    """Rows for LSTM and GRU: reference, module pad path (baseline), module/functional Triton variants."""
    cuda = not dry_run
    device = torch.device("cuda" if cuda else "cpu")
    warmup, reps = (1, 1) if dry_run else (3, 20)
    rows: list[dict] = []
    for kind in ("lstm", "gru"):
        op = f"{kind}_with_resets fwd+bwd"
        case, data = _case(kind, dry_run, device)
        ref_y = ref_dx = None
        base_ms = None
        for name, fn in _impls(kind, data):
            row: dict[str, Any] = {"op": op, "case": case, "impl": name, "peak_mem_mb": None}
            try:
                y, dx = fn()
                if ref_y is None:
                    ref_y, ref_dx = y.detach(), dx.detach()
                    err = None
                else:
                    assert ref_dx is not None
                    err = max(float((y.detach() - ref_y).abs().max()), float((dx.detach() - ref_dx).abs().max()))
                ms = median_ms(fn, cuda, warmup, reps)
                row |= {"median_ms": ms, "peak_mem_mb": peak_mb(fn, cuda), "max_abs_err": err}
                if name.startswith("module pad"):
                    base_ms = ms
                elif base_ms is not None and name != "torch reference loop":
                    row["ratio"] = base_ms / ms
                    if kind == "lstm":
                        row |= {"target": TARGET, "met": base_ms / ms >= 2.0}
            except Exception as exc:  # report and carry on with the other implementations
                row["note"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
    return rows


if __name__ == "__main__":
    import os
    import sys

    dry = "--dry-run" in sys.argv
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for r in run(dry):
        print(r)
