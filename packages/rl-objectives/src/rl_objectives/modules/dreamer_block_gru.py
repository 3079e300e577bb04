"""DreamerV3's block-diagonal GRU as a stand-alone recurrent layer (TorchRL's ``DreamerV3BlockGRUCell``
and ``DreamerV3BlockGRU``).

The cell projects the input and the hidden state (linear, RMS norm, activation), gives every one of
``num_blocks`` blocks its slice of ``h`` next to both projections, runs ``num_layers`` block-linear
layers (block linear, RMS norm, activation) and the block-linear gates, then
``h' = u * tanh(r * c) + (1 - u) * h`` with ``r = sigmoid(.)`` and ``u = sigmoid(. + update_bias)``:
the update of :class:`~rl_objectives.modules.dreamer_layers.BlockGRU`, built from its layers
(``BlockLinear``, ``RMSNorm``, DreamerV3's initialisation), with one input instead of a state and
an action. Parameters stay float32; the step runs in the activations' dtype (e.g. bfloat16), the
RMS norms in float32, as TorchRL's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import torch
import torch.nn.functional as F
from tdict.validation import check_positive_int
from torch import nn

from .dreamer_layers import BlockLinear, RMSNorm, dreamer_v3_init

__all__ = ["DreamerV3BlockGRU", "DreamerV3BlockGRUCell"]


def _linear(module: nn.Linear, value: torch.Tensor) -> torch.Tensor:
    """``module(value)`` in the value's dtype (float32 parameters, bfloat16 activations)."""
    return F.linear(value, module.weight.to(value.dtype), module.bias.to(value.dtype))


