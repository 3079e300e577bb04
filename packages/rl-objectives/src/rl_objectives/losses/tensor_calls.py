"""Calls of a loss with tensors instead of a TensorDict (TorchRL's ``dispatch``), and output selection.

``loss(observation=..., next_reward=...)`` gathers the keyword tensors into a TensorDict, runs the
loss on it and returns its :attr:`out_keys` entries. The keyword names are the loss's
:attr:`in_keys`, nested keys joined with ``"_"``. ``select_out_keys`` narrows what calls return.
"""

from __future__ import annotations

from typing import Any

import tdict
from tdict import TensorDict
from torch import nn

__all__: list[str] = []  # mixed into LossModule


class _TensorCalls:
    """The keyword-tensor calls and ``select_out_keys`` of :class:`~rl_objectives.LossModule`
    (mixed in before ``nn.Module``; the loss provides ``default_keys``, ``tensor_keys``,
    ``out_keys`` and its registered networks)."""

    default_keys: Any
    tensor_keys: Any
    out_keys: Any
    _networks: dict

    _selected_out_keys: list | None = None  # set by select_out_keys

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs and not args and "tensordict" not in kwargs:
            return self._call_with_tensors(kwargs)
        out = nn.Module.__call__(self, *args, **kwargs)
        selected = self._selected_out_keys
        return out if selected is None else out.select(*selected)

    @property
    def in_keys(self) -> list:
        """The entries this loss reads: the action (and behaviour log-prob), its networks' inputs at
        the root and under ``"next"``, and the next reward, done and terminated flags.

        A call with keyword tensors instead of a TensorDict (TorchRL's ``dispatch``) names them after
        these keys, nested keys joined with ``"_"``: ``loss(observation=..., next_reward=...)``.
        """
        keys: list = []

        def add(key: Any, prefix: tuple = ()) -> None:
            for one in key if isinstance(key, list) else [key]:
                one = tdict.unravel_key((*prefix, one) if prefix else one)
                if one not in keys:
                    keys.append(one)

        names, tensor_keys = self.default_keys, self.tensor_keys
        for name in ("action", "sample_log_prob"):
            if name in names:
                add(getattr(tensor_keys, name))
        for network in self._networks:
            network_keys = list(getattr(getattr(self, network), "in_keys", []))
            add(network_keys)
            add(network_keys, ("next",))
        for name in ("reward", "done", "terminated"):
            if name in names:
                add(getattr(tensor_keys, name), ("next",))
        add(self._extra_in_keys())
        return keys

    def _extra_in_keys(self) -> list:
        """More entries a subclass reads (added to :attr:`in_keys`)."""
        return []

    def select_out_keys(self, *out_keys: Any) -> Any:
        """Make calls return only ``out_keys`` among :attr:`out_keys` (in place; returns ``self``).

        Raises:
            ValueError: a key that is not one of :attr:`out_keys`.

        Examples:
            >>> import torch
            >>> from torch import nn
            >>> from tdict import TensorDict
            >>> from tdict.specs import OneHot
            >>> from rl_objectives import DQNLoss, SoftUpdate
            >>> from rl_objectives.modules import QValueActor
            >>> loss = DQNLoss(QValueActor(nn.Linear(3, 2), spec=OneHot(2)))
            >>> _ = SoftUpdate(loss, tau=0.1)
            >>> loss.in_keys
            ['action', 'observation', ('next', 'observation'), ('next', 'reward'), ('next', 'done'), ('next', 'terminated')]
            >>> value = loss(observation=torch.randn(3), action=torch.tensor([0, 1]),
            ...              next_observation=torch.randn(3), next_reward=torch.tensor(1.0),
            ...              next_done=torch.tensor(False), next_terminated=torch.tensor(False))
            >>> value.shape  # one out key: the tensor itself, else a tuple in out_keys order
            torch.Size([])
            >>> loss.select_out_keys("loss") is loss
            True
        """
        known = [tdict.unravel_key(k) for k in self.out_keys]
        wanted = [tdict.unravel_key(k) for k in out_keys]
        unknown = [k for k in wanted if k not in known]
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.select_out_keys: {unknown} are not out keys of this loss; out_keys: {known}."
            )
        self._selected_out_keys = wanted
        return self

    def reset_out_keys(self) -> Any:
        """Undo :meth:`select_out_keys`: calls return every entry again (returns ``self``)."""
        self._selected_out_keys = None
        return self

    def _call_with_tensors(self, kwargs: dict) -> Any:
        """``loss(observation=..., next_reward=..., ...)``: the tensors gathered into a TensorDict
        (keyword names are :attr:`in_keys` joined with ``"_"``; the batch size is the leading dims
        they share), the loss run on it, and the :attr:`out_keys` entries returned (one tensor for
        one key, else a tuple in that order)."""
        names = {("_".join(k) if isinstance(k, tuple) else k): k for k in self.in_keys}
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}: keyword argument(s) {unknown} name no entry this loss reads; accepted: "
                f"{sorted(names)} (its in_keys, nested keys joined with '_'), or pass one TensorDict."
            )
        td = TensorDict()
        for name, value in kwargs.items():
            td.set(names[name], value)
        td.auto_batch_size_()
        out = self(td)
        keys = self._selected_out_keys or self.out_keys
        values = tuple(out.get(k) for k in keys)
        return values[0] if len(values) == 1 else values
