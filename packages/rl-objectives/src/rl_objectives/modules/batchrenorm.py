"""BatchRenorm1d: batch renormalization (Ioffe, 2017), the normalisation layer of CrossQ's critics.

In training, a batch is normalised with its own statistics and then corrected towards the running
ones: ``y = (x - mean_B) / std_B * r + d`` with ``r = clamp(std_B / std_run, 1/max_r, max_r)`` and
``d = clamp((mean_B - mean_run) / std_run, -max_d, max_d)`` (both detached). During the first
``warmup_steps`` training batches ``r = 1, d = 0`` (plain batch norm); ``smooth=True`` ramps them in
linearly instead. In evaluation the running statistics alone are used, as in batch norm.
"""

from __future__ import annotations

import torch
from tdict.validation import (
    check_non_negative,
    check_non_negative_int,
    check_positive,
    check_positive_int,
    check_unit_interval,
)
from torch import nn

__all__ = ["BatchRenorm1d"]


class BatchRenorm1d(nn.Module):
    """Batch renormalization over the features of dim 1 (TorchRL's ``BatchRenorm1d``).

    Args:
        num_features: the size of dim 1 of the input (``[N, C]`` or ``[N, C, *]``).

    Keyword Args:
        momentum: weight of a new batch in the running mean and variance (default ``0.01``).
        eps: added to the variances before the square root (default ``1e-5``).
        max_r: the correction ``r`` is clamped to ``[1/max_r, max_r]`` (default ``3.0``).
        max_d: the correction ``d`` is clamped to ``[-max_d, max_d]`` (default ``5.0``).
        warmup_steps: training batches run as plain batch norm before the corrections apply
            (default ``10000``; ``0``: from the first batch).
        smooth: ramp the corrections in linearly over the warm-up instead of switching them on
            at its end (default ``False``).

    Buffers ``running_mean`` / ``running_var`` (float32, updated with the unbiased batch variance)
    and ``num_batches_tracked``; parameters ``weight`` and ``bias`` (the affine output). Unlike
    TorchRL 0.14.1, whose warm-up factor keeps growing past 1 (``n // warmup_steps`` becomes 2
    after twice the warm-up), the factor here stays at 1 once the warm-up is over, and the
    unbiased variance of an ``[N, C, L]`` input counts its ``N * L`` values per feature.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import BatchRenorm1d
        >>> norm = BatchRenorm1d(3, warmup_steps=2)
        >>> y = norm(torch.randn(16, 3) * 4 + 1)  # warm-up: plain batch norm
        >>> bool(y.mean(0).abs().max() < 1e-5), int(norm.num_batches_tracked)
        (True, 1)
        >>> _ = norm.eval()
        >>> norm(torch.zeros(2, 3)).shape
        torch.Size([2, 3])
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.01,
        eps: float = 1e-5,
        max_r: float = 3.0,
        max_d: float = 5.0,
        warmup_steps: int = 10000,
        smooth: bool = False,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_positive_int(name, "num_features", num_features)
        check_unit_interval(name, "momentum", momentum)
        check_positive(name, "eps", eps)
        if not max_r >= 1.0:
            raise ValueError(f"{name}: max_r must be >= 1 (r is clamped to [1/max_r, max_r]), got {max_r!r}.")
        check_non_negative(name, "max_d", max_d)  # d is clamped to [-max_d, max_d]
        check_non_negative_int(name, "warmup_steps", warmup_steps)
        self.num_features = num_features
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.max_r = float(max_r)
        self.max_d = float(max_d)
        self.warmup_steps = warmup_steps
        self.smooth = bool(smooth)
        self.register_buffer("running_mean", torch.zeros(num_features, dtype=torch.float32))
        self.register_buffer("running_var", torch.ones(num_features, dtype=torch.float32))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.int64))
        self.weight = nn.Parameter(torch.ones(num_features, dtype=torch.float32))
        self.bias = nn.Parameter(torch.zeros(num_features, dtype=torch.float32))

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batch tracked (the warm-up starts again)."""
        with torch.no_grad():
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """The running statistics reset, ``weight`` 1 and ``bias`` 0."""
        self.reset_running_stats()
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()

    def _warmup_factor(self) -> torch.Tensor:
        """0 during the warm-up, 1 after it (``smooth``: ``n / warmup_steps``, capped at 1)."""
        n = self.num_batches_tracked.to(self.running_var.dtype)
        if self.warmup_steps == 0:
            return torch.ones_like(n)
        if self.smooth:
            return (n / self.warmup_steps).clamp(max=1.0)
        return (n >= self.warmup_steps).to(n.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = type(self).__name__
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(
                f"{name}: expected an input [N, {self.num_features}] or [N, {self.num_features}, *], got shape {tuple(x.shape)}."
            )
        view = [1, self.num_features] + [1] * (x.dim() - 2)
        running_std = (self.running_var + self.eps).sqrt()
        if self.training:
            count = x.numel() // self.num_features
            if count < 2:
                raise ValueError(
                    f"{name}: training needs more than one value per feature (input shape {tuple(x.shape)})."
                )
            dims = [0, *range(2, x.dim())]
            mean = x.mean(dims)
            var = x.var(dims, unbiased=False)
            std = (var + self.eps).sqrt()
            factor = self._warmup_factor()
            r = (std.detach() / running_std).clamp(1.0 / self.max_r, self.max_r)
            d = ((mean.detach() - self.running_mean) / running_std).clamp(-self.max_d, self.max_d)
            r = 1.0 + (r - 1.0) * factor
            d = d * factor
            y = (x - mean.view(view)) / std.view(view) * r.view(view) + d.view(view)
            with torch.no_grad():
                unbiased = var.detach() * (count / (count - 1))
                self.running_mean.add_(self.momentum * (mean.detach() - self.running_mean))
                self.running_var.add_(self.momentum * (unbiased - self.running_var))
                self.num_batches_tracked.add_(1)
        else:
            y = (x - self.running_mean.view(view)) / running_std.view(view)
        return self.weight.view(view) * y + self.bias.view(view)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, momentum={self.momentum}, eps={self.eps}, max_r={self.max_r}, "
            f"max_d={self.max_d}, warmup_steps={self.warmup_steps}, smooth={self.smooth}"
        )
