"""LSTMModule / GRUModule with ``recurrent_backend="triton"`` (rl-kernels' fused LSTM/GRU with resets):
the same outputs, segment-end states and gradients as the default pad path, in sequence mode."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():  # the kernels run in Triton's interpreter (set before they are imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("rl_kernels")

from tdict import TensorDict  # noqa: E402

from rl_objectives.modules.recurrent import GRUModule, LSTMModule, set_recurrent_mode  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _exact():
    """cuDNN (the pad path) runs in TF32 by default on a GPU: off here, the comparisons are float32-exact."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        yield


def _modules(kind: str, layers: int = 2, hidden: int = 16, **kw):
    cls = LSTMModule if kind == "lstm" else GRUModule
    pad = cls(5, hidden, num_layers=layers, in_key="obs", out_key="out", device=DEVICE)
    fused = cls(**{kind: getattr(pad, kind)}, in_key="obs", out_key="out", recurrent_backend="triton", **kw)
    return pad, fused


def _data(kind: str, batch: tuple[int, ...], T: int, layers: int = 2, hidden: int = 16, resets: bool = True):
    shape = (*batch, T)
    is_init = torch.rand(shape, device=DEVICE) < (0.3 if resets else 0.0)
    is_init[..., 0] = torch.rand(batch, device=DEVICE) < 0.5
    names = ("recurrent_state_h", "recurrent_state_c") if kind == "lstm" else ("recurrent_state",)
    states = {n: torch.randn(*shape, layers, hidden, device=DEVICE) for n in names}
    obs = torch.randn(*shape, 5, device=DEVICE, requires_grad=True)
    return TensorDict({"obs": obs, "is_init": is_init, **states}, batch_size=list(shape)), names


def _outputs_and_grads(module, td, names):
    with set_recurrent_mode(True):
        out = module(td.clone(False))
    values = [out["out"], *(out["next", n] for n in names)]
    gen = torch.Generator().manual_seed(7)
    loss = torch.stack([(v * torch.randn(v.shape, generator=gen).to(v)).sum() for v in values]).sum()
    params = list(module.parameters())
    grads = torch.autograd.grad(loss, [td["obs"], *params])
    return values, grads


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize(
    ("batch", "recompute", "resets"), [((3,), "none", True), ((2, 2), "full", True), ((3,), "none", False)]
)
def test_triton_backend_equals_pad(kind, batch, recompute, resets):
    pytest.importorskip("triton")
    pad, fused = _modules(kind, recurrent_recompute=recompute, recurrent_matmul_precision="ieee")
    td, names = _data(kind, batch, 6, resets=resets)
    want, want_grads = _outputs_and_grads(pad, td, names)
    got, got_grads = _outputs_and_grads(fused, td, names)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    # the states are kept at segment ends only
    is_init = td["is_init"]
    ends = torch.cat([is_init[..., 1:], torch.ones_like(is_init[..., :1])], -1)
    assert (got[1][~ends] == 0).all()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cpu_without_interpreter_takes_the_torch_path(kind, monkeypatch):
    if DEVICE.type == "cuda":
        pytest.skip("CPU dispatch")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    pad, fused = _modules(kind, layers=1, hidden=6)
    td, names = _data(kind, (2,), 5, layers=1, hidden=6)
    want, _ = _outputs_and_grads(pad, td, names)
    got, _ = _outputs_and_grads(fused, td, names)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_step_mode_and_copies_keep_their_paths():
    pad, fused = _modules("gru", layers=1, hidden=8)
    step = TensorDict(obs=torch.randn(4, 5, device=DEVICE), is_init=torch.rand(4, device=DEVICE) < 0.5, batch_size=[4])
    torch.testing.assert_close(fused(step.clone())["out"], pad(step.clone())["out"])
    copy = fused.set_recurrent_mode(True)
    assert copy._kernel_opts == fused._kernel_opts and copy._kernel_opts is not None
    assert pad.set_recurrent_mode(True)._kernel_opts is None


def test_dropout_between_layers_in_training():
    pytest.importorskip("triton")
    lstm = torch.nn.LSTM(5, 16, num_layers=2, dropout=0.5, batch_first=True, device=DEVICE)
    module = LSTMModule(lstm=lstm, in_key="obs", out_key="out", recurrent_backend="triton")
    td, names = _data("lstm", (3,), 4)
    module.eval()
    reference = LSTMModule(lstm=lstm, in_key="obs", out_key="out").eval()
    with set_recurrent_mode(True):
        torch.testing.assert_close(module(td.clone(False))["out"], reference(td.clone(False))["out"])
        module.train()
        torch.manual_seed(0)
        a = module(td.clone(False))["out"]
        torch.manual_seed(1)
        b = module(td.clone(False))["out"]
    assert a.shape == (3, 4, 16) and not torch.allclose(a, b)


def test_option_checks():
    for cls in (LSTMModule, GRUModule):
        kw: dict[str, Any]
        for kw in (
            {"recurrent_backend": "scan"},
            {"recurrent_backend": "auto"},
            {"recurrent_recompute": "full"},  # pad path: defaults only
            {"recurrent_matmul_precision": "tf32"},
            {"recurrent_backend": "triton", "recurrent_matmul_precision": "fast"},
            {"recurrent_backend": "triton", "recurrent_recompute": "partial"},
            {"recurrent_backend": "triton", "recurrent_compute_dtype": torch.bfloat16},
        ):
            with pytest.raises(NotImplementedError, match="recurrent_"):
                cls(3, 4, in_key="x", out_key="y", **kw)
        for precision in ("auto", "ieee", "tf32"):
            cls(3, 4, in_key="x", out_key="y", recurrent_backend="triton", recurrent_matmul_precision=precision)
    with pytest.raises(NotImplementedError, match="proj_size"):
        LSTMModule(3, 4, proj_size=2, in_key="x", out_key="y", recurrent_backend="triton")
    with pytest.raises(NotImplementedError, match="proj_size"):
        LSTMModule(lstm=torch.nn.LSTM(3, 4, proj_size=2, batch_first=True), in_key="x", out_key="y",
                   recurrent_backend="triton")  # fmt: skip


def test_triton_backend_without_rl_kernels_raises(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rl_kernels" else real(name, *a))
    with pytest.raises(ImportError, match="rl-kernels"):
        GRUModule(3, 4, in_key="x", out_key="y", recurrent_backend="triton")
    GRUModule(3, 4, in_key="x", out_key="y")  # the default path needs nothing
