"""DreamerV3BlockGRUCell / DreamerV3BlockGRU (modules/dreamer_block_gru.py): the cell against its update
written out here and against BlockGRU with copied weights; the sequence module against a loop of the cell."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from rl_objectives.modules import DreamerV3BlockGRU, DreamerV3BlockGRUCell
from rl_objectives.modules.dreamer_layers import BlockGRU, BlockLinear, RMSNorm
from torch import nn

I, H, P, NB = 5, 8, 3, 2


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * w


def _block(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    nb, bi, _ = weight.shape
    return torch.cat([x[..., b * bi : (b + 1) * bi] @ weight[b] for b in range(nb)], -1) + bias


def _reference_step(cell: DreamerV3BlockGRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The cell's step by hand: projections, per-block inputs, dynamics, gates."""
    eps, act = cell.norm_eps, torch.nn.functional.silu
    px = act(_rms(x @ cell.input_linear.weight.T + cell.input_linear.bias, cell.input_norm.weight, eps))
    ph = act(_rms(h @ cell.hidden_linear.weight.T + cell.hidden_linear.bias, cell.hidden_norm.weight, eps))
    size = H // NB
    v = torch.cat([torch.cat([h[..., b * size : (b + 1) * size], px, ph], -1) for b in range(NB)], -1)
    for lin_module, norm_module in zip(cell.dynamic_linears, cell.dynamic_norms):
        lin, norm = cast(BlockLinear, lin_module), cast(RMSNorm, norm_module)
        v = act(_rms(_block(v, lin.weight, lin.bias), norm.weight, eps))
    g = _block(v, cell.gates.weight, cell.gates.bias)
    r = torch.cat([g[..., (3 * b) * size : (3 * b + 1) * size] for b in range(NB)], -1)
    c = torch.cat([g[..., (3 * b + 1) * size : (3 * b + 2) * size] for b in range(NB)], -1)
    u = torch.cat([g[..., (3 * b + 2) * size : (3 * b + 3) * size] for b in range(NB)], -1)
    r, u = torch.sigmoid(r), torch.sigmoid(u + cell.update_bias)
    return u * torch.tanh(r * c) + (1 - u) * h


@pytest.mark.parametrize("num_layers", [1, 2])
def test_cell_matches_written_update(num_layers):
    torch.manual_seed(0)
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB, num_layers=num_layers)
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-trivial norm scales and biases
    x, h = torch.randn(4, 2, I), torch.randn(4, 2, H)
    out = cell(x, h)
    assert out.shape == (4, 2, H)
    torch.testing.assert_close(out, _reference_step(cell, x, h), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cell(x), cell(x, torch.zeros(4, 2, H)))


def test_cell_matches_block_gru_with_copied_weights():
    """BlockGRU with its action projection zeroed is the cell (state -> input, belief -> hidden)."""
    torch.manual_seed(1)
    gru = BlockGRU(state_dim=I, action_dim=2, belief_dim=H, hidden_dim=P, num_blocks=NB, num_layers=2)
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB, num_layers=2)
    size = H // NB
    with torch.no_grad():
        for p in gru.parameters():
            p.add_(0.1 * torch.randn_like(p))
        src = gru.state_dict()
        src["action_in.0.weight"].zero_()
        src["action_in.0.bias"].zero_()  # action features: silu(rms(0)) = 0
        w = src["hidden.0.weight"]
        # BlockGRU's per-block rows: [h slice, belief proj, state proj, action proj]; the cell's: [h slice, input proj, hidden proj]
        first = torch.cat([w[:, :size], w[:, size + P : size + 2 * P], w[:, size : size + P]], 1)
        mapping = {
            "input_linear": "state_in.0",
            "input_norm": "state_in.1",
            "hidden_linear": "belief_in.0",
            "hidden_norm": "belief_in.1",
            "dynamic_linears.0": "hidden.0",
            "dynamic_norms.0": "hidden.1",
            "dynamic_linears.1": "hidden.3",
            "dynamic_norms.1": "hidden.4",
            "gates": "gates",
        }
        state = {}
        for name in cell.state_dict():
            prefix, leaf = name.rsplit(".", 1)
            state[name] = src[f"{mapping[prefix]}.{leaf}"]
        state["dynamic_linears.0.weight"] = first
        cell.load_state_dict(state)
    x, h = torch.randn(6, I), torch.randn(6, H)
    torch.testing.assert_close(cell(x, h), gru(x, h, torch.randn(6, 2)), rtol=1e-5, atol=1e-5)


