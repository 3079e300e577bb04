"""rl_kernels.lstm_with_resets / gru_with_resets: the torch reference against nn.LSTM/nn.GRU stepped by
hand and finite differences; the Triton kernels (Triton's interpreter without a GPU) against the
reference, outputs and every gradient."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rl_kernels.recurrent import gru_reference, gru_with_resets, lstm_reference, lstm_with_resets

GATES = {"lstm": 4, "gru": 3}


def _inputs(
    kind: str, B: int, T: int, I: int, H: int, *, dtype=torch.float32, device="cpu", bias=True, state=True
) -> tuple[Any, ...]:
    """Fresh random inputs (leaves requiring grad) with resets at t=0 and mid-sequence."""
    G = GATES[kind]
    kw = {"dtype": dtype, "device": device}
    x = torch.randn(B, T, I, **kw)
    is_init = torch.rand(B, T, device=device) < 0.3
    is_init[0, 0] = True
    is_init[-1, T // 2] = True
    if B > 1:
        is_init[1, 0] = False
    w_ih = torch.randn(G * H, I, **kw) / I**0.5  # nn.LSTM/GRU's scale: a stable recurrence at any H
    w_hh = torch.randn(G * H, H, **kw) / H**0.5
    b_ih = torch.randn(G * H, **kw) if bias else None
    b_hh = torch.randn(G * H, **kw) if bias else None
    if not state:
        st = None
    elif kind == "lstm":
        st = (torch.randn(B, H, **kw), torch.randn(B, H, **kw))
    else:
        st = torch.randn(B, H, **kw)
    leaves = [x, w_ih, w_hh, b_ih, b_hh, *((st if kind == "lstm" else (st,)) if st is not None else ())]
    for t in leaves:
        if t is not None:
            t.requires_grad_(True)
    return x, is_init, w_ih, w_hh, b_ih, b_hh, st


def _leaves(args) -> list[torch.Tensor]:
    x, _, w_ih, w_hh, b_ih, b_hh, st = args
    states = () if st is None else (st if isinstance(st, tuple) else (st,))
    return [t for t in (x, w_ih, w_hh, b_ih, b_hh, *states) if t is not None]


def _run(kind: str, args, **kw) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs and the gradients of a random projection of them w.r.t. every leaf."""
    fn = lstm_with_resets if kind == "lstm" else gru_with_resets
    out = fn(*args, **kw)
    outs = list(out) if isinstance(out, tuple) else [out]
    gen = torch.Generator().manual_seed(123)
    loss = torch.stack([(o * torch.randn(o.shape, generator=gen).to(o)).sum() for o in outs]).sum()
    grads = torch.autograd.grad(loss, _leaves(args))
    return outs, list(grads)


def _nn_stepwise(kind: str, args) -> list[torch.Tensor]:
    """nn.LSTM / nn.GRU with the same weights, one step at a time, the state zeroed by hand at resets."""
    x, is_init, w_ih, w_hh, b_ih, b_hh, st = args
    B, T, I = x.shape
    H = w_hh.shape[1]
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    rnn = cls(I, H, batch_first=True, bias=b_ih is not None, dtype=x.dtype)
    params = {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh}
    if b_ih is not None:
        params |= {"bias_ih_l0": b_ih, "bias_hh_l0": b_hh}
    if kind == "lstm":
        h, c = (x.new_zeros(B, H), x.new_zeros(B, H)) if st is None else st
    else:
        h, c = (x.new_zeros(B, H) if st is None else st), None
    ys, cs = [], []
    for t in range(T):
        keep = (~is_init[:, t, None]).to(x.dtype)
        h = h * keep
        hx = (h[None], (c * keep)[None]) if kind == "lstm" else h[None]
        y, new = torch.func.functional_call(rnn, params, (x[:, t : t + 1], hx))
        if kind == "lstm":
            h, c = new[0][0], new[1][0]
            cs.append(c)
        else:
            h = new[0]
        ys.append(y[:, 0])
    return [torch.stack(ys, 1), *([torch.stack(cs, 1)] if kind == "lstm" else [])]


