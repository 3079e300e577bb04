"""Triton kernels of :func:`rl_kernels.chunked_log_probs`: log-softmax and gather without the ``[N, V]`` logits.

Two schemes compute the same thing; both keep only each row's log-normaliser ``lse`` between forward
and backward, and both recompute the logits in the backward.

``"matmul"`` (the default where torch can form float32 logits from half inputs: CUDA, torch >= 2.8):
cuBLAS forms the float32 logits of ``chunk_size`` rows at a time into one ``[chunk, V]`` buffer, and one
Triton program per row reads its row once: the forward (:func:`_row_stats_kernel`) folds it into an
online log-sum-exp and picks the target's logit; the backward (:func:`_row_dlogits_kernel`) turns it
into ``d logits = g * (onehot - exp(logits - lse)) / T`` in the input dtype, which two more cuBLAS
matmuls take (``d hidden = d logits @ W``; ``d logits.T @ hidden`` added to a float32 ``d W``). The
matrix products run at cuBLAS speed; the price is one write and one read of the chunk's logits.

``"fused"`` (:func:`_fwd_kernel`, :func:`_dlogits_kernel`): the logits are formed tile by tile with
``tl.dot`` inside the kernels. The forward folds each ``[BLOCK_M, BLOCK_N]`` tile into a running max and
sum of exponentials and picks the target where the tile holds it; programs over runs of the vocabulary
are merged on the host. The backward kernel recomputes a tile, writes its ``d logits`` into the
``[chunk, V]`` buffer (and the tile's column sums for the bias) for the same two cuBLAS matmuls.

Peak extra memory: the ``[chunk, V]`` buffers (float32 logits and input-dtype ``d logits`` for
``"matmul"``; ``d logits`` alone for ``"fused"``) plus the float32 weight gradient. Half-precision inputs
are multiplied with float32 accumulation; float32 inputs use TF32 when
``torch.backends.cuda.matmul.allow_tf32`` is set (as torch's own matmuls do), exact float32 otherwise.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from .log_probs import grad_buffers, in_input_dtypes

__all__ = ["chunked_log_probs_triton"]

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _logits_tile(
    h_ptr,
    w_ptr,
    b_ptr,
    rows,
    cols,
    row_ok,
    col_ok,
    D: tl.constexpr,
    stride_hn,
    stride_hd,
    stride_wv,
    stride_wd,
    inv_temp,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """``(hidden[rows] @ weight[cols].T + bias[cols]) * inv_temp`` as a float32 ``[BLOCK_M, BLOCK_N]`` tile."""
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = h_ptr + rows.to(tl.int64)[:, None] * stride_hn + ks[None, :] * stride_hd
    b_ptrs = w_ptr + cols.to(tl.int64)[None, :] * stride_wv + ks[:, None] * stride_wd
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = (k0 + ks) < D
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST:  # Triton's interpreter multiplies bfloat16 wrongly; the products are exact in float32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_hd
        b_ptrs += BLOCK_K * stride_wd
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return acc * inv_temp


@triton.jit
def _fwd_kernel(
    h_ptr,
    w_ptr,
    b_ptr,
    t_ptr,
    max_ptr,
    sum_ptr,
    pick_ptr,
    N,
    V,
    D: tl.constexpr,
    stride_hn,
    stride_hd,
    stride_wv,
    stride_wd,
    tiles_per_split,
    inv_temp,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Per (row block, vocabulary run): the running max, sum of exp and picked target logit of each row."""
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < N
    target = tl.load(t_ptr + rows, mask=row_ok, other=-1).to(tl.int32)
    run_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    picked = tl.zeros((BLOCK_M,), dtype=tl.float32)
    first_tile = pid_s * tiles_per_split
    last_tile = tl.cdiv(V, BLOCK_N)
    # a while loop: the interpreter cannot range() over a runtime argument (D, a constexpr, can be); the
    # counter starts from a program id so that it stays a tensor when Triton specialises tiles_per_split == 1
    i = pid_s * 0
    while i < tiles_per_split:
        tile = first_tile + i
        i += 1
        if tile < last_tile:  # the last run may be shorter
            cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
            col_ok = cols < V
            x = _logits_tile(
                h_ptr,
                w_ptr,
                b_ptr,
                rows,
                cols,
                row_ok,
                col_ok,
                D,
                stride_hn,
                stride_hd,
                stride_wv,
                stride_wd,
                inv_temp,
                HAS_BIAS,
                EVEN_K,
                BLOCK_K,
                BLOCK_M,
                BLOCK_N,
                PRECISION,
                UPCAST,
            )
            x = tl.where(col_ok[None, :], x, float("-inf"))
            # every tile holds at least one real column, so new_max is finite and no inf - inf arises
            new_max = tl.maximum(run_max, tl.max(x, axis=1))
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max[:, None]), axis=1)
            run_max = new_max
            picked += tl.sum(tl.where(cols[None, :] == target[:, None], x, 0.0), axis=1)
    out = pid_s * N + rows
    tl.store(max_ptr + out, run_max, mask=row_ok)
    tl.store(sum_ptr + out, run_sum, mask=row_ok)
    tl.store(pick_ptr + out, picked, mask=row_ok)


