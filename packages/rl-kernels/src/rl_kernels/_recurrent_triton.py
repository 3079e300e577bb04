"""Triton kernels for LSTM / GRU layers with per-step resets: the time loop runs inside one kernel.

Layout (all contiguous, batch-major, made so by :mod:`rl_kernels.recurrent`):

- ``xp [B, T, G*H]``: the input projection ``x @ W_ih^T`` plus the biases that sit outside the cell
  (all of them for the LSTM; ``b_ih`` and ``b_hr``, ``b_hz`` for the GRU), one matmul done in torch first;
- ``h [B, T+1, H]`` (and the LSTM's ``c [B, T+1, H]``): slot 0 holds the initial state, slot ``t+1``
  the state after step ``t``; the kernel reads the previous step's slot back from global memory, so the
  running state needs no other scratch;
- ``init [B, T]`` (int8): the state entering step ``t`` is zeroed where ``init[:, t]``.

Grid ``(cdiv(B, BLOCK_B), NUM_SPLITS)``: a program owns ``BLOCK_B`` batch rows and a slice of the hidden
units (all of them when ``NUM_SPLITS == 1``). Per step it computes the recurrent matmul for its units,
tiled ``BLOCK_H`` units (times the G gates) by ``BLOCK_K`` of the reduction, then waits for the step to
be complete before the next one reads it: a ``tl.debug_barrier()`` inside the program when it owns all
units, else a spin barrier on an atomic counter shared by the ``NUM_SPLITS`` programs of its rows
(GPU only: every program of the grid must be resident at once, which the caller checks; never under
the interpreter, which runs programs one after the other).

Backward: the reverse time loop computes the gate gradients of step ``t`` for the program's units,
stores them (the weight and input gradients are then large matmuls in torch), and the recurrent
gradient ``dgates_t @ W_hh`` for its units, carried in a ``[B, H]`` scratch (the LSTM's cell
gradient in another), zeroed across resets; at the end those scratches hold the initial-state
gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["gru_backward", "gru_forward", "lstm_backward", "lstm_forward"]


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    # 2 * sigmoid(2x) - 1, with exp of a non-positive argument only (no overflow)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _step_sync(sync_ptr, pid_b, target, NUM_SPLITS: tl.constexpr, MAX_SPIN: tl.constexpr):
    """Every program of these rows has finished the step (its stores visible) once this returns; a wait
    cut short by ``MAX_SPIN`` sets ``sync[num_row_blocks]``, which the host turns into an error."""
    tl.debug_barrier()
    if NUM_SPLITS > 1:
        tl.atomic_add(sync_ptr + pid_b, 1, sem="release", scope="gpu")
        seen = tl.atomic_add(sync_ptr + pid_b, 0, sem="acquire", scope="gpu")
        spins = target * 0
        while (seen < target) & (spins < MAX_SPIN):
            seen = tl.atomic_add(sync_ptr + pid_b, 0, sem="acquire", scope="gpu")
            spins += 1
        if seen < target:  # gave up waiting: flag it (the slot after the row blocks' counters) for the host
            tl.atomic_max(sync_ptr + tl.num_programs(0), 1)
        tl.debug_barrier()


@triton.jit
def _recurrent_dot(
    h_ptr, h_row, keep, rmask, wt_ptr, wt_stride, col0, cols, cmask, K,
    acc, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """``acc + (keep * h[rows, :K]) @ wt[:K, col0 + cols]`` (``wt`` row-major with row stride ``wt_stride``)."""
    for k0 in range(0, K, BLOCK_K):
        ks = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
        if K % BLOCK_K == 0:  # no mask along the reduction: the loads vectorize
            hmask = rmask[:, None]
            wmask = cmask[None, :]
        else:
            kmask = ks < K
            hmask = rmask[:, None] & kmask[None, :]
            wmask = kmask[:, None] & cmask[None, :]
        hk = tl.load(h_ptr + h_row[:, None] + ks[None, :], mask=hmask, other=0.0, cache_modifier=".cg")
        hk = hk * keep[:, None]
        w = tl.load(wt_ptr + ks[:, None] * wt_stride + (col0 + cols)[None, :], mask=wmask, other=0.0)
        acc = tl.dot(hk, w, acc, input_precision=PRECISION)
    return acc


# ------------------------------------------------------------------------------------------------ LSTM
@triton.jit
def _lstm_gates(
    xp_ptr, xp_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, cols, cmask,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Activated gates ``(i, f, g, o)`` of step ``t`` for units ``cols``, from ``h[:, t]`` and ``xp[:, t]``."""
    G4 = 4 * H
    m2 = rmask[:, None] & cmask[None, :]
    base = xp_ptr + xp_row[:, None] + t * G4 + cols[None, :]
    zero = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    a_i = tl.load(base, mask=m2, other=0.0) + zero
    a_f = tl.load(base + H, mask=m2, other=0.0) + zero
    a_g = tl.load(base + 2 * H, mask=m2, other=0.0) + zero
    a_o = tl.load(base + 3 * H, mask=m2, other=0.0) + zero
    hrow = h_row + t * H
    a_i = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G4, 0, cols, cmask, H, a_i, BLOCK_K, PRECISION)
    a_f = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G4, H, cols, cmask, H, a_f, BLOCK_K, PRECISION)
    a_g = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G4, 2 * H, cols, cmask, H, a_g, BLOCK_K, PRECISION)
    a_o = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G4, 3 * H, cols, cmask, H, a_o, BLOCK_K, PRECISION)
    return _sigmoid(a_i), _sigmoid(a_f), _tanh(a_g), _sigmoid(a_o)


