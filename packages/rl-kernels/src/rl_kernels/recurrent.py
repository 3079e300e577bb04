"""LSTM and GRU layers over ``[B, T]`` whose state is zeroed at every step flagged by ``is_init``.

:func:`lstm_with_resets` and :func:`gru_with_resets` run one layer with PyTorch's equations, gate
order and weight layout (``nn.LSTM`` / ``nn.GRU``'s ``weight_ih_l0`` etc. plug in as they are). The
state entering step ``t`` is zeroed where ``is_init[:, t]`` (``t = 0`` included), so a row can hold
several episodes back to back and the result equals running each episode alone from a zero state.

Two paths (``backend=``, see :mod:`rl_kernels._backend`):

- ``"torch"``: the reference, a plain loop over time in torch ops (any floating dtype, autograd
  through the ops);
- ``"triton"``: the input projection ``x @ W_ih^T + b`` for all steps as one matmul, then one kernel
  with the time loop inside (the recurrent matmul tiled over gate columns, the state carried through
  global memory), and a fused backward kernel with the reverse time loop; the weight, bias and input
  gradients are then large matmuls over all steps. float32 only. With ``recompute=True`` the forward
  keeps no gate activations (``4H`` floats per step for the LSTM) and the backward recomputes them.

Examples:
    >>> import torch
    >>> from rl_kernels.recurrent import lstm_with_resets
    >>> lstm = torch.nn.LSTM(3, 4, batch_first=True)
    >>> x = torch.randn(2, 5, 3)
    >>> is_init = torch.zeros(2, 5, dtype=torch.bool)
    >>> y, c = lstm_with_resets(x, is_init, *lstm.parameters(), backend="torch")
    >>> torch.allclose(y, lstm(x)[0], atol=1e-6)
    True
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F

from ._backend import interpreting, resolve_backend

__all__ = ["DEFAULT_KERNEL_CONFIG", "gru_reference", "gru_with_resets", "lstm_reference", "lstm_with_resets"]

#: Tuning knobs of the Triton path (a ``kernel_config=`` dict overrides any of them):
#: ``block_b`` batch rows per program (>= 16, a power of two); ``block_h`` hidden units per tile and
#: ``block_k`` reduction tile (powers of two >= 16; clipped to the problem); ``num_splits`` programs
#: that share the hidden units of the same rows (> 1 syncs them with a spin barrier on an atomic
#: counter each step, GPU only: 1 under the interpreter, and 1 when the grid would not fit on the
#: device's SMs at once; 0 picks the largest power of two that fits, at most ``H / 32``: this spreads
#: ``W_hh`` over many SMs, which is what makes the kernels fast on a GPU); ``num_warps``;
#: ``max_spin`` bounds each barrier wait (a safety net: a wait takes microseconds). The barrier
#: assumes that every program of the grid is resident at once, which holds on a GPU this process
#: has to itself; where SMs are shared or capped (MPS with an SM limit, concurrent streams running
#: other kernels), pass ``kernel_config={"num_splits": 1}``. A wait cut short by ``max_spin`` is
#: flagged by the kernel, and the call raises ``RuntimeError`` rather than return those results
#: (checking the flag costs one device synchronisation per kernel when ``num_splits > 1``).
DEFAULT_KERNEL_CONFIG: dict[str, int] = {
    "block_b": 16,
    "block_h": 64,
    "block_k": 32,
    "num_splits": 0,
    "num_warps": 4,
    "max_spin": 1 << 20,
}

_PRECISIONS = ("ieee", "tf32")


# ---------------------------------------------------------------------------- checks
def _check(
    op: str,
    gates: int,
    x: Any,
    is_init: Any,
    weight_ih: Any,
    weight_hh: Any,
    bias_ih: Any,
    bias_hh: Any,
    states: dict[str, Any],
    recompute: Any,
    matmul_precision: Any,
) -> None:
    """Every argument check, before any work; errors name the argument, what was expected and what came."""
    if not isinstance(x, torch.Tensor) or x.ndim != 3 or not x.is_floating_point():
        got = f"{x.dtype} tensor of shape {list(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{op}: x must be a floating tensor [B, T, input_size], got {got}.")
    B, T, n_in = x.shape
    if not isinstance(is_init, torch.Tensor) or is_init.dtype != torch.bool or is_init.shape != (B, T):
        got = (
            f"{is_init.dtype} tensor of shape {list(is_init.shape)}"
            if isinstance(is_init, torch.Tensor)
            else type(is_init).__name__
        )
        raise ValueError(f"{op}: is_init must be a bool tensor of shape [B, T] = {[B, T]}, got {got}.")
    if (
        not isinstance(weight_hh, torch.Tensor)
        or weight_hh.ndim != 2
        or weight_hh.shape[0] != gates * weight_hh.shape[1]
    ):
        got = list(weight_hh.shape) if isinstance(weight_hh, torch.Tensor) else type(weight_hh).__name__
        raise ValueError(f"{op}: weight_hh must have shape [{gates}*H, H], got {got}.")
    H = weight_hh.shape[1]
    expected: dict[str, tuple[Any, tuple[int, ...]]] = {
        "weight_ih": (weight_ih, (gates * H, n_in)),
        "bias_ih": (bias_ih, (gates * H,)),
        "bias_hh": (bias_hh, (gates * H,)),
        **{name: (value, (B, H)) for name, value in states.items()},
    }
    for name, (value, shape) in expected.items():
        if value is None and name != "weight_ih":
            continue
        if not isinstance(value, torch.Tensor) or value.shape != shape:
            got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{op}: {name} must have shape {list(shape)} (x is {[B, T, n_in]}, H = {H}), got {got}.")
    for name, value in (("weight_hh", weight_hh), *((n, v) for n, (v, _) in expected.items())):
        if value is not None and (value.dtype != x.dtype or value.device != x.device):
            raise ValueError(
                f"{op}: {name} must have x's dtype and device ({x.dtype}, {x.device}), got {value.dtype}, {value.device}."
            )
    if is_init.device != x.device:
        raise ValueError(f"{op}: is_init must be on x's device {x.device}, got {is_init.device}.")
    if not isinstance(recompute, bool):
        raise ValueError(f"{op}: recompute must be a bool, got {recompute!r}.")
    if matmul_precision not in _PRECISIONS:
        raise ValueError(f"{op}: matmul_precision must be one of {_PRECISIONS}, got {matmul_precision!r}.")


def _kernel_setup(op: str, x: torch.Tensor, H: int, kernel_config: dict | None) -> dict:
    """The resolved kernel configuration for ``x`` ``[B, T, I]`` and hidden size ``H`` (after the dtype check)."""
    if x.dtype != torch.float32:
        raise ValueError(f"{op}: backend='triton' computes in float32, got x of dtype {x.dtype} (use backend='torch').")
    unknown = set(kernel_config or {}) - set(DEFAULT_KERNEL_CONFIG)
    if unknown:
        raise ValueError(f"{op}: unknown kernel_config keys {sorted(unknown)}; known: {sorted(DEFAULT_KERNEL_CONFIG)}.")
    cfg = {**DEFAULT_KERNEL_CONFIG, **(kernel_config or {})}
    for key in ("block_b", "block_h", "block_k"):
        value = cfg[key]
        if not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"{op}: kernel_config[{key!r}] must be a power of two >= 16, got {value!r}.")
    hp = max(16, triton_next_pow2(H))
    cfg["block_h"] = min(cfg["block_h"], hp)
    cfg["block_k"] = min(cfg["block_k"], hp)
    splits = cfg["num_splits"]
    if not isinstance(splits, int) or splits < 0:
        raise ValueError(f"{op}: kernel_config['num_splits'] must be an int >= 0 (0: auto), got {splits!r}.")
    if interpreting() or x.device.type != "cuda":
        splits = 1  # the interpreter runs programs one by one: a barrier between them would never open
    else:
        blocks = math.ceil(x.shape[0] / cfg["block_b"])
        sms = _sm_count(x.device)
        if splits == 0:
            cap = max(1, min(sms // blocks, H // 32, 64))
            splits = 1 << (cap.bit_length() - 1)  # the largest power of two <= cap
        splits = max(1, min(splits, math.ceil(H / 16)))
        if blocks * splits > sms:
            splits = 1  # not all programs would be resident at once
    cfg["num_splits"] = splits
    cfg["block_h"] = min(cfg["block_h"], max(16, triton_next_pow2(math.ceil(H / splits))))
    cfg["units"] = math.ceil(H / splits / cfg["block_h"]) * cfg["block_h"]
    return cfg


def triton_next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (``n >= 1``).

    Examples:
        >>> triton_next_pow2(5), triton_next_pow2(16)
        (8, 16)
    """
    return 1 << (max(1, n) - 1).bit_length()


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _sync(B: int, cfg: dict, device: torch.device) -> torch.Tensor:
    """One barrier counter per block of rows, then the flag a timed-out barrier wait sets."""
    return torch.zeros(math.ceil(B / cfg["block_b"]) + 1, dtype=torch.int32, device=device)