@triton.jit
def _dlogits_kernel(
    h_ptr,
    w_ptr,
    b_ptr,
    t_ptr,
    lse_ptr,
    g_ptr,
    dl_ptr,
    db_ptr,
    N,
    V,
    D: tl.constexpr,
    stride_hn,
    stride_hd,
    stride_wv,
    stride_wd,
    stride_dln,
    inv_temp,
    HAS_BIAS: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """One tile of ``d logits = g * (onehot - softmax) / T`` (and its column sums for the bias)."""
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(N, BLOCK_M)
    blocks_n = tl.cdiv(V, BLOCK_N)
    # GROUP_M row blocks walk the vocabulary together, so each weight tile is read from L2 by all of them
    per_group = GROUP_M * blocks_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_size = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    col_ok = cols < V
    x = _logits_tile(
        h_ptr,
        w_ptr,
        b_ptr,
        rows,
        cols,
        row_ok,
        col_ok,
        D,
        stride_hn,
        stride_hd,
        stride_wv,
        stride_wd,
        inv_temp,
        HAS_BIAS,
        EVEN_K,
        BLOCK_K,
        BLOCK_M,
        BLOCK_N,
        PRECISION,
        UPCAST,
    )
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    g = tl.load(g_ptr + rows, mask=row_ok, other=0.0)
    target = tl.load(t_ptr + rows, mask=row_ok, other=-1).to(tl.int32)
    onehot = tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
    d = (onehot - tl.exp(x - lse[:, None])) * (g * inv_temp)[:, None]
    ok = row_ok[:, None] & col_ok[None, :]
    d = tl.where(ok, d, 0.0)
    dl_ptrs = dl_ptr + rows.to(tl.int64)[:, None] * stride_dln + cols[None, :]
    tl.store(dl_ptrs, d.to(dl_ptr.dtype.element_ty), mask=ok)
    if BIAS_GRAD:
        tl.store(db_ptr + pid_m * V + cols, tl.sum(d, axis=0), mask=col_ok)


@triton.jit
def _row_stats_kernel(
    l_ptr,
    t_ptr,
    lp_ptr,
    lse_ptr,
    V: tl.constexpr,
    stride_l,
    inv_temp,
    BLOCK_V: tl.constexpr,
):
    """One row of float32 logits: its log-normaliser and the target's log-probability (online log-sum-exp)."""
    row = tl.program_id(0)
    base = l_ptr + row.to(tl.int64) * stride_l
    run_max = tl.max(tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32), axis=0)
    run_sum = tl.sum(tl.zeros((BLOCK_V,), dtype=tl.float32), axis=0)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")) * inv_temp
        # every block holds at least one real column, so new_max is finite and no inf - inf arises
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    lse = run_max + tl.log(run_sum)
    target = tl.load(t_ptr + row)
    picked = tl.load(base + target) * inv_temp
    tl.store(lse_ptr + row, lse)
    tl.store(lp_ptr + row, picked - lse)