@triton.jit(do_not_specialize=["T"])
def _lstm_fwd_kernel(
    xp_ptr, init_ptr, wt_ptr, h_ptr, c_ptr, sync_ptr,
    B, T, H: tl.constexpr, UNITS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SPLITS: tl.constexpr,
    STORE_GATES: tl.constexpr, PRECISION: tl.constexpr, MAX_SPIN: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    rows64 = rows.to(tl.int64)
    xp_row = rows64 * T * 4 * H
    h_row = rows64 * (T + 1) * H
    u0 = pid_c * UNITS
    t = T * 0  # a runtime loop over time (a while loop: the interpreter cannot range() over an argument)
    while t < T:
        keep = 1.0 - tl.load(init_ptr + rows64 * T + t, mask=rmask, other=0).to(tl.float32)
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            i, f, g, o = _lstm_gates(  # pyright: ignore[reportGeneralTypeIssues]  # triton.jit is untyped
                xp_ptr, xp_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, cols, cmask,
                BLOCK_B, BLOCK_H, BLOCK_K, PRECISION,
            )  # fmt: skip
            at = h_row[:, None] + t * H + cols[None, :]
            c_prev = tl.load(c_ptr + at, mask=m2, other=0.0) * keep[:, None]
            c_new = f * c_prev + i * g
            h_new = o * _tanh(c_new)
            tl.store(c_ptr + at + H, c_new, mask=m2)
            tl.store(h_ptr + at + H, h_new, mask=m2)
            if STORE_GATES:  # the activations replace the pre-activations
                base = xp_ptr + xp_row[:, None] + t * 4 * H + cols[None, :]
                tl.store(base, i, mask=m2)
                tl.store(base + H, f, mask=m2)
                tl.store(base + 2 * H, g, mask=m2)
                tl.store(base + 3 * H, o, mask=m2)
        _step_sync(sync_ptr, pid_b, (t + 1) * NUM_SPLITS, NUM_SPLITS, MAX_SPIN)
        t += 1


@triton.jit(do_not_specialize=["T"])
def _lstm_bwd_kernel(
    gx_ptr, init_ptr, w_ptr, wt_ptr, h_ptr, c_ptr, dy_ptr, dcy_ptr, dg_ptr, dh_ptr, dc_ptr, sync_ptr,
    B, T, H: tl.constexpr, UNITS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SPLITS: tl.constexpr,
    RECOMPUTE: tl.constexpr, PRECISION: tl.constexpr, MAX_SPIN: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    rows64 = rows.to(tl.int64)
    g_row = rows64 * T * 4 * H
    h_row = rows64 * (T + 1) * H
    y_row = rows64 * T * H
    s_row = rows64 * H
    u0 = pid_c * UNITS
    tt = T * 0
    while tt < T:
        t = T - 1 - tt
        keep = 1.0 - tl.load(init_ptr + rows64 * T + t, mask=rmask, other=0).to(tl.float32)
        # 1. gate gradients of step t for this program's units
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            if RECOMPUTE:
                i, f, g, o = _lstm_gates(  # pyright: ignore[reportGeneralTypeIssues]  # triton.jit is untyped
                    gx_ptr, g_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, cols, cmask,
                    BLOCK_B, BLOCK_H, BLOCK_K, PRECISION,
                )  # fmt: skip
            else:
                base = gx_ptr + g_row[:, None] + t * 4 * H + cols[None, :]
                i = tl.load(base, mask=m2, other=0.0)
                f = tl.load(base + H, mask=m2, other=0.0)
                g = tl.load(base + 2 * H, mask=m2, other=0.0)
                o = tl.load(base + 3 * H, mask=m2, other=0.0)
            at = h_row[:, None] + t * H + cols[None, :]
            c_prev = tl.load(c_ptr + at, mask=m2, other=0.0) * keep[:, None]
            tc = _tanh(tl.load(c_ptr + at + H, mask=m2, other=0.0))
            sat = s_row[:, None] + cols[None, :]
            yat = y_row[:, None] + t * H + cols[None, :]
            dh = tl.load(dy_ptr + yat, mask=m2, other=0.0) + tl.load(dh_ptr + sat, mask=m2, other=0.0)
            dc = tl.load(dcy_ptr + yat, mask=m2, other=0.0) + tl.load(dc_ptr + sat, mask=m2, other=0.0)
            dc = dc + dh * o * (1.0 - tc * tc)
            dbase = dg_ptr + g_row[:, None] + t * 4 * H + cols[None, :]
            tl.store(dbase, dc * g * i * (1.0 - i), mask=m2)
            tl.store(dbase + H, dc * c_prev * f * (1.0 - f), mask=m2)
            tl.store(dbase + 2 * H, dc * i * (1.0 - g * g), mask=m2)
            tl.store(dbase + 3 * H, dh * tc * o * (1.0 - o), mask=m2)
            tl.store(dc_ptr + sat, dc * f * keep[:, None], mask=m2)
        _step_sync(sync_ptr, pid_b, (tt + 1) * NUM_SPLITS, NUM_SPLITS, MAX_SPIN)
        # 2. the recurrent gradient dgates_t @ W_hh for this program's units, into the carry
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            acc = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            acc = _recurrent_dot(dg_ptr, g_row + t * 4 * H, keep, rmask, w_ptr, H, 0, cols, cmask, 4 * H, acc,
                                 BLOCK_K, PRECISION)  # fmt: skip
            tl.store(dh_ptr + s_row[:, None] + cols[None, :], acc, mask=m2)
        tl.debug_barrier()  # the carry is re-read by this program only
        tt += 1


# ------------------------------------------------------------------------------------------------ GRU
@triton.jit
def _gru_gates(
    xp_ptr, xp_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, bhn_ptr, cols, cmask,
    HAS_BHN: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """``(r, z, n, hn)`` of step ``t`` for units ``cols`` (``hn = h W_hn^T + b_hn``, before ``r *``)."""
    G3 = 3 * H
    m2 = rmask[:, None] & cmask[None, :]
    base = xp_ptr + xp_row[:, None] + t * G3 + cols[None, :]
    zero = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    a_r = tl.load(base, mask=m2, other=0.0) + zero
    a_z = tl.load(base + H, mask=m2, other=0.0) + zero
    x_n = tl.load(base + 2 * H, mask=m2, other=0.0)
    hn = zero
    if HAS_BHN:
        hn = hn + tl.load(bhn_ptr + cols, mask=cmask, other=0.0)[None, :]
    hrow = h_row + t * H
    a_r = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G3, 0, cols, cmask, H, a_r, BLOCK_K, PRECISION)
    a_z = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G3, H, cols, cmask, H, a_z, BLOCK_K, PRECISION)
    hn = _recurrent_dot(h_ptr, hrow, keep, rmask, wt_ptr, G3, 2 * H, cols, cmask, H, hn, BLOCK_K, PRECISION)
    r = _sigmoid(a_r)
    z = _sigmoid(a_z)
    n = _tanh(x_n + r * hn)
    return r, z, n, hn


@triton.jit(do_not_specialize=["T"])
def _gru_fwd_kernel(
    xp_ptr, init_ptr, wt_ptr, bhn_ptr, h_ptr, gates_ptr, sync_ptr,
    B, T, H: tl.constexpr, UNITS: tl.constexpr,
    HAS_BHN: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_SPLITS: tl.constexpr, STORE_GATES: tl.constexpr, PRECISION: tl.constexpr, MAX_SPIN: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    rows64 = rows.to(tl.int64)
    xp_row = rows64 * T * 3 * H
    gs_row = rows64 * T * 4 * H
    h_row = rows64 * (T + 1) * H
    u0 = pid_c * UNITS
    t = T * 0  # a runtime loop over time (a while loop: the interpreter cannot range() over an argument)
    while t < T:
        keep = 1.0 - tl.load(init_ptr + rows64 * T + t, mask=rmask, other=0).to(tl.float32)
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            r, z, n, hn = _gru_gates(  # pyright: ignore[reportGeneralTypeIssues]  # triton.jit is untyped
                xp_ptr, xp_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, bhn_ptr, cols, cmask,
                HAS_BHN, BLOCK_B, BLOCK_H, BLOCK_K, PRECISION,
            )  # fmt: skip
            at = h_row[:, None] + t * H + cols[None, :]
            h_prev = tl.load(h_ptr + at, mask=m2, other=0.0) * keep[:, None]
            tl.store(h_ptr + at + H, n + z * (h_prev - n), mask=m2)
            if STORE_GATES:
                base = gates_ptr + gs_row[:, None] + t * 4 * H + cols[None, :]
                tl.store(base, r, mask=m2)
                tl.store(base + H, z, mask=m2)
                tl.store(base + 2 * H, n, mask=m2)
                tl.store(base + 3 * H, hn, mask=m2)
        _step_sync(sync_ptr, pid_b, (t + 1) * NUM_SPLITS, NUM_SPLITS, MAX_SPIN)
        t += 1


@triton.jit(do_not_specialize=["T"])
def _gru_bwd_kernel(
    xp_ptr, gates_ptr, init_ptr, w_ptr, wt_ptr, bhn_ptr, h_ptr, dy_ptr, dgx_ptr, dgh_ptr, dh_ptr, sync_ptr,
    B, T, H: tl.constexpr, UNITS: tl.constexpr,
    HAS_BHN: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_SPLITS: tl.constexpr, RECOMPUTE: tl.constexpr, PRECISION: tl.constexpr, MAX_SPIN: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    rows64 = rows.to(tl.int64)
    xp_row = rows64 * T * 3 * H
    gs_row = rows64 * T * 4 * H
    h_row = rows64 * (T + 1) * H
    y_row = rows64 * T * H
    s_row = rows64 * H
    u0 = pid_c * UNITS
    tt = T * 0
    while tt < T:
        t = T - 1 - tt
        keep = 1.0 - tl.load(init_ptr + rows64 * T + t, mask=rmask, other=0).to(tl.float32)
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            if RECOMPUTE:
                r, z, n, hn = _gru_gates(  # pyright: ignore[reportGeneralTypeIssues]  # triton.jit is untyped
                    xp_ptr, xp_row, t, H, h_ptr, h_row, keep, rmask, wt_ptr, bhn_ptr, cols, cmask,
                    HAS_BHN, BLOCK_B, BLOCK_H, BLOCK_K, PRECISION,
                )  # fmt: skip
            else:
                base = gates_ptr + gs_row[:, None] + t * 4 * H + cols[None, :]
                r = tl.load(base, mask=m2, other=0.0)
                z = tl.load(base + H, mask=m2, other=0.0)
                n = tl.load(base + 2 * H, mask=m2, other=0.0)
                hn = tl.load(base + 3 * H, mask=m2, other=0.0)
            h_prev = tl.load(h_ptr + h_row[:, None] + t * H + cols[None, :], mask=m2, other=0.0) * keep[:, None]
            sat = s_row[:, None] + cols[None, :]
            dh = tl.load(dy_ptr + y_row[:, None] + t * H + cols[None, :], mask=m2, other=0.0)
            dh = dh + tl.load(dh_ptr + sat, mask=m2, other=0.0)
            dn = dh * (1.0 - z) * (1.0 - n * n)
            dr = dn * hn * r * (1.0 - r)
            dz = dh * (h_prev - n) * z * (1.0 - z)
            xbase = dgx_ptr + xp_row[:, None] + t * 3 * H + cols[None, :]
            tl.store(xbase, dr, mask=m2)
            tl.store(xbase + H, dz, mask=m2)
            tl.store(xbase + 2 * H, dn, mask=m2)
            hbase = dgh_ptr + xp_row[:, None] + t * 3 * H + cols[None, :]
            tl.store(hbase, dr, mask=m2)
            tl.store(hbase + H, dz, mask=m2)
            tl.store(hbase + 2 * H, dn * r, mask=m2)
            tl.store(dh_ptr + sat, dh * z, mask=m2)  # the direct path, completed below
        _step_sync(sync_ptr, pid_b, (tt + 1) * NUM_SPLITS, NUM_SPLITS, MAX_SPIN)
        for jj in range(0, UNITS, BLOCK_H):
            cols = tl.max_contiguous(tl.multiple_of(u0 + jj + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H)
            cmask = cols < H
            m2 = rmask[:, None] & cmask[None, :]
            sat = s_row[:, None] + cols[None, :]
            acc = tl.load(dh_ptr + sat, mask=m2, other=0.0)
            acc = _recurrent_dot(dgh_ptr, xp_row + t * 3 * H, keep, rmask, w_ptr, H, 0, cols, cmask, 3 * H, acc,
                                 BLOCK_K, PRECISION)  # fmt: skip
            tl.store(dh_ptr + sat, acc * keep[:, None], mask=m2)
        tl.debug_barrier()  # the carry is re-read by this program only
        tt += 1


# ------------------------------------------------------------------------------------------------ launchers
def _grid(B: int, cfg: dict) -> tuple[int, int]:
    return (-(-B // cfg["block_b"]), cfg["num_splits"])


def _meta(cfg: dict, precision: str) -> dict:
    return {
        "BLOCK_B": cfg["block_b"],
        "BLOCK_H": cfg["block_h"],
        "BLOCK_K": cfg["block_k"],
        "NUM_SPLITS": cfg["num_splits"],
        "PRECISION": precision,
        "MAX_SPIN": cfg["max_spin"],
        "num_warps": cfg["num_warps"],
    }


def lstm_forward(xp, init, wt, h, c, sync, B, T, H, units, cfg, precision, store_gates):  # noqa: ANN001, ANN201
    """Runs the LSTM forward kernel (see the module docstring for the buffers)."""
    _lstm_fwd_kernel[_grid(B, cfg)](
        xp, init, wt, h, c, sync, B, T, H=H, UNITS=units, STORE_GATES=store_gates, **_meta(cfg, precision)
    )


def lstm_backward(gx, init, w, wt, h, c, dy, dcy, dg, dh, dc, sync, B, T, H, units, cfg, precision, recompute):  # noqa: ANN001, ANN201
    """Runs the LSTM backward kernel: fills ``dg`` and leaves the initial-state gradients in ``dh``, ``dc``."""
    _lstm_bwd_kernel[_grid(B, cfg)](
        gx,
        init,
        w,
        wt,
        h,
        c,
        dy,
        dcy,
        dg,
        dh,
        dc,
        sync,
        B,
        T,
        H=H,
        UNITS=units,
        RECOMPUTE=recompute,
        **_meta(cfg, precision),
    )


def gru_forward(xp, init, wt, bhn, h, gates, sync, B, T, H, units, cfg, precision, store_gates, has_bhn):  # noqa: ANN001, ANN201
    """Runs the GRU forward kernel."""
    _gru_fwd_kernel[_grid(B, cfg)](
        xp, init, wt, bhn, h, gates, sync, B, T, H=H, UNITS=units,
        HAS_BHN=has_bhn, STORE_GATES=store_gates, **_meta(cfg, precision),
    )  # fmt: skip


def gru_backward(xp, gates, init, w, wt, bhn, h, dy, dgx, dgh, dh, sync, B, T, H, units, cfg, precision, recompute,
                 has_bhn):  # fmt: skip  # noqa: ANN001, ANN201
    """Runs the GRU backward kernel: fills ``dgx``, ``dgh`` and leaves the initial-state gradient in ``dh``."""
    _gru_bwd_kernel[_grid(B, cfg)](
        xp, gates, init, w, wt, bhn, h, dy, dgx, dgh, dh, sync, B, T, H=H, UNITS=units,
        HAS_BHN=has_bhn, RECOMPUTE=recompute, **_meta(cfg, precision),
    )  # fmt: skip