def _check_barrier(op: str, sync: torch.Tensor, cfg: dict) -> None:
    """Raise when a kernel's split barrier gave up waiting (its states may have been read unwritten)."""
    if cfg["num_splits"] > 1 and bool(sync[-1]):
        raise RuntimeError(
            f"{op}: the programs sharing a block of rows did not all run at once (a barrier wait timed out), "
            "so the results are not reliable; the GPU is probably shared (MPS, other streams). Pass "
            "kernel_config={'num_splits': 1}."
        )


# ---------------------------------------------------------------------------- references
def lstm_reference(
    x: torch.Tensor,
    is_init: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor | None = None,
    bias_hh: torch.Tensor | None = None,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pure-torch LSTM with resets (a loop over time); ``backend="torch"`` of :func:`lstm_with_resets`.

    Examples:
        >>> import torch
        >>> w_ih, w_hh = torch.randn(8, 3), torch.randn(8, 2)
        >>> y, c = lstm_reference(torch.randn(4, 6, 3), torch.rand(4, 6) < 0.3, w_ih, w_hh)
        >>> y.shape, c.shape
        (torch.Size([4, 6, 2]), torch.Size([4, 6, 2]))
    """
    B, T, _ = x.shape
    H = weight_hh.shape[1]
    h, c = (x.new_zeros(B, H), x.new_zeros(B, H)) if state is None else state
    xp = F.linear(x, weight_ih, bias_ih)
    ys, cs = [], []
    for t in range(T):
        reset = is_init[:, t, None]
        h = torch.where(reset, torch.zeros_like(h), h)
        c = torch.where(reset, torch.zeros_like(c), c)
        i, f, g, o = (xp[:, t] + F.linear(h, weight_hh, bias_hh)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        ys.append(h)
        cs.append(c)
    return torch.stack(ys, 1), torch.stack(cs, 1)


def gru_reference(
    x: torch.Tensor,
    is_init: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor | None = None,
    bias_hh: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> torch.Tensor:
    """The pure-torch GRU with resets (a loop over time); ``backend="torch"`` of :func:`gru_with_resets`.

    Examples:
        >>> import torch
        >>> w_ih, w_hh = torch.randn(6, 3), torch.randn(6, 2)
        >>> gru_reference(torch.randn(4, 6, 3), torch.rand(4, 6) < 0.3, w_ih, w_hh).shape
        torch.Size([4, 6, 2])
    """
    B, T, _ = x.shape
    H = weight_hh.shape[1]
    h = x.new_zeros(B, H) if state is None else state
    xr, xz, xn = F.linear(x, weight_ih, bias_ih).chunk(3, -1)
    ys = []
    for t in range(T):
        h = torch.where(is_init[:, t, None], torch.zeros_like(h), h)
        hr, hz, hn = F.linear(h, weight_hh, bias_hh).chunk(3, -1)
        r = torch.sigmoid(xr[:, t] + hr)
        z = torch.sigmoid(xz[:, t] + hz)
        n = torch.tanh(xn[:, t] + r * hn)
        h = n + z * (h - n)
        ys.append(h)
    return torch.stack(ys, 1)


# ---------------------------------------------------------------------------- Triton autograd
def _bias(*parts: torch.Tensor | None) -> torch.Tensor | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    out = present[0]
    for p in present[1:]:
        out = out + p
    return out


def _gru_x_bias(b_ih: torch.Tensor | None, b_hh: torch.Tensor | None, H: int) -> torch.Tensor | None:
    """The GRU biases that add to the input projection: ``b_ih`` and ``b_hr``, ``b_hz`` (``b_hn`` stays inside)."""
    hh = None if b_hh is None else torch.cat([b_hh[: 2 * H], b_hh.new_zeros(H)])
    return _bias(b_ih, hh)


def _prev_states(h: torch.Tensor, init8: torch.Tensor) -> torch.Tensor:
    """``[B*T, H]``: the state entering each step, zeroed at resets (what ``W_hh`` multiplied)."""
    keep = (1 - init8).to(h.dtype).unsqueeze(-1)
    return (h[:, :-1] * keep).reshape(-1, h.shape[-1])


class _LSTMTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x, init, w_ih, w_hh, b_ih, b_hh, h0, c0, recompute, precision, cfg):  # noqa: ANN001
        from . import _recurrent_triton as kernels

        B, T, _ = x.shape
        H = w_hh.shape[1]
        init8 = init.to(torch.int8).contiguous()
        xp = F.linear(x, w_ih, _bias(b_ih, b_hh)).contiguous()
        h = x.new_empty(B, T + 1, H)
        c = x.new_empty(B, T + 1, H)
        h[:, 0] = 0.0 if h0 is None else h0
        c[:, 0] = 0.0 if c0 is None else c0
        wt = w_hh.t().contiguous()
        sync = _sync(B, cfg, x.device)
        kernels.lstm_forward(xp, init8, wt, h, c, sync, B, T, H, cfg["units"], cfg, precision, not recompute)
        _check_barrier("lstm_with_resets", sync, cfg)
        ctx.save_for_backward(x, w_ih, w_hh, b_ih, b_hh, h, c, init8, None if recompute else xp)
        ctx.recompute, ctx.precision, ctx.cfg = recompute, precision, cfg
        return h[:, 1:], c[:, 1:]

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor, dcy: torch.Tensor):  # noqa: ANN205
        from . import _recurrent_triton as kernels

        x, w_ih, w_hh, b_ih, b_hh, h, c, init8, gates = ctx.saved_tensors
        cfg = ctx.cfg
        B, T, n_in = x.shape
        H = w_hh.shape[1]
        w_hh = w_hh.contiguous()
        if ctx.recompute:
            gx, wt = F.linear(x, w_ih, _bias(b_ih, b_hh)).contiguous(), w_hh.t().contiguous()
        else:
            gx, wt = gates, w_hh
        dg = x.new_empty(B, T, 4 * H)
        dh = x.new_zeros(B, H)
        dc = x.new_zeros(B, H)
        sync = _sync(B, cfg, x.device)
        kernels.lstm_backward(
            gx, init8, w_hh, wt, h, c, dy.contiguous(), dcy.contiguous(), dg, dh, dc,
            sync, B, T, H, cfg["units"], cfg, ctx.precision, ctx.recompute,
        )  # fmt: skip
        _check_barrier("lstm_with_resets (backward)", sync, cfg)
        need = ctx.needs_input_grad
        dgf = dg.view(B * T, 4 * H)
        dx = (dgf @ w_ih).view(B, T, n_in) if need[0] else None
        dw_ih = dgf.t() @ x.reshape(B * T, n_in) if need[2] else None
        dw_hh = dgf.t() @ _prev_states(h, init8) if need[3] else None
        db = dgf.sum(0) if (need[4] or need[5]) else None
        return (
            dx, None, dw_ih, dw_hh, db if need[4] else None, db if need[5] else None,
            dh if need[6] else None, dc if need[7] else None, None, None, None,
        )  # fmt: skip


class _GRUTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x, init, w_ih, w_hh, b_ih, b_hh, h0, recompute, precision, cfg):  # noqa: ANN001
        from . import _recurrent_triton as kernels

        B, T, _ = x.shape
        H = w_hh.shape[1]
        init8 = init.to(torch.int8).contiguous()
        xp = F.linear(x, w_ih, _gru_x_bias(b_ih, b_hh, H)).contiguous()
        bhn = xp if b_hh is None else b_hh[2 * H :].contiguous()
        h = x.new_empty(B, T + 1, H)
        h[:, 0] = 0.0 if h0 is None else h0
        gates = xp if recompute else x.new_empty(B, T, 4 * H)
        sync = _sync(B, cfg, x.device)
        kernels.gru_forward(
            xp, init8, w_hh.t().contiguous(), bhn, h, gates, sync, B, T, H, cfg["units"], cfg,
            precision, not recompute, b_hh is not None,
        )  # fmt: skip
        _check_barrier("gru_with_resets", sync, cfg)
        ctx.save_for_backward(x, w_ih, w_hh, b_ih, b_hh, h, init8, None if recompute else gates)
        ctx.recompute, ctx.precision, ctx.cfg = recompute, precision, cfg
        return h[:, 1:]

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor):  # noqa: ANN205
        from . import _recurrent_triton as kernels

        x, w_ih, w_hh, b_ih, b_hh, h, init8, gates = ctx.saved_tensors
        cfg = ctx.cfg
        B, T, n_in = x.shape
        H = w_hh.shape[1]
        w_hh = w_hh.contiguous()
        bhn = w_hh if b_hh is None else b_hh[2 * H :].contiguous()
        if ctx.recompute:
            xp, wt, gates = F.linear(x, w_ih, _gru_x_bias(b_ih, b_hh, H)).contiguous(), w_hh.t().contiguous(), w_hh
        else:
            xp, wt = w_hh, w_hh  # unused by the kernel
        dgx = x.new_empty(B, T, 3 * H)
        dgh = x.new_empty(B, T, 3 * H)
        dh = x.new_zeros(B, H)
        sync = _sync(B, cfg, x.device)
        kernels.gru_backward(
            xp, gates, init8, w_hh, wt, bhn, h, dy.contiguous(), dgx, dgh, dh, sync,
            B, T, H, cfg["units"], cfg, ctx.precision, ctx.recompute, b_hh is not None,
        )  # fmt: skip
        _check_barrier("gru_with_resets (backward)", sync, cfg)
        need = ctx.needs_input_grad
        dgx_f = dgx.view(B * T, 3 * H)
        dgh_f = dgh.view(B * T, 3 * H)
        dx = (dgx_f @ w_ih).view(B, T, n_in) if need[0] else None
        dw_ih = dgx_f.t() @ x.reshape(B * T, n_in) if need[2] else None
        dw_hh = dgh_f.t() @ _prev_states(h, init8) if need[3] else None
        db_ih = dgx_f.sum(0) if need[4] else None
        db_hh = dgh_f.sum(0) if need[5] else None
        return dx, None, dw_ih, dw_hh, db_ih, db_hh, dh if need[6] else None, None, None, None


# ---------------------------------------------------------------------------- public API
def lstm_with_resets(
    x: torch.Tensor,
    is_init: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor | None = None,
    bias_hh: torch.Tensor | None = None,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    backend: str = "auto",
    recompute: bool = False,
    matmul_precision: str = "ieee",
    kernel_config: dict[str, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM layer over ``x`` ``[B, T, I]``, its state zeroed before every step where ``is_init``.

    Equations, gate order ``(i, f, g, o)`` and weight layout are ``nn.LSTM``'s (``weight_ih [4H, I]``,
    ``weight_hh [4H, H]``, biases ``[4H]``). Differentiable in ``x``, the weights, the biases and ``state``.

    Args:
        x: the input, ``[B, T, I]``.
        is_init: bool ``[B, T]``; the state entering step ``t`` is zeroed where ``is_init[:, t]``.
        weight_ih, weight_hh, bias_ih, bias_hh: the layer's parameters (biases optional).
        state: ``(h0, c0)``, each ``[B, H]``; zeros when ``None``.

    Keyword Args:
        backend: ``"auto"``, ``"torch"`` or ``"triton"`` (float32 only).
        recompute: Triton path: keep no gate activations for the backward, recompute them there.
        matmul_precision: Triton path: ``"ieee"`` (exact float32) or ``"tf32"`` for the in-kernel
            recurrent matmuls (the large torch matmuls follow torch's own setting).
        kernel_config: Triton path: overrides of :data:`DEFAULT_KERNEL_CONFIG`.

    Returns:
        ``(y, c)``: the hidden and cell states after every step, each ``[B, T, H]``.

    Raises:
        ValueError: for inputs of the wrong shape, dtype or device, or bad options (before any work).
        RuntimeError: when ``backend="triton"`` cannot run here.

    Examples:
        >>> import torch
        >>> lstm = torch.nn.LSTM(3, 4, batch_first=True)
        >>> x = torch.randn(2, 6, 3)
        >>> is_init = torch.zeros(2, 6, dtype=torch.bool)
        >>> is_init[:, 3] = True  # a new episode starts at step 3
        >>> y, c = lstm_with_resets(x, is_init, *lstm.parameters(), backend="torch")
        >>> torch.allclose(y[:, 3:], lstm(x[:, 3:])[0], atol=1e-6)
        True
    """
    h0, c0 = (None, None) if state is None else _pair("lstm_with_resets", state)
    _check(
        "lstm_with_resets", 4, x, is_init, weight_ih, weight_hh, bias_ih, bias_hh,
        {"state[0] (h0)": h0, "state[1] (c0)": c0}, recompute, matmul_precision,
    )  # fmt: skip
    if resolve_backend("lstm_with_resets", backend, x.device) == "torch":
        return lstm_reference(x, is_init, weight_ih, weight_hh, bias_ih, bias_hh, state)
    cfg = _kernel_setup("lstm_with_resets", x, weight_hh.shape[1], kernel_config)
    return _LSTMTriton.apply(
        x.contiguous(), is_init, weight_ih.contiguous(), weight_hh.contiguous(), bias_ih, bias_hh, h0, c0,
        recompute, matmul_precision, cfg,
    )  # fmt: skip  # pyright: ignore[reportReturnType]  # Function.apply is untyped


def gru_with_resets(
    x: torch.Tensor,
    is_init: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor | None = None,
    bias_hh: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    recompute: bool = False,
    matmul_precision: str = "ieee",
    kernel_config: dict[str, int] | None = None,
) -> torch.Tensor:
    """One GRU layer over ``x`` ``[B, T, I]``, its state zeroed before every step where ``is_init``.

    ``nn.GRU``'s equations, gate order ``(r, z, n)`` and layout (``weight_ih [3H, I]``,
    ``weight_hh [3H, H]``; ``b_hn`` sits inside ``r * (W_hn h + b_hn)``). Arguments as
    :func:`lstm_with_resets`, except ``state``: ``h0`` ``[B, H]`` (zeros when ``None``).

    Returns:
        ``y``: the hidden state after every step, ``[B, T, H]``.

    Raises:
        ValueError: for inputs of the wrong shape, dtype or device, or bad options (before any work).
        RuntimeError: when ``backend="triton"`` cannot run here.

    Examples:
        >>> import torch
        >>> gru = torch.nn.GRU(3, 4, batch_first=True)
        >>> x = torch.randn(2, 6, 3)
        >>> is_init = torch.zeros(2, 6, dtype=torch.bool)
        >>> is_init[1, 2] = True
        >>> y = gru_with_resets(x, is_init, *gru.parameters(), backend="torch")
        >>> torch.allclose(y[1, 2:], gru(x[1:, 2:])[0][0], atol=1e-6)
        True
    """
    if state is not None and not isinstance(state, torch.Tensor):
        raise ValueError(f"gru_with_resets: state must be a tensor h0 [B, H] or None, got {type(state).__name__}.")
    _check(
        "gru_with_resets", 3, x, is_init, weight_ih, weight_hh, bias_ih, bias_hh, {"state (h0)": state},
        recompute, matmul_precision,
    )  # fmt: skip
    if resolve_backend("gru_with_resets", backend, x.device) == "torch":
        return gru_reference(x, is_init, weight_ih, weight_hh, bias_ih, bias_hh, state)
    cfg = _kernel_setup("gru_with_resets", x, weight_hh.shape[1], kernel_config)
    return _GRUTriton.apply(
        x.contiguous(), is_init, weight_ih.contiguous(), weight_hh.contiguous(), bias_ih, bias_hh, state,
        recompute, matmul_precision, cfg,
    )  # fmt: skip  # pyright: ignore[reportReturnType]  # Function.apply is untyped


def _pair(op: str, state: Any) -> tuple[Any, Any]:
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise ValueError(f"{op}: state must be a pair (h0, c0) of [B, H] tensors or None, got {type(state).__name__}.")
    return state[0], state[1]
