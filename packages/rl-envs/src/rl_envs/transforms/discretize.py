"""ActionDiscretizer: a continuous Bounded action exposed as a grid of discrete choices."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot

from .base import Transform

__all__ = ["ActionDiscretizer"]


class ActionDiscretizer(Transform):
    """Exposes a continuous ``Bounded`` action as discrete choices over a per-dimension grid.

    Each action element ``j`` in ``[low_j, high_j]`` is split into ``num_intervals[j]`` equal
    intervals; discrete choice ``i`` maps to ``low_j + pos(i) * (high_j - low_j)`` where ``pos`` is
    the interval's centre (``MEDIAN``), its start (``LOW``), its end (``HIGH``) or a uniform point
    inside it (``RANDOM``). The caller's action spec becomes ``MultiCategorical(nvec)`` (or
    ``MultiOneHot`` with ``categorical=False``); a scalar action becomes ``Categorical``/``OneHot``.

    Args:
        num_intervals: intervals per element (an int for all, or one per element of the last dim).
        action_key: the continuous action the inner env reads.
        out_action_key: where the caller writes the discrete action (default ``action_key``). When
            it differs, the continuous action moves to the state spec and is written at the root of
            each step for the record.
        sampling: an :class:`ActionDiscretizer.SamplingStrategy` (default ``MEDIAN``).
        categorical: integer indices (True) or one-hot vectors (False).

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), ActionDiscretizer(4))
        >>> type(env.action_spec).__name__, env.action_spec.nvec.tolist()
        ('MultiCategorical', [4])
        >>> env.transform.intervals.tolist()  # centres of 4 intervals over [-2, 2]
        [[-1.5, -0.5, 0.5, 1.5]]
    """

    class SamplingStrategy(IntEnum):
        MEDIAN = 0
        LOW = 1
        HIGH = 2
        RANDOM = 3

    def __init__(
        self,
        num_intervals: int | torch.Tensor,
        action_key: NestedKey = "action",
        out_action_key: NestedKey | None = None,
        sampling: "ActionDiscretizer.SamplingStrategy | None" = None,
        categorical: bool = True,
    ) -> None:
        out_action_key = action_key if out_action_key is None else out_action_key
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[out_action_key])
        self.action_key, self.out_action_key = action_key, out_action_key
        nint = torch.as_tensor(num_intervals, dtype=torch.int64)
        if nint.ndim > 1 or (nint < 1).any():
            raise ValueError(
                f"ActionDiscretizer: num_intervals must be positive ints (scalar or 1-D), got {num_intervals}."
            )
        self.num_intervals = nint
        self.sampling = self.SamplingStrategy.MEDIAN if sampling is None else self.SamplingStrategy(sampling)
        self.categorical = bool(categorical)
        self.intervals: torch.Tensor | None = None  # [n_elements, max_n] grid values (padded)
        self.nvec: torch.Tensor | None = None
        self._scalar = False
        self._jitter: torch.Tensor | None = None
        self._last_action: torch.Tensor | None = None

    def custom_arange(self, nint: int, device: Any = None) -> torch.Tensor:
        """Positions in ``[0, 1]`` of the ``nint`` grid points (override for other grids)."""
        start = torch.arange(nint, dtype=torch.float64, device=device) / nint
        if self.sampling == self.SamplingStrategy.MEDIAN:
            return start + 0.5 / nint
        if self.sampling == self.SamplingStrategy.HIGH:
            return start + 1.0 / nint
        return start  # LOW and RANDOM (jitter added on each call)

    def _build(self, spec: Any) -> None:
        if not isinstance(spec, Bounded) or not spec.dtype.is_floating_point:
            raise TypeError(f"ActionDiscretizer: {self.action_key!r} needs a float Bounded action spec, got {spec!r}.")
        self._dtype = spec.dtype
        scalar = spec.ndim == 0
        low = spec.low.reshape(-1)[:1] if scalar else spec.low.reshape(-1, spec.shape[-1])[0]
        high = spec.high.reshape(-1)[:1] if scalar else spec.high.reshape(-1, spec.shape[-1])[0]
        n_el = low.numel()
        nvec = self.num_intervals.expand(n_el) if self.num_intervals.numel() == 1 else self.num_intervals
        if nvec.numel() != n_el:
            raise ValueError(
                f"ActionDiscretizer: num_intervals has {nvec.numel()} entries, the action {self.action_key!r} has "
                f"{n_el} elements on its last dim."
            )
        width = (high - low).double()
        grid = torch.zeros(n_el, int(nvec.max()), dtype=torch.float64)
        for j, n in enumerate(nvec.tolist()):
            grid[j, :n] = low[j].double() + self.custom_arange(n) * width[j]
        self.intervals = grid.to(spec.dtype)
        self.nvec = nvec.clone()
        self._scalar = scalar
        self._jitter = (width / nvec).to(spec.dtype) if self.sampling == self.SamplingStrategy.RANDOM else None
        self._splits = nvec.tolist()

    def _discrete_spec(self, spec: Any) -> Any:
        n = self.nvec
        assert n is not None  # set by _build, which runs first
        if self._scalar:
            cls = Categorical if self.categorical else OneHot
            shape = spec.shape if self.categorical else (*spec.shape, int(n[0]))
            return cls(int(n[0]), shape=shape, device=spec.device)
        if self.categorical:
            return MultiCategorical(n, shape=spec.shape, device=spec.device)
        return MultiOneHot(n.tolist(), shape=(*spec.shape[:-1], int(n.sum())), device=spec.device)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        action_spec = input_spec["full_action_spec"]
        spec = action_spec[self.action_key]
        self._build(spec)
        action_spec[self.out_action_key] = self._discrete_spec(spec)
        if self.out_action_key != self.action_key:
            del action_spec[self.action_key]
            input_spec["full_state_spec"][self.action_key] = spec
        input_spec["full_action_spec"] = action_spec
        return input_spec

    def _ensure_built(self) -> None:
        if self.intervals is None:
            parent = self.parent
            if parent is None:
                raise RuntimeError("ActionDiscretizer needs a parent env to read the action bounds from.")
            self._build(parent.full_action_spec[self.action_key])

    def to_continuous(self, action: torch.Tensor) -> torch.Tensor:
        """Discrete action (indices or one-hot) -> the continuous action the inner env reads."""
        self._ensure_built()
        grid, nvec = self.intervals, self.nvec
        assert grid is not None and nvec is not None  # set by _ensure_built
        if self.categorical:
            index = action.long()
            if self._scalar:
                index = index.unsqueeze(-1)
        else:
            if self._scalar:
                index = action.long().argmax(-1, keepdim=True)
            else:
                index = torch.stack([a.long().argmax(-1) for a in action.split(self._splits, -1)], -1)
        if (index < 0).any() or (index >= nvec.to(index.device)).any():
            raise ValueError(
                f"ActionDiscretizer: {self.out_action_key!r} holds indices outside 0..nvec-1 (nvec={nvec.tolist()})."
            )
        grid = grid.to(index.device).expand(*index.shape[:-1], *grid.shape)
        value = grid.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        if self._jitter is not None:
            value = value + self._jitter.to(value.device) * torch.rand_like(value)
        return value.squeeze(-1) if self._scalar else value

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(self.out_action_key, None)
        if action is None:
            raise KeyError(f"ActionDiscretizer: discrete action {self.out_action_key!r} not found.")
        value = self.to_continuous(action)
        self._last_action = value
        tensordict.set(self.action_key, value)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.out_action_key != self.action_key and self._last_action is not None:
            tensordict.set(self.action_key, self._last_action)  # recorded at the root, as the state spec says
        return next_tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict  # actions in a buffer stay discrete; use inv() to recover the continuous ones

    def __repr__(self) -> str:
        return (
            f"ActionDiscretizer(num_intervals={self.num_intervals.tolist()}, action_key={self.action_key!r}, "
            f"out_action_key={self.out_action_key!r}, sampling={self.sampling.name}, categorical={self.categorical})"
        )