def test_sequence_equals_loop_of_cell_with_resets():
    torch.manual_seed(2)
    gru = DreamerV3BlockGRU(I, H, projection_size=P, num_blocks=NB)
    x, h0 = torch.randn(3, 5, I), torch.randn(3, H)
    is_init = torch.zeros(3, 5, dtype=torch.bool)
    is_init[0, 2] = is_init[2, 0] = True
    out, last = gru(x, h0, is_init.unsqueeze(-1))
    h, expected = h0, []
    for t in range(5):
        h = torch.where(is_init[:, t, None], 0.0, h)
        h = gru.cell(x[:, t], h)
        expected.append(h)
    assert out.shape == (3, 5, H) and last.shape == (3, H)
    torch.testing.assert_close(out, torch.stack(expected, 1))
    torch.testing.assert_close(last, h)
    out0, _ = gru(x)
    torch.testing.assert_close(out0[:, 0], gru.cell(x[:, 0]))
    scan_gru = DreamerV3BlockGRU(I, H, projection_size=P, num_blocks=NB, recurrent_backend="scan")
    scan_gru.load_state_dict(gru.state_dict())
    torch.testing.assert_close(scan_gru(x, h0, is_init)[0], out)


def test_bfloat16_activations_with_float32_parameters():
    torch.manual_seed(5)
    gru = DreamerV3BlockGRU(I, H, projection_size=P, num_blocks=NB)
    x = torch.randn(2, 3, I)
    out, last = gru(x.bfloat16(), torch.zeros(2, H, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and last.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in gru.parameters())
    torch.testing.assert_close(out.float(), gru(x)[0], rtol=0.05, atol=0.05)


def test_parameter_names_match_torchrl():
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB, num_layers=2)
    names = set(cell.state_dict())
    for name in [
        "input_linear.weight",
        "input_norm.weight",
        "hidden_linear.bias",
        "hidden_norm.weight",
        "dynamic_linears.1.weight",
        "dynamic_norms.0.weight",
        "gates.weight",
        "gates.bias",
    ]:
        assert name in names
    assert cell.gates.weight.shape == (NB, H // NB, 3 * H // NB)
    assert cell.dynamic_linears[0].weight.shape == (NB, (H + 2 * P * NB) // NB, H // NB)


def test_activation_class_and_update_bias():
    torch.manual_seed(3)
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB, activation_class=nn.Tanh, update_bias=0.5)
    assert isinstance(cell.activation, nn.Tanh) and cell.update_bias == 0.5
    silu = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB, update_bias=0.5)
    silu.load_state_dict(cell.state_dict())
    x, h = torch.randn(2, I), torch.randn(2, H)
    assert not torch.allclose(cell(x, h), silu(x, h))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="hidden_size \\(7\\) must be divisible by num_blocks \\(2\\)"):
        DreamerV3BlockGRUCell(I, 7, num_blocks=2)
    with pytest.raises(ValueError, match="num_layers must be a positive int, got 0"):
        DreamerV3BlockGRUCell(I, H, num_blocks=NB, num_layers=0)
    with pytest.raises(ValueError, match="activation_class must have no learnable parameters"):
        DreamerV3BlockGRUCell(I, H, num_blocks=NB, activation_class=nn.PReLU)
    with pytest.raises(ValueError, match="recurrent_backend must be"):
        DreamerV3BlockGRU(I, H, num_blocks=NB, recurrent_backend="fast")  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="triton"):
        DreamerV3BlockGRU(I, H, num_blocks=NB, recurrent_backend="triton")
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB)
    with pytest.raises(ValueError, match="input_size=5"):
        cell(torch.randn(2, 4))
    with pytest.raises(ValueError, match="hidden must have shape \\(2, 8\\)"):
        cell(torch.randn(2, I), torch.randn(3, H))
    gru = DreamerV3BlockGRU(I, H, projection_size=P, num_blocks=NB)
    with pytest.raises(ValueError, match="batch, time, input_size=5"):
        gru(torch.randn(2, I))
    with pytest.raises(ValueError, match="at least one time step"):
        gru(torch.randn(2, 0, I))
    with pytest.raises(ValueError, match="is_init must be a bool tensor"):
        gru(torch.randn(2, 3, I), is_init=torch.zeros(2, 3))


def test_compile_fullgraph_equals_eager():
    torch.manual_seed(4)
    cell = DreamerV3BlockGRUCell(I, H, projection_size=P, num_blocks=NB)
    gru = DreamerV3BlockGRU(I, H, projection_size=P, num_blocks=NB)
    x, h = torch.randn(2, I), torch.randn(2, H)
    xs, init = torch.randn(2, 3, I), torch.tensor([[False, True, False], [False, False, False]])
    torch.testing.assert_close(torch.compile(cell, fullgraph=True, backend="eager")(x, h), cell(x, h))
    compiled = torch.compile(gru, fullgraph=True, backend="eager")(xs, None, init)
    eager = gru(xs, None, init)
    torch.testing.assert_close(compiled[0], eager[0])
    torch.testing.assert_close(compiled[1], eager[1])
