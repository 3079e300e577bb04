"""Postprocessing modules for collected batches (TorchRL's ``torchrl.data.postprocs`` names).

:class:`MultiStep` turns each step of a collected batch ``[*batch, T]`` (time last) into its
n-step version, within that batch only: pass it as a collector's ``postproc=``. To get n-step
returns across successive batches, use :class:`rl_replay.MultiStepTransform` in the replay buffer.
"""

from __future__ import annotations

import torch
from tdict import NestedKey, TensorDictBase
from tdict.validation import check_positive_int, check_unit_interval
from torch import nn

from .transforms import n_step_returns

__all__ = ["MultiStep"]

# TorchRL's order (torchrl._utils.DEFAULT_DONE_KEYS)
_DONE_KEYS: tuple[NestedKey, ...] = ("done", "truncated", "terminated")


class MultiStep(nn.Module):
    """n-step returns for a collected batch ``[*batch, T]``, as TorchRL's ``torchrl.data.postprocs.MultiStep``.

    For step ``t``, let ``k`` be the number of steps from ``t`` to the end of its episode (its first
    ``("next", "done")`` at or after ``t``, else the end of the batch), capped at ``n_steps``.
    ``forward`` returns a new TensorDict (the input is left as it is) where:

    - ``("next", "reward")`` is ``sum_{i<k} gamma**i * reward[t + i]``; the one-step reward moves
      to ``("next", "original_reward")``;
    - every other ``"next"`` entry but the done keys (``"done"``, ``"truncated"``,
      ``"terminated"``) is taken from step ``t + k - 1``: the observation ``k`` steps ahead, cut at
      the episode end;
    - ``"steps_to_next_obs"`` is ``k`` (int64) and ``"gamma"`` is ``gamma**k`` (default float dtype),
      the discount to apply to the value of that observation;
    - ``"nonterminal"`` is False where the window stopped at a done flag, or where
      ``("collector", "mask")`` (if present) is False.

    Steps near the end of the batch see fewer than ``n_steps`` rewards, as in TorchRL.
    Differences from TorchRL 0.14.1: ``gamma=0`` is accepted; ``"nonterminal"`` follows the done
    flags (TorchRL sets it from ``k != 1``, so all False for ``n_steps=1``); ``("next", "done")``
    must have the batch shape (a trailing singleton dim is allowed), with no extra per-agent dims.

    Args:
        gamma: discount factor, in ``[0, 1]``.
        n_steps: look-ahead, ``>= 1`` (1: the rewards are unchanged).

    Attributes ``reward_keys``, ``done_key``, ``done_keys`` and ``mask_key`` hold TorchRL's defaults
    and can be reassigned. The buffer ``gammas`` (``gamma**i`` for ``i`` in ``0..n_steps``, shape
    ``[1, 1, n_steps + 1]``) matches TorchRL's ``state_dict``.

    Raises:
        ValueError: ``n_steps < 1`` or ``gamma`` outside ``[0, 1]``.
        ArgumentTypeError: ``n_steps`` not an int or ``gamma`` not a real number.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import MultiStep
        >>> done = torch.tensor([False, False, True, False, False])
        >>> batch = TensorDict(obs=torch.arange(5.0), next=TensorDict(obs=torch.arange(1.0, 6.0),
        ...     reward=torch.ones(5), done=done, batch_size=[5]), batch_size=[5])
        >>> out = MultiStep(gamma=0.5, n_steps=2)(batch)
        >>> out["next", "reward"].tolist(), out["next", "obs"].tolist()
        ([1.5, 1.5, 1.0, 1.5, 1.0], [2.0, 3.0, 3.0, 5.0, 5.0])
        >>> out["steps_to_next_obs"].tolist(), out["gamma"].tolist()
        ([2, 2, 1, 2, 1], [0.25, 0.25, 0.5, 0.25, 0.5])
    """

    gammas: torch.Tensor

    def __init__(self, gamma: float, n_steps: int) -> None:
        super().__init__()
        check_positive_int("MultiStep", "n_steps", n_steps)
        check_unit_interval("MultiStep", "gamma", gamma)
        self.gamma = float(gamma)
        self.n_steps = int(n_steps)
        self.register_buffer(
            "gammas",
            torch.tensor([self.gamma**i for i in range(self.n_steps + 1)], dtype=torch.float).reshape(1, 1, -1),
        )
        self.done_key: NestedKey = "done"
        self.done_keys: tuple[NestedKey, ...] = _DONE_KEYS
        self.reward_keys: tuple[NestedKey, ...] = ("reward",)
        self.mask_key: NestedKey | None = ("collector", "mask")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The n-step version of ``tensordict`` ``[*batch, T]`` (a new TensorDict; see the class doc).

        Raises:
            TypeError: ``tensordict`` is not a TensorDict.
            KeyError: no ``("next", "done")`` entry.
            ValueError: no time dim, or ``("next", "done")``/reward shapes that do not match the batch.
        """
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"MultiStep takes a TensorDict [*batch, T], got {type(tensordict).__name__}.")
        if tensordict.batch_dims == 0:
            raise ValueError("MultiStep: the data needs a time dim (batch_size [*batch, T]), got [].")
        return n_step_returns(
            tensordict,
            n_steps=self.n_steps,
            gamma=self.gamma,
            reward_keys=self.reward_keys,
            done_key=self.done_key,
            done_keys=self.done_keys,
            mask_key=self.mask_key,
        )

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, n_steps={self.n_steps}"
