"""Shape transforms: UnsqueezeTransform, SqueezeTransform, FlattenObservation, PermuteTransform.

Dims are feature dims counted from the end (negative), as in TorchRL: batch dims (the env's batch and
a rollout's time dim) are never touched, so the same transform works on a step, a rollout and a
replay-buffer sample.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import NestedKey

from .elementwise import _MapTransform, map_spec

__all__ = ["UnsqueezeTransform", "SqueezeTransform", "FlattenObservation", "PermuteTransform"]


def _negative_dim(name: str, dim: int, what: str) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name}: {what} must be an int, got {type(dim).__name__}.")
    if dim >= 0:
        raise ValueError(
            f"{name}: {what} must be a negative (feature) dim counted from the end, got {dim}; batch dims are "
            "never changed, so dims are given from the end (e.g. -1 for the last feature dim)."
        )
    return dim


class UnsqueezeTransform(_MapTransform):
    """Inserts a singleton feature dim at ``dim`` (negative); the inverse squeezes it back out.

    Args:
        dim: where the new dim goes, counted from the end (``-1``: a new last dim).
        in_keys: entries unsqueezed on the way out of the env.
        out_keys: where the results go (default ``in_keys``).
        in_keys_inv: entries the inner env reads; the caller gives them with the extra dim and the
            inverse squeezes it (e.g. a policy that outputs ``[*batch, 1, 1]`` actions).
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).
        allow_positive_dim: accept a non-negative ``dim``, counted from the tensor's first dim (batch
            dims included, as TorchRL); a dim inside the batch dims then fails when the result is
            written back.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = UnsqueezeTransform(-1, in_keys=["obs"])
        >>> t(TensorDict(obs=torch.zeros(4, 3), batch_size=[4]))["obs"].shape
        torch.Size([4, 3, 1])
    """

    def __init__(
        self,
        dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        *,
        allow_positive_dim: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if allow_positive_dim and isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
            self.dim = dim  # counted from the first dim of the tensor, batch dims included (TorchRL's meaning)
        else:
            self.dim = _negative_dim(type(self).__name__, dim, "dim")
        self.allow_positive_dim = bool(allow_positive_dim)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")

    def _unsqueeze(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(self.dim)

    def _squeeze(self, value: torch.Tensor) -> torch.Tensor:
        dim = self.dim
        if value.shape[dim] != 1:
            raise ValueError(
                f"{type(self).__name__}: cannot squeeze dim {dim} of a tensor of shape {list(value.shape)} "
                "(its size is not 1)."
            )
        return value.squeeze(dim)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._unsqueeze(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._squeeze(value)

    def _spec_fn(self, spec: Any) -> Any:
        return map_spec(spec, self._unsqueeze)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, in_keys={self.in_keys}, in_keys_inv={self.in_keys_inv})"


class SqueezeTransform(UnsqueezeTransform):
    """Removes the singleton feature dim ``dim`` (negative); the inverse inserts it back.

    As ``torch.squeeze(dim)`` (and TorchRL), an entry whose ``dim`` is not of size one is left as it is.

    Args:
        dim: the dim to remove, counted from the end.
        in_keys: entries squeezed on the way out of the env.
        out_keys: where the results go (default ``in_keys``).
        in_keys_inv: entries the inner env reads; the caller gives them without the dim.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = SqueezeTransform(-1, in_keys=["obs"])
        >>> t(TensorDict(obs=torch.zeros(4, 3, 1), batch_size=[4]))["obs"].shape
        torch.Size([4, 3])
    """

    def _squeeze_if_single(self, value: torch.Tensor) -> torch.Tensor:
        return value.squeeze(self.dim)  # torch leaves a dim that is not of size one as it is

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._squeeze_if_single(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._unsqueeze(value)

    def _spec_fn(self, spec: Any) -> Any:
        return map_spec(spec, self._squeeze_if_single)


class FlattenObservation(_MapTransform):
    """Flattens the feature dims ``first_dim..last_dim`` (inclusive) into one.

    Args:
        first_dim: the first dim to flatten, counted from the end (negative), or from the first
            feature dim when ``allow_positive_dim`` is set.
        last_dim: the last dim to flatten (same convention).
        in_keys: entries to flatten (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).
        allow_positive_dim: accept dims >= 0, counted from the first feature dim (after the env's
            batch dims); they are turned into negative dims once the env (or a spec) is known.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = FlattenObservation(-3, -1, in_keys=["pixels"])
        >>> t(TensorDict(pixels=torch.zeros(2, 3, 4, 5), batch_size=[2]))["pixels"].shape
        torch.Size([2, 60])
    """

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        if in_keys is None:
            in_keys = ["pixels"]
        super().__init__(in_keys, out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        for name, d in (("first_dim", first_dim), ("last_dim", last_dim)):
            if not allow_positive_dim:
                _negative_dim("FlattenObservation", d, name)
            elif not isinstance(d, int):
                raise TypeError(f"FlattenObservation: {name} must be an int, got {type(d).__name__}.")
        if (first_dim < 0) == (last_dim < 0) and first_dim > last_dim:
            raise ValueError(f"FlattenObservation: first_dim ({first_dim}) must come before last_dim ({last_dim}).")
        self.first_dim = first_dim
        self.last_dim = last_dim
        self.allow_positive_dim = allow_positive_dim
        self._feature_ndim: int | None = None  # number of feature dims, known once a spec is seen

    def _dims(self) -> tuple[int, int]:
        first, last = self.first_dim, self.last_dim
        if first >= 0 or last >= 0:
            n = self._feature_ndim
            if n is None:
                raise RuntimeError(
                    "FlattenObservation: positive dims need the number of feature dims; use the transform in an "
                    "env first (or give negative dims)."
                )
            first = first - n if first >= 0 else first
            last = last - n if last >= 0 else last
        return first, last

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        first, last = self._dims()
        return value.flatten(value.ndim + first, value.ndim + last)

    def transform_observation_spec(self, observation_spec):  # type: ignore[no-untyped-def]
        if self.first_dim >= 0 or self.last_dim >= 0:
            for key in self.in_keys:
                spec = observation_spec.get(key, None)
                if spec is not None:
                    self._feature_ndim = len(spec.shape) - len(observation_spec.shape)
                    break
        return super().transform_observation_spec(observation_spec)

    def __repr__(self) -> str:
        return f"FlattenObservation(first_dim={self.first_dim}, last_dim={self.last_dim}, in_keys={self.in_keys})"


class PermuteTransform(_MapTransform):
    """Permutes the last ``len(dims)`` feature dims; the inverse applies the inverse permutation.

    Args:
        dims: the new order of the last ``len(dims)`` dims, a permutation of ``[-len(dims), ..., -1]``
            (e.g. ``[-1, -3, -2]`` turns ``[..., H, W, C]`` into ``[..., C, H, W]``).
        in_keys: entries permuted on the way out of the env.
        out_keys: where the results go (default ``in_keys``).
        in_keys_inv: entries the inner env reads; the caller gives them permuted.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = PermuteTransform([-1, -3, -2], in_keys=["pixels"])
        >>> t(TensorDict(pixels=torch.zeros(5, 4, 6, 3), batch_size=[5]))["pixels"].shape
        torch.Size([5, 3, 4, 6])
    """

    def __init__(
        self,
        dims: Sequence[int],
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        dims = [int(d) for d in dims]
        n = len(dims)
        if sorted(dims) != list(range(-n, 0)):
            raise ValueError(
                f"PermuteTransform: dims must be a permutation of {list(range(-n, 0))} (negative feature dims), "
                f"got {dims}."
            )
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")
        self.dims = dims
        self._inverse = [0] * n  # position of each original dim after permuting
        for new_pos, d in enumerate(dims):
            self._inverse[d + n] = new_pos - n

    def _permute(self, value: torch.Tensor, dims: list) -> torch.Tensor:
        nd = value.ndim
        n = len(dims)
        if nd < n:
            raise ValueError(f"PermuteTransform: a tensor of shape {list(value.shape)} has fewer than {n} dims.")
        return value.permute(*range(nd - n), *[nd + d for d in dims])

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self.dims)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self._inverse)

    def __repr__(self) -> str:
        return f"PermuteTransform(dims={self.dims}, in_keys={self.in_keys}, in_keys_inv={self.in_keys_inv})"
