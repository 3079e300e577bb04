"""PolicyAgeFilter: drops replay-buffer rows stamped by a policy version that lags too far behind."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from tdict import NestedKey, TensorDictBase, is_tensor_collection, unravel_key

from .base import Transform

__all__ = ["PolicyAgeFilter"]


class PolicyAgeFilter(Transform):
    """Keeps the rows whose ``policy_version_key`` is at most ``max_policy_lag`` versions behind.

    On a replay buffer it filters what is written (``extend`` / ``add``, the inverse path) and what
    is sampled (the forward path: rows that went stale since they were written are dropped, so a
    batch can be smaller than asked). A row with several stamps (e.g. ``[B, T]`` data) is judged by
    its oldest one. A TensorDict with no batch dim is one row: a stale one gives ``None``. Inside an
    env it does nothing (env data comes from the live policy).

    Args:
        current_version: the live policy version, or a callable returning it (called on every batch).
        max_policy_lag: the largest allowed ``current_version - stamped_version`` (>= 0).
        policy_version_key: the entry holding each row's stamped version.
        strict: with ``True`` data without ``policy_version_key`` raises ``KeyError``; with ``False``
            it passes unfiltered, with one warning.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"policy_version": torch.tensor([0, 2, 3])}, [3])
        >>> PolicyAgeFilter(3, max_policy_lag=1)(td)["policy_version"].tolist()
        [2, 3]
    """

    def __init__(
        self,
        current_version: int | Callable[[], int],
        max_policy_lag: int,
        *,
        policy_version_key: NestedKey = "policy_version",
        strict: bool = False,
    ) -> None:
        if not callable(current_version) and not isinstance(current_version, int):
            raise TypeError(
                f"PolicyAgeFilter: current_version must be an int or a callable, got {type(current_version).__name__}."
            )
        if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int) or max_policy_lag < 0:
            raise ValueError(f"PolicyAgeFilter: max_policy_lag must be a non-negative int, got {max_policy_lag!r}.")
        super().__init__(in_keys=[], out_keys=[])
        self.current_version = current_version
        self.max_policy_lag = max_policy_lag
        self.policy_version_key = unravel_key(policy_version_key)
        self.strict = bool(strict)
        self.__dict__["_warned"] = False

    def _version(self) -> int:
        version = self.current_version
        return int(version() if callable(version) else version)

    def _filter(self, data: Any) -> Any:
        if not is_tensor_collection(data):
            raise TypeError(f"PolicyAgeFilter filters TensorDicts, got {type(data).__name__}.")
        stamps = data.get(self.policy_version_key, None)
        if stamps is None:
            if self.strict:
                raise KeyError(f"PolicyAgeFilter: key {self.policy_version_key!r} not found in the data (strict=True).")
            if not self.__dict__["_warned"]:
                self.__dict__["_warned"] = True
                warnings.warn(
                    f"PolicyAgeFilter: key {self.policy_version_key!r} not found; the data passes unfiltered.",
                    UserWarning,
                    stacklevel=3,
                )
            return data
        if data.batch_dims == 0:
            return data if self._version() - int(stamps.min()) <= self.max_policy_lag else None
        n = data.batch_size[0]
        oldest = stamps.reshape(n, -1).amin(-1) if stamps.numel() else torch.zeros(n, dtype=torch.int64)
        keep = (self._version() - oldest) <= self.max_policy_lag
        return data if bool(keep.all()) else data[keep]

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._filter(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._holding_env() is not None:
            return tensordict  # an env's step input: nothing to filter
        return self._filter(tensordict)

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._inv_call(tensordict)  # filtering builds a new TensorDict: no copy needed

    @property
    def has_inverse(self) -> bool:
        return self._holding_env() is None

    # env outputs come from the live policy: nothing to filter
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset

    def __repr__(self) -> str:
        version = self.current_version if not callable(self.current_version) else "<callable>"
        return (
            f"PolicyAgeFilter(current_version={version}, max_policy_lag={self.max_policy_lag}, "
            f"policy_version_key={self.policy_version_key!r}, strict={self.strict})"
        )
