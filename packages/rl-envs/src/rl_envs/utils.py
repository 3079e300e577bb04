"""``torchrl.envs.utils``'s names: the exploration type and the step helpers.

The exploration type is the interaction type of ``tdict.nn`` under TorchRL's other name (as in
TorchRL, where ``ExplorationType`` is ``InteractionType``): ``set_exploration_type(RANDOM)`` makes
probabilistic policies sample, ``DETERMINISTIC`` makes them act greedily.

Examples:
    >>> from rl_envs.utils import ExplorationType, exploration_type, set_exploration_type
    >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
    ...     exploration_type()
    <InteractionType.DETERMINISTIC: 'deterministic'>
"""

from __future__ import annotations

from tdict.nn import InteractionType as ExplorationType
from tdict.nn import interaction_type as exploration_type
from tdict.nn import set_interaction_type as set_exploration_type

from typing import Any

import torch
from tdict import is_non_tensor, is_tensor_collection
from tdict.specs import Composite, NonTensor, Unbounded

from .checks import check_env_specs
from .mdp import step_mdp

__all__ = [
    "ExplorationType",
    "check_env_specs",
    "exploration_type",
    "make_composite_from_td",
    "set_exploration_type",
    "step_mdp",
]


def make_composite_from_td(data: Any, *, unsqueeze_null_shapes: bool = True, dynamic_shape: bool = False) -> Composite:
    """A :class:`~tdict.specs.Composite` describing ``data``: an ``Unbounded`` spec per tensor (its
    shape, dtype and device), a ``NonTensor`` spec per non-tensor entry, nested collections nested.

    Args:
        data: a TensorDict (or tensorclass).
        unsqueeze_null_shapes: give 0-dim tensors the shape ``(1,)``, as TorchRL does (pass ``False``
            to keep them scalar, this package's convention for rewards and done flags).
        dynamic_shape: TorchRL marks the last dim dynamic (``-1``); our specs have static shapes only,
            so ``True`` raises ``ValueError``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> spec = make_composite_from_td(TensorDict(obs=torch.zeros(3), next=TensorDict(reward=torch.zeros(()))))
        >>> spec["obs"].shape, spec["next", "reward"].shape
        (torch.Size([3]), torch.Size([1]))
    """
    if dynamic_shape:
        raise ValueError(
            "make_composite_from_td: dynamic_shape=True is not supported (tdict.specs shapes are static); "
            "build the spec from a sample of the final shape."
        )

    def leaf(tensor: torch.Tensor) -> Unbounded:
        shape = tensor.shape if tensor.shape or not unsqueeze_null_shapes else torch.Size([1])
        return Unbounded(shape=shape, dtype=tensor.dtype, device=tensor.device)

    def convert(td: Any) -> Composite:
        entries: dict[str, Any] = {}
        for key in td.keys():
            value = td.get(key)
            if is_non_tensor(value):
                entries[key] = NonTensor(
                    shape=value.batch_size, device=value.device, example_data=td.get_non_tensor(key)
                )
            elif is_tensor_collection(value):
                entries[key] = convert(value)
            else:
                entries[key] = leaf(value)
        return Composite(entries, shape=td.batch_size, device=td.device)

    return convert(data)
