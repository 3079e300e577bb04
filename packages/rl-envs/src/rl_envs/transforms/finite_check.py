"""FiniteTensorDictCheck: raises when a tensor leaf holds NaN or infinite values."""

from __future__ import annotations

import torch
from tdict import TensorDictBase

from .base import Transform

__all__ = ["FiniteTensorDictCheck"]


class FiniteTensorDictCheck(Transform):
    """Raises ``ValueError`` naming the first tensor leaf with a NaN or infinite value; passes data through.

    Checks every tensor leaf (non-tensor leaves are skipped): env outputs on each step and reset, or
    a plain TensorDict / replay-buffer sample when called.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> FiniteTensorDictCheck()(TensorDict(a=torch.ones(2)))["a"].tolist()
        [1.0, 1.0]
    """

    def __init__(self) -> None:
        super().__init__(in_keys=[], out_keys=[])

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in next_tensordict.items(include_nested=True, leaves_only=True):
            if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
                raise ValueError(f"FiniteTensorDictCheck: entry {key!r} holds non-finite values (NaN or inf).")
        return next_tensordict
