"""Holding a network out of the autograd graph for a block: its outputs carry no gradient to its
parameters, while inputs that require grad still get theirs (a critic evaluated in an actor loss).

Examples:
    >>> import torch
    >>> from torch import nn
    >>> critic = nn.Linear(3, 1)
    >>> action = torch.randn(2, 3, requires_grad=True)
    >>> with hold_out_net(critic):
    ...     value = critic(action)
    >>> value.requires_grad, critic.weight.requires_grad  # through the action only; restored after
    (True, True)
    >>> value.sum().backward()
    >>> critic.weight.grad is None, action.grad is not None
    (True, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from tdict import TensorDictBase

__all__ = ["hold_out_net", "hold_out_params"]


class hold_out_net(contextlib.ContextDecorator):
    """Within the block (or the decorated function), ``network``'s parameters do not require grad.

    Only the parameters that required grad on entering are switched off, and exactly those are
    switched back on leaving (also after an exception); nested blocks over the same network are
    fine.

    Args:
        network: the module to hold out.
    """

    def __init__(self, network: nn.Module) -> None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"hold_out_net: network must be an nn.Module, got {type(network).__name__}.")
        self.network = network
        self._held: list[list[nn.Parameter]] = []  # one list per open block (the decorator re-enters)

    def __enter__(self) -> nn.Module:
        held = [p for p in self.network.parameters() if p.requires_grad]
        for p in held:
            p.requires_grad_(False)
        self._held.append(held)
        return self.network

    def __exit__(self, *exc: Any) -> None:
        for p in self._held.pop():
            p.requires_grad_(True)


@contextlib.contextmanager
def hold_out_params(params: TensorDictBase | Iterable[torch.Tensor]) -> Iterator[Any]:
    """Gives detached views of ``params`` (a TensorDict of them, or a tuple) for the block: they
    follow the parameters' values and send no gradient to them.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Linear(2, 1)
        >>> with hold_out_params(net.parameters()) as (weight, bias):
        ...     weight.requires_grad, weight.data_ptr() == net.weight.data_ptr()
        (False, True)
    """
    if isinstance(params, TensorDictBase):
        yield params.detach()
    else:
        yield tuple(p.detach() for p in params)