@triton.jit
def _row_dlogits_kernel(
    l_ptr,
    t_ptr,
    lse_ptr,
    g_ptr,
    dl_ptr,
    V: tl.constexpr,
    stride_l,
    stride_dl,
    inv_temp,
    BLOCK_V: tl.constexpr,
):
    """One row of ``d logits = g * (onehot - softmax) / T`` from its float32 logits (``dl`` may alias ``l``)."""
    row = tl.program_id(0)
    src = l_ptr + row.to(tl.int64) * stride_l
    dst = dl_ptr + row.to(tl.int64) * stride_dl
    lse = tl.load(lse_ptr + row)
    g = tl.load(g_ptr + row) * inv_temp
    target = tl.load(t_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        ok = cols < V
        x = tl.load(src + cols, mask=ok, other=0.0) * inv_temp
        d = tl.where(cols == target, g, 0.0) - tl.exp(x - lse) * g
        tl.store(dst + cols, d.to(dl_ptr.dtype.element_ty), mask=ok)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _config(device: torch.device, dtype: torch.dtype, precision: str) -> dict[str, int]:
    """Tile sizes: tiny under the interpreter (fast tests), Hopper-sized on a GPU.

    On sm_90 (ptxas -v, offline) these keep both kernels free of register spills: 128x128 tiles with
    8 warps run ``tl.dot`` on wgmma for half and TF32 inputs; exact float32 (FMA) gets 64x128.
    """
    if device.type != "cuda":
        return {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 1, "num_stages": 1}
    if dtype == torch.float32:
        block_m = 128 if precision == "tf32" else 64
        return {"BLOCK_M": block_m, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}


def _precision(device: torch.device, dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: exact float32 unless torch allows TF32 (no effect on half inputs)."""
    if device.type != "cuda":
        return "ieee"
    if dtype == torch.float32:
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return "tf32"  # Triton's default, ignored for half inputs


def _upcast(device: torch.device, dtype: torch.dtype) -> bool:
    """bfloat16 tiles go to float32 before ``tl.dot`` under the interpreter (which gets bfloat16 dots wrong)."""
    return dtype == torch.bfloat16 and device.type != "cuda"


def _tiles_per_split(device: torch.device, n_row_blocks: int, n_tiles: int) -> int:
    """How many vocabulary tiles one forward program walks: enough programs for ~8 waves on the GPU."""
    if device.type != "cuda":
        return min(2, n_tiles)  # under the interpreter: exercise both the in-program and cross-program merge
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    splits = max(1, min(n_tiles, _cdiv(8 * sms, n_row_blocks)))
    return _cdiv(n_tiles, splits)


def _forward(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(target), lse)``, both float32 ``[N]``, for validated inputs."""
    n, d = hidden.shape
    v = weight.shape[0]
    precision = _precision(hidden.device, hidden.dtype)
    cfg = _config(hidden.device, hidden.dtype, precision)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    n_row_blocks, n_tiles = _cdiv(n, bm), _cdiv(v, bn)
    per_split = _tiles_per_split(hidden.device, n_row_blocks, n_tiles)
    splits = _cdiv(n_tiles, per_split)
    run_max, run_sum, picked = torch.empty(3, splits, n, device=hidden.device, dtype=torch.float32).unbind(0)
    _fwd_kernel[(n_row_blocks, splits)](
        hidden,
        weight,
        hidden if bias is None else bias,
        targets,
        run_max,
        run_sum,
        picked,
        n,
        v,
        d,
        hidden.stride(0),
        hidden.stride(1),
        weight.stride(0),
        weight.stride(1),
        per_split,
        1.0 / temperature,
        HAS_BIAS=bias is not None,
        EVEN_K=d % bk == 0,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        PRECISION=precision,
        UPCAST=_upcast(hidden.device, hidden.dtype),
        num_warps=cfg["num_warps"],  # pyright: ignore[reportCallIssue]  # a launch option triton does not type
        num_stages=cfg["num_stages"],  # pyright: ignore[reportCallIssue]  # likewise
    )
    top = run_max.max(0).values
    lse = top + (run_sum * (run_max - top).exp()).sum(0).log()
    return picked.sum(0) - lse, lse


@functools.cache
def _mm_into_float32(device: torch.device) -> bool:
    """Whether torch multiplies half-precision matrices into a float32 result on ``device`` (``out_dtype=``:
    CUDA, torch >= 2.8)."""
    one = torch.ones(1, 1, device=device, dtype=torch.bfloat16)
    try:
        return torch.mm(one, one, torch.float32).dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def _add_matmul(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` with ``acc`` float32; half inputs are multiplied with float32 output when possible."""
    if a.dtype == acc.dtype:
        acc.addmm_(a, b)
    elif _mm_into_float32(acc.device):
        torch.addmm(acc, a, b, torch.float32, out=acc)
    else:
        acc += torch.mm(a, b)  # each chunk's product rounded to the input dtype once, summed in float32


def _logits_into(out: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """``out = h @ weight.T + bias``, float32 ``[rows, V]``: half inputs multiplied with float32 accumulation
    and output by cuBLAS (from float32 copies where torch cannot, as on the CPU under the interpreter)."""
    if h.dtype == torch.float32:
        torch.mm(h, weight.T, out=out)
    elif _mm_into_float32(h.device):
        torch.mm(h, weight.T, torch.float32, out=out)
    else:
        torch.mm(h.float(), weight.float().T, out=out)
    if bias is not None:
        out += bias


def _backward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    chunk_size: int,
    temperature: float,
    needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Gradients of ``log p(target)`` w.r.t. hidden, weight and bias (None where not needed)."""
    n, d = hidden.shape
    v = weight.shape[0]
    precision = _precision(hidden.device, hidden.dtype)
    cfg = _config(hidden.device, hidden.dtype, precision)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    grad_h, grad_w, grad_b = grad_buffers(hidden, weight, bias, needs, torch.float32)
    need_b = grad_b is not None
    g = grad_out.to(torch.float32).contiguous()
    chunk = min(chunk_size, n)
    buffer = torch.empty(chunk, v, device=hidden.device, dtype=hidden.dtype)
    bias_parts = torch.empty(_cdiv(chunk, bm), v, device=hidden.device, dtype=torch.float32) if need_b else None
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        rows = stop - start
        d_logits = buffer[:rows]
        h = hidden[start:stop]
        grid = (_cdiv(rows, bm) * _cdiv(v, bn),)
        _dlogits_kernel[grid](
            h,
            weight,
            hidden if bias is None else bias,
            targets[start:stop],
            lse[start:stop],
            g[start:stop],
            d_logits,
            lse if bias_parts is None else bias_parts,
            rows,
            v,
            d,
            h.stride(0),
            h.stride(1),
            weight.stride(0),
            weight.stride(1),
            d_logits.stride(0),
            1.0 / temperature,
            HAS_BIAS=bias is not None,
            BIAS_GRAD=need_b,
            EVEN_K=d % bk == 0,
            BLOCK_M=bm,
            BLOCK_N=bn,
            BLOCK_K=bk,
            GROUP_M=8,
            PRECISION=precision,
            UPCAST=_upcast(hidden.device, hidden.dtype),
            num_warps=cfg["num_warps"],  # pyright: ignore[reportCallIssue]  # a launch option triton does not type
            num_stages=cfg["num_stages"],  # pyright: ignore[reportCallIssue]  # likewise
        )
        if grad_h is not None:
            torch.mm(d_logits, weight, out=grad_h[start:stop])
        if grad_w is not None:
            _add_matmul(grad_w, d_logits.T, h)
        if grad_b is not None and bias_parts is not None:
            grad_b += bias_parts[: _cdiv(rows, bm)].sum(0)
    return in_input_dtypes((grad_h, grad_w, grad_b), weight, bias)


def _row_config(device: torch.device, v: int) -> dict[str, int]:
    """Vocabulary block of the row kernels: 16 under the interpreter (several blocks on test shapes)."""
    if device.type != "cuda":
        return {"BLOCK_V": 16, "num_warps": 1}
    return {"BLOCK_V": min(4096, int(triton.next_power_of_2(v))), "num_warps": 8}


def _forward_matmul(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk_size: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(target), lse)`` from float32 logits formed by cuBLAS ``chunk_size`` rows at a time."""
    n, v = hidden.shape[0], weight.shape[0]
    chunk = min(chunk_size, n)
    logits = torch.empty(chunk, v, device=hidden.device, dtype=torch.float32)
    log_probs, lse = torch.empty(2, n, device=hidden.device, dtype=torch.float32).unbind(0)
    cfg = _row_config(hidden.device, v)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = logits[: stop - start]
        _logits_into(block, hidden[start:stop], weight, bias)
        _row_stats_kernel[(stop - start,)](
            block,
            targets[start:stop],
            log_probs[start:stop],
            lse[start:stop],
            v,
            block.stride(0),
            1.0 / temperature,
            BLOCK_V=cfg["BLOCK_V"],
            num_warps=cfg["num_warps"],  # pyright: ignore[reportCallIssue]  # a launch option triton does not type
        )
    return log_probs, lse


def _backward_matmul(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    chunk_size: int,
    temperature: float,
    needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Gradients as :func:`_backward`, the logits recomputed by cuBLAS and turned into ``d logits`` row by row."""
    n = hidden.shape[0]
    v = weight.shape[0]
    grad_h, grad_w, grad_b = grad_buffers(hidden, weight, bias, needs, torch.float32)
    g = grad_out.to(torch.float32).contiguous()
    chunk = min(chunk_size, n)
    logits = torch.empty(chunk, v, device=hidden.device, dtype=torch.float32)
    # d logits in the input dtype for the matmuls (in place over the logits for float32 inputs)
    d_buffer = (
        logits if hidden.dtype == torch.float32 else torch.empty(chunk, v, device=hidden.device, dtype=hidden.dtype)
    )
    cfg = _row_config(hidden.device, v)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        rows = stop - start
        block, d_logits, h = logits[:rows], d_buffer[:rows], hidden[start:stop]
        _logits_into(block, h, weight, bias)
        _row_dlogits_kernel[(rows,)](
            block,
            targets[start:stop],
            lse[start:stop],
            g[start:stop],
            d_logits,
            v,
            block.stride(0),
            d_logits.stride(0),
            1.0 / temperature,
            BLOCK_V=cfg["BLOCK_V"],
            num_warps=cfg["num_warps"],  # pyright: ignore[reportCallIssue]  # a launch option triton does not type
        )
        if grad_h is not None:
            torch.mm(d_logits, weight, out=grad_h[start:stop])
        if grad_w is not None:
            _add_matmul(grad_w, d_logits.T, h)
        if grad_b is not None:
            grad_b += d_logits.sum(0, dtype=torch.float32)
    return in_input_dtypes((grad_h, grad_w, grad_b), weight, bias)


SCHEMES = ("matmul", "fused")


def default_scheme(device: torch.device, dtype: torch.dtype) -> str:
    """``"matmul"`` (cuBLAS logits per chunk, Triton row kernels) wherever torch forms float32 logits from the
    inputs without copies (float32 inputs, or half inputs on CUDA with torch >= 2.8) and on the CPU (the
    interpreter); ``"fused"`` (Triton tiles from the inputs) for half inputs on older CUDA torch releases."""
    if device.type != "cuda" or dtype == torch.float32 or _mm_into_float32(device):
        return "matmul"
    return "fused"


class _TritonChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk_size: int,
        temperature: float,
        scheme: str,
    ) -> torch.Tensor:
        if scheme == "matmul":
            log_probs, lse = _forward_matmul(hidden, weight, bias, targets, chunk_size, temperature)
        else:
            log_probs, lse = _forward(hidden, weight, bias, targets, temperature)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk_size, ctx.temperature, ctx.scheme = chunk_size, temperature, scheme
        return log_probs

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        backward = _backward_matmul if ctx.scheme == "matmul" else _backward
        grads = backward(hidden, weight, bias, targets, lse, grad_out, ctx.chunk_size, ctx.temperature, needs)
        return (*grads, None, None, None, None)


def chunked_log_probs_triton(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk_size: int,
    temperature: float,
    scheme: str | None = None,
) -> torch.Tensor:
    """The Triton path of :func:`rl_kernels.chunked_log_probs` (inputs validated, ``N > 0``; float32 ``[N]``).

    ``scheme`` (one of :data:`SCHEMES`; :func:`default_scheme` when None) picks how the logits are formed.
    """
    if hidden.dtype not in _SUPPORTED:
        raise ValueError(f"chunked_log_probs: the Triton path takes {_SUPPORTED}, got {hidden.dtype}.")
    if scheme is None:
        scheme = default_scheme(hidden.device, hidden.dtype)
    elif scheme not in SCHEMES:
        raise ValueError(f"chunked_log_probs: scheme must be one of {SCHEMES}, got {scheme!r}.")
    out = _TritonChunkedLogProbs.apply(hidden, weight, bias, targets, chunk_size, temperature, scheme)
    return out  # pyright: ignore[reportReturnType]  # autograd.Function.apply is untyped
