"""RandomPolicy: actions drawn from an action spec (the default policy of rollouts and collectors)."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Composite

__all__ = ["RandomPolicy"]


class RandomPolicy:
    """A policy that writes ``action_spec.rand()`` into the TensorDict it is called on.

    The sample takes the TensorDict's batch: leading batch dims that the spec does not have are
    added (a batch-unlocked env fed a bigger batch, or a spec without batch dims). A ``Composite``
    action spec writes every one of its leaves (``action_key`` is then unused).

    Args:
        action_spec: the spec to sample, usually ``env.action_spec`` or ``env.full_action_spec``. ``None``:
            set later by :meth:`set_action_spec_from_env` (collectors call it with their env).
        action_key: where a leaf spec's sample is written.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> policy = RandomPolicy(Bounded(-1.0, 1.0, shape=(4, 2)))
        >>> td = policy(TensorDict(batch_size=[4]))
        >>> td["action"].shape, bool(td["action"].abs().le(1).all())
        (torch.Size([4, 2]), True)
    """

    def __init__(self, action_spec: Any = None, action_key: NestedKey = "action") -> None:
        self.action_key = action_key
        self.action_spec = None
        if action_spec is not None:
            self._set_spec(action_spec)

    def _set_spec(self, action_spec: Any) -> None:
        if not hasattr(action_spec, "rand"):
            raise TypeError(f"RandomPolicy: action_spec must be a spec with rand(), got {type(action_spec).__name__}.")
        self.action_spec = action_spec
        self._composite = isinstance(action_spec, Composite)
        self._spec_shape = torch.Size(action_spec.shape)

    def set_action_spec_from_env(self, env: Any) -> None:
        """Takes ``env.full_action_spec`` when no spec was given (a collector calls this); else does nothing."""
        if self.action_spec is None:
            self._set_spec(env.full_action_spec.clone())

    def _lead(self, batch: torch.Size) -> torch.Size:
        """The batch dims to prepend: those of ``batch`` that the spec's leading dims do not cover."""
        shape = self._spec_shape
        if self._composite:
            n = len(shape)
            if batch[len(batch) - n :] != shape if n else False:
                raise ValueError(
                    f"RandomPolicy: the tensordict's batch_size {list(batch)} does not end with the action spec's "
                    f"batch shape {list(shape)}."
                )
            return batch[: len(batch) - n]
        # a leaf spec's shape = [*its batch dims, *features]: its batch dims are the largest suffix of `batch`
        # that starts the spec's shape
        for k in range(min(len(batch), len(shape)), -1, -1):
            if batch[len(batch) - k :] == shape[:k]:
                return batch[: len(batch) - k]
        return batch

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.action_spec is None:
            raise RuntimeError(
                "RandomPolicy: action_spec is not set; pass it to the constructor, or give the policy to a "
                "collector with an env (Collector(env, RandomPolicy())), which sets it from env.full_action_spec."
            )
        lead = self._lead(tensordict.batch_size)
        sample = self.action_spec.rand(lead) if lead else self.action_spec.rand()
        if self._composite:
            for key, value in sample.items(True, True):
                tensordict.set(key, value)
        else:
            tensordict.set(self.action_key, sample)
        return tensordict

    def __repr__(self) -> str:
        spec = type(self.action_spec).__name__ if self.action_spec is not None else None
        return f"RandomPolicy(action_key={self.action_key!r}, action_spec={spec})"
