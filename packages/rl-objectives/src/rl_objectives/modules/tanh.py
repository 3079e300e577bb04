"""TanhModule: squash entries with tanh into the bounds of a spec (deterministic actors, TD3/DDPG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tdict.nn import TensorDictModuleBase
from tdict.specs import Bounded, Composite

__all__ = ["TanhModule"]


class TanhModule(TensorDictModuleBase):
    """Write ``low + (high - low) * (tanh(x) + 1) / 2`` for each in-key, into the matching out-key.

    The bounds come from ``spec`` (a ``Bounded`` spec, or a ``Composite`` holding one per out-key) or
    from ``low``/``high``; with neither, the output is ``tanh(x)`` in ``[-1, 1]``. ``clamp=True`` also
    clamps the result to the bounds (a guard against rounding at the edges).

    Args:
        in_keys: the entries to squash.
        out_keys: where the results go (defaults to ``in_keys``: in place).
        spec: the output spec(s).
        low, high: bounds when there is no spec (numbers or tensors broadcastable to the entries).
        clamp: clamp the output to ``[low, high]``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import TanhModule
        >>> squash = TanhModule(in_keys=["param"], out_keys=["action"], spec=Bounded(-2.0, 2.0, shape=(1,)))
        >>> squash(TensorDict(param=torch.tensor([[0.0], [100.0]]), batch_size=[2]))["action"]
        tensor([[0.],
                [2.]])
    """

    def __init__(
        self,
        in_keys: Sequence[Any],
        out_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        low: Any = None,
        high: Any = None,
        clamp: bool = False,
    ) -> None:
        super().__init__()
        in_keys = [in_keys] if isinstance(in_keys, (str, tuple)) else list(in_keys)
        out_keys = (
            list(in_keys)
            if out_keys is None
            else ([out_keys] if isinstance(out_keys, (str, tuple)) else list(out_keys))
        )
        if len(in_keys) != len(out_keys):
            raise ValueError(f"TanhModule: in_keys {in_keys} and out_keys {out_keys} must have the same length.")
        if spec is not None and (low is not None or high is not None):
            raise ValueError("TanhModule: give spec or low/high, not both.")
        self.in_keys, self.out_keys, self.clamp = in_keys, out_keys, bool(clamp)
        bounds = [self._bounds(key, spec, low, high) for key in out_keys]
        for i, (lo, hi) in enumerate(bounds):
            self.register_buffer(f"_low{i}", lo)
            self.register_buffer(f"_high{i}", hi)

    @staticmethod
    def _bounds(key: Any, spec: Any, low: Any, high: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(spec, Composite):
            if key not in spec.keys(True, True):
                raise KeyError(
                    f"TanhModule: the spec has no entry {key!r} for out-key {key!r}; it holds {list(spec.keys(True, True))}."
                )
            spec = spec[key]
        if spec is not None:
            if not isinstance(spec, Bounded):
                raise TypeError(f"TanhModule: the spec of {key!r} must be Bounded, got {type(spec).__name__}.")
            return spec.low.clone(), spec.high.clone()
        lo = torch.as_tensor(-1.0 if low is None else low, dtype=torch.get_default_dtype())
        hi = torch.as_tensor(1.0 if high is None else high, dtype=torch.get_default_dtype())
        if bool((hi <= lo).any()):
            raise ValueError(f"TanhModule: high must be greater than low, got low={lo.tolist()}, high={hi.tolist()}.")
        return lo, hi

    def forward(self, tensordict: Any) -> Any:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            low, high = getattr(self, f"_low{i}"), getattr(self, f"_high{i}")
            out = low + (high - low) * (torch.tanh(tensordict.get(in_key)) + 1) / 2
            if self.clamp:
                out = torch.maximum(torch.minimum(out, high), low)
            tensordict.set(out_key, out)
        return tensordict