def _block_linear(module: BlockLinear, value: torch.Tensor) -> torch.Tensor:
    """``module(value)`` (BlockLinear's einsum) in the value's dtype."""
    blocks = value.reshape(*value.shape[:-1], module.num_blocks, module.in_features // module.num_blocks)
    out = torch.einsum("...bi,bio->...bo", blocks, module.weight.to(value.dtype)).flatten(-2)
    return out + module.bias.to(value.dtype)


def _block_gru_update(
    features: torch.Tensor,
    hidden: torch.Tensor,
    dynamics: Callable[[torch.Tensor], torch.Tensor],
    gates: BlockLinear,
    num_blocks: int,
    update_bias: float,
) -> torch.Tensor:
    """BlockGRU's gated update: every block sees its slice of ``hidden`` and all of ``features``."""
    size = hidden.shape[-1] // num_blocks
    per_block = torch.cat(
        [
            hidden.reshape(*hidden.shape[:-1], num_blocks, size),
            features.unsqueeze(-2).expand(*features.shape[:-1], num_blocks, features.shape[-1]),
        ],
        -1,
    )
    gate_values = _block_linear(gates, dynamics(per_block.flatten(-2)))
    reset, candidate, update = gate_values.reshape(*gate_values.shape[:-1], num_blocks, 3, size).unbind(-2)
    reset = torch.sigmoid(reset.flatten(-2))
    candidate = torch.tanh(reset * candidate.flatten(-2))
    update = torch.sigmoid(update.flatten(-2) + update_bias)
    return update * candidate + (1.0 - update) * hidden


class DreamerV3BlockGRUCell(nn.Module):
    """One step of DreamerV3's block-diagonal GRU: ``(input [..., I], hidden [..., H]) -> hidden' [..., H]``.

    Args:
        input_size: the input's feature count ``I``.
        hidden_size: the hidden state's width ``H`` (divisible by ``num_blocks``).
        projection_size: the width of the input and hidden projections. Default 512.
        num_blocks: the number of independent blocks. Default 8.
        num_layers: block-linear dynamics layers before the gates (at least 1). Default 1.
        activation_class: a parameter-free elementwise activation (a class, instantiated, or a
            callable). Default ``nn.SiLU``.
        norm_eps: the RMS norms' epsilon. Default ``1e-4``.
        update_bias: added to the update-gate logit. Default ``-1.0``.
        device: where the parameters are created.

    ``hidden=None`` starts from zeros.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import DreamerV3BlockGRUCell
        >>> cell = DreamerV3BlockGRUCell(6, 8, projection_size=4, num_blocks=2)
        >>> cell(torch.randn(3, 6), torch.zeros(3, 8)).shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: type[nn.Module] | Callable = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        device: torch.device | str | int | None = None,
    ) -> None:
        for name, value in (
            ("input_size", input_size),
            ("hidden_size", hidden_size),
            ("projection_size", projection_size),
            ("num_blocks", num_blocks),
            ("num_layers", num_layers),
        ):
            check_positive_int("DreamerV3BlockGRUCell", name, value)
        if hidden_size % num_blocks:
            raise ValueError(
                f"DreamerV3BlockGRUCell: hidden_size ({hidden_size}) must be divisible by num_blocks ({num_blocks})."
            )
        activation = activation_class() if isinstance(activation_class, type) else activation_class
        if not callable(activation):
            raise TypeError(
                f"DreamerV3BlockGRUCell: activation_class must build a callable activation, got {activation_class!r}."
            )
        if isinstance(activation, nn.Module) and next(activation.parameters(), None) is not None:
            raise ValueError(
                f"DreamerV3BlockGRUCell: activation_class must have no learnable parameters, got {activation!r}."
            )
        super().__init__()
        device = None if device is None else torch.device(device)  # an int is a CUDA index, as torch's
        self.input_size, self.hidden_size, self.projection_size = input_size, hidden_size, projection_size
        self.num_blocks, self.num_layers = num_blocks, num_layers
        self.norm_eps, self.update_bias = float(norm_eps), float(update_bias)
        self.activation = cast("Callable[[torch.Tensor], torch.Tensor]", activation)
        self.input_linear = nn.Linear(input_size, projection_size, device=device)
        self.input_norm = RMSNorm(projection_size, norm_eps, device)
        self.hidden_linear = nn.Linear(hidden_size, projection_size, device=device)
        self.hidden_norm = RMSNorm(projection_size, norm_eps, device)
        self.dynamic_linears = nn.ModuleList()
        self.dynamic_norms = nn.ModuleList()
        width = hidden_size + 2 * projection_size * num_blocks  # per block: its hidden slice + both projections
        for _ in range(num_layers):
            self.dynamic_linears.append(BlockLinear(width, hidden_size, num_blocks, device=device))
            self.dynamic_norms.append(RMSNorm(hidden_size, norm_eps, device))
            width = hidden_size
        self.gates = BlockLinear(hidden_size, 3 * hidden_size, num_blocks, device=device)
        self.apply(dreamer_v3_init)

    def _dynamics(self, value: torch.Tensor) -> torch.Tensor:
        for linear, norm in zip(self.dynamic_linears, self.dynamic_norms):
            value = self.activation(norm(_block_linear(cast(BlockLinear, linear), value)))
        return value

    def _project_input(self, value: torch.Tensor) -> torch.Tensor:
        return self.activation(self.input_norm(_linear(self.input_linear, value)))

    def _step_projected(self, projected_input: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        hidden_features = self.activation(self.hidden_norm(_linear(self.hidden_linear, hidden)))
        features = torch.cat([projected_input, hidden_features], -1)
        return _block_gru_update(features, hidden, self._dynamics, self.gates, self.num_blocks, self.update_bias)

    def forward(self, input: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        if input.ndim < 1 or input.shape[-1] != self.input_size:
            raise ValueError(
                f"DreamerV3BlockGRUCell: input must end in input_size={self.input_size} features, got shape "
                f"{tuple(input.shape)}."
            )
        if hidden is None:
            hidden = input.new_zeros(*input.shape[:-1], self.hidden_size)
        elif hidden.shape != (*input.shape[:-1], self.hidden_size):
            raise ValueError(
                f"DreamerV3BlockGRUCell: hidden must have shape {(*input.shape[:-1], self.hidden_size)} (the input's "
                f"batch shape, hidden_size), got {tuple(hidden.shape)}."
            )
        return self._step_projected(self._project_input(input), hidden)

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, projection_size={self.projection_size}, "
            f"num_blocks={self.num_blocks}, num_layers={self.num_layers}"
        )


class DreamerV3BlockGRU(nn.Module):
    """DreamerV3's block GRU over a batch-major sequence: ``input [B, T, I] -> (outputs [B, T, H], hidden [B, H])``.

    Runs :class:`DreamerV3BlockGRUCell` (``self.cell``, same arguments) step by step; where
    ``is_init[b, t]`` is set, the carried hidden state is zeroed before step ``t``.

    Args:
        input_size, hidden_size, projection_size, num_blocks, num_layers, activation_class,
            norm_eps, update_bias, device: as :class:`DreamerV3BlockGRUCell`.
        recurrent_backend: ``"reference"`` (default) or ``"scan"``: both run the autograd
            recurrence here (same values; TorchRL's ``"scan"`` only changes its backward's memory).
            ``"triton"`` (TorchRL's fused CUDA kernels) is not available and raises.

    Forward: ``input [B, T, I]``, ``hidden [B, H]`` (default zeros), ``is_init`` bool ``[B, T]`` or
    ``[B, T, 1]`` (default none).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import DreamerV3BlockGRU
        >>> gru = DreamerV3BlockGRU(6, 8, projection_size=4, num_blocks=2)
        >>> output, hidden = gru(torch.randn(3, 5, 6))
        >>> output.shape, hidden.shape
        (torch.Size([3, 5, 8]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: type[nn.Module] | Callable = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        recurrent_backend: Literal["reference", "scan", "triton"] = "reference",
        device: torch.device | str | int | None = None,
    ) -> None:
        if recurrent_backend == "triton":
            raise NotImplementedError(
                "DreamerV3BlockGRU: recurrent_backend='triton' (TorchRL's fused CUDA kernels) is not implemented "
                "here; use 'reference' or 'scan'."
            )
        if recurrent_backend not in ("reference", "scan"):
            raise ValueError(
                f"DreamerV3BlockGRU: recurrent_backend must be 'reference', 'scan' or 'triton', got {recurrent_backend!r}."
            )
        super().__init__()
        self.cell = DreamerV3BlockGRUCell(
            input_size,
            hidden_size,
            projection_size=projection_size,
            num_blocks=num_blocks,
            num_layers=num_layers,
            activation_class=activation_class,
            norm_eps=norm_eps,
            update_bias=update_bias,
            device=device,
        )
        self.recurrent_backend = recurrent_backend

    def forward(
        self,
        input: torch.Tensor,
        hidden: torch.Tensor | None = None,
        is_init: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cell = self.cell
        if input.ndim != 3 or input.shape[-1] != cell.input_size:
            raise ValueError(
                f"DreamerV3BlockGRU: input must have shape [batch, time, input_size={cell.input_size}], got "
                f"{tuple(input.shape)}."
            )
        batch, time, _ = input.shape
        if time == 0:
            raise ValueError("DreamerV3BlockGRU: input must hold at least one time step, got time=0.")
        if hidden is None:
            hidden = input.new_zeros(batch, cell.hidden_size)
        elif hidden.shape != (batch, cell.hidden_size):
            raise ValueError(
                f"DreamerV3BlockGRU: hidden must have shape {(batch, cell.hidden_size)}, got {tuple(hidden.shape)}."
            )
        if is_init is not None:
            if is_init.ndim == 3 and is_init.shape[-1] == 1:
                is_init = is_init.squeeze(-1)
            if is_init.shape != (batch, time) or is_init.dtype is not torch.bool:
                raise ValueError(
                    f"DreamerV3BlockGRU: is_init must be a bool tensor of shape {(batch, time)} or {(batch, time, 1)}, "
                    f"got {tuple(is_init.shape)} of {is_init.dtype}."
                )
        projected = cell._project_input(input)
        outputs = []
        for t in range(time):
            if is_init is not None:
                hidden = torch.where(is_init[:, t, None], torch.zeros_like(hidden), hidden)
            hidden = cell._step_projected(projected[:, t], hidden)
            outputs.append(hidden)
        return torch.stack(outputs, 1), hidden