@pytest.fixture(autouse=True)
def _exact():
    """cuDNN runs nn.LSTM/GRU in TF32 by default on a GPU: off here, the comparisons are float32-exact."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        yield


# ---------------------------------------------------------------------------- the reference
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_reference_equals_nn_stepped_with_manual_resets(kind):
    args = _inputs(kind, 3, 6, 4, 5)
    outs, grads = _run(kind, args, backend="torch")
    expected = _nn_stepwise(kind, args)
    gen = torch.Generator().manual_seed(123)
    loss = torch.stack([(o * torch.randn(o.shape, generator=gen)).sum() for o in expected]).sum()
    expected_grads = torch.autograd.grad(loss, _leaves(args))
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_reference_gradcheck_float64(kind):
    x, is_init, w_ih, w_hh, b_ih, b_hh, st = _inputs(kind, 2, 4, 3, 3, dtype=torch.float64)
    if kind == "lstm":

        def fn(x, w_ih, w_hh, b_ih, b_hh, h0, c0):
            return lstm_reference(x, is_init, w_ih, w_hh, b_ih, b_hh, (h0, c0))

        assert torch.autograd.gradcheck(fn, (x, w_ih, w_hh, b_ih, b_hh, *st))
    else:

        def fn_gru(x, w_ih, w_hh, b_ih, b_hh, h0):
            return gru_reference(x, is_init, w_ih, w_hh, b_ih, b_hh, h0)

        assert torch.autograd.gradcheck(fn_gru, (x, w_ih, w_hh, b_ih, b_hh, st))


def test_reset_equals_fresh_start():
    """A reset at step t makes the rest of the row equal a zero-state run of those steps alone."""
    x, is_init, w_ih, w_hh, b_ih, b_hh, st = _inputs("gru", 2, 7, 3, 4)
    is_init = torch.zeros(2, 7, dtype=torch.bool)
    is_init[1, 3] = True
    y = gru_with_resets(x, is_init, w_ih, w_hh, b_ih, b_hh, st, backend="torch")
    alone = gru_with_resets(x[1:, 3:], is_init[1:, 3:], w_ih, w_hh, b_ih, b_hh, None, backend="torch")
    torch.testing.assert_close(y[1:, 3:], alone)


# ---------------------------------------------------------------------------- the Triton kernels
@pytest.mark.parametrize(
    ("kind", "recompute", "bias", "state"),
    [
        ("lstm", False, True, True),
        ("lstm", True, True, False),
        ("lstm", False, False, False),
        ("gru", False, True, True),
        ("gru", True, True, True),
        ("gru", False, False, False),
    ],
)
def test_triton_equals_reference(kind, recompute, bias, state, device):
    pytest.importorskip("triton")
    args = _inputs(kind, 3, 5, 4, 8, device=device, bias=bias, state=state)
    outs, grads = _run(kind, args, backend="torch")
    got_outs, got_grads = _run(kind, args, backend="triton", recompute=recompute)
    for got, want in zip(got_outs, outs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(got_grads) == len(grads)
    for got, want in zip(got_grads, grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_triton_equals_nn_stepped_several_tiles(kind, device):
    """Several batch blocks and unit/reduction tiles, sizes that are no multiple of the blocks."""
    pytest.importorskip("triton")
    args = _inputs(kind, 18, 4, 5, 24, device=device)
    cfg = {"block_b": 16, "block_h": 16, "block_k": 16}
    got_outs, got_grads = _run(kind, args, backend="triton", kernel_config=cfg)
    outs, grads = _run(kind, args, backend="torch")
    for got, want in zip(got_outs, _nn_stepwise(kind, args)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(got_grads, grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_triton_tf32_option_runs(device):
    pytest.importorskip("triton")
    args = _inputs("lstm", 2, 3, 4, 8, device=device)
    y, c = lstm_with_resets(*args, backend="triton", matmul_precision="tf32")
    y_ref, c_ref = lstm_with_resets(*args, backend="torch")
    torch.testing.assert_close(y, y_ref, rtol=2e-2, atol=2e-2)  # tf32 on a GPU; exact under the interpreter
    torch.testing.assert_close(c, c_ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("num_splits", [0, 1, 4])
def test_triton_bigger_shapes_gpu(kind, num_splits):
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    args = _inputs(kind, 40, 24, 32, 128, device="cuda")
    outs, grads = _run(kind, args, backend="torch")
    for recompute in (False, True):
        got_outs, got_grads = _run(
            kind, args, backend="triton", recompute=recompute, kernel_config={"num_splits": num_splits}
        )
        for got, want in zip(got_outs, outs):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for got, want in zip(got_grads, grads):
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------- errors and dispatch
def test_auto_on_cpu_is_the_reference():
    args = _inputs("lstm", 2, 3, 4, 5)
    y, c = lstm_with_resets(*args)  # backend="auto": torch on CPU
    y_ref, c_ref = lstm_reference(*args)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(c, c_ref)


def test_bad_inputs_raise_clear_errors():
    x, is_init, w_ih, w_hh, b_ih, b_hh, st = _inputs("lstm", 2, 3, 4, 5)
    cases = [
        ((x[0], is_init, w_ih, w_hh), {}, "x must be a floating tensor"),
        ((x, is_init.float(), w_ih, w_hh), {}, "is_init must be a bool tensor"),
        ((x, is_init[:, :2], w_ih, w_hh), {}, r"is_init must be a bool tensor of shape \[B, T\] = \[2, 3\]"),
        ((x, is_init, w_ih, w_hh[:, :4]), {}, r"weight_hh must have shape \[4\*H, H\]"),
        ((x, is_init, w_ih[:, :3], w_hh), {}, "weight_ih must have shape"),
        ((x, is_init, w_ih, w_hh, b_ih[:4], b_hh), {}, "bias_ih must have shape"),
        ((x, is_init, w_ih, w_hh, None, None, (st[0][:1], st[1])), {}, "h0"),
        ((x, is_init, w_ih, w_hh, None, None, st[0]), {}, "pair"),
        ((x, is_init, w_ih.double(), w_hh), {}, "weight_ih must have x's dtype"),
        ((x, is_init, w_ih, w_hh), {"matmul_precision": "fast"}, "matmul_precision"),
        ((x, is_init, w_ih, w_hh), {"recompute": "yes"}, "recompute must be a bool"),
        ((x, is_init, w_ih, w_hh), {"backend": "cuda"}, "backend must be one of"),
    ]
    for args, kw, match in cases:
        with pytest.raises(ValueError, match=match):
            lstm_with_resets(*args, **kw)
    with pytest.raises(ValueError, match="state must be a tensor"):
        bad_state: Any = (st[0],)  # a tuple where a tensor belongs
        gru_with_resets(x, is_init, torch.randn(15, 4), torch.randn(15, 5), state=bad_state)
    with pytest.raises(ValueError, match=r"weight_hh must have shape \[3\*H, H\]"):
        gru_with_resets(x, is_init, w_ih, w_hh)


def test_triton_refuses_float64_and_bad_config(device):
    pytest.importorskip("triton")
    x, is_init, w_ih, w_hh, *_ = _inputs("gru", 2, 3, 4, 5, device=device, dtype=torch.float64)
    with pytest.raises(ValueError, match="float32"):
        gru_with_resets(x, is_init, w_ih, w_hh, backend="triton")
    x, is_init, w_ih, w_hh, *_ = _inputs("gru", 2, 3, 4, 5, device=device)
    with pytest.raises(ValueError, match="power of two"):
        gru_with_resets(x, is_init, w_ih, w_hh, backend="triton", kernel_config={"block_b": 8})
    with pytest.raises(ValueError, match="unknown kernel_config"):
        gru_with_resets(x, is_init, w_ih, w_hh, backend="triton", kernel_config={"blocks": 16})


def test_a_timed_out_split_barrier_is_flagged_and_raises():
    """Under the interpreter programs run one after another, so a barrier between two programs that share
    a block of rows can never open: the kernel gives up after ``max_spin`` polls and flags it, and the
    host refuses the results. (On a GPU this path only runs when every program fits on the SMs at once.)"""
    if torch.cuda.is_available():
        pytest.skip("needs the interpreter, where programs cannot run at once")
    pytest.importorskip("triton")
    from rl_kernels import _recurrent_triton as kernels
    from rl_kernels.recurrent import _check_barrier, _sync

    B, T, H = 3, 2, 32
    cfg = {"block_b": 16, "block_h": 16, "block_k": 16, "num_splits": 2, "num_warps": 4, "max_spin": 3}
    xp = torch.randn(B, T, 4 * H)
    init8 = torch.zeros(B, T, dtype=torch.int8)
    wt = torch.randn(H, 4 * H) / H**0.5
    h, c = torch.zeros(B, T + 1, H), torch.zeros(B, T + 1, H)
    sync = _sync(B, cfg, xp.device)
    kernels.lstm_forward(xp, init8, wt, h, c, sync, B, T, H, H // 2, cfg, "ieee", True)
    assert sync[-1].item() == 1  # flagged
    with pytest.raises(RuntimeError, match=r"lstm_with_resets: .*barrier wait timed out.*num_splits': 1"):
        _check_barrier("lstm_with_resets", sync, cfg)
    # one program per block of rows: no barrier, nothing flagged, and the check passes
    single = {**cfg, "num_splits": 1}
    sync = _sync(B, single, xp.device)
    kernels.lstm_forward(torch.randn(B, T, 4 * H), init8, wt, h, c, sync, B, T, H, H, single, "ieee", True)
    assert sync[-1].item() == 0
    _check_barrier("lstm_with_resets", sync, single)
