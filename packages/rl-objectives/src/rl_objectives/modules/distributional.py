"""Distributional (C51) Q-value policies: each action's return is a distribution over fixed atoms.

The network writes ``"action_value"`` shaped ``[*B, atoms, n_actions]``: log-probabilities over the
atoms (a log-softmax along dim ``-2``) for each action. The greedy action maximises the expected
return ``sum_j p_j(a) * support_j``. Names, arguments and keys follow ``torchrl.modules`` (0.14):
:class:`DistributionalDQNnet` (the log-softmax step), :class:`DistributionalQValueModule` (the greedy
step; it writes ``"action"`` and ``"action_value"``, no ``"chosen_action_value"``) and
:class:`DistributionalQValueActor` (network, log-softmax and greedy step in one sequence), trained by
:class:`~rl_objectives.DistributionalDQNLoss`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tdict import NestedKey
from tdict.nn import TensorDictModuleBase, TensorDictSequential, dispatch

from .actors import QValueActor, QValueModule, _action_value_network, _as_key_list

__all__ = ["DistributionalDQNnet", "DistributionalQValueActor", "DistributionalQValueModule"]


def _check_support(owner: str, support: Any) -> torch.Tensor:
    if not isinstance(support, torch.Tensor) or support.ndim != 1 or support.numel() < 2:
        shape = tuple(support.shape) if isinstance(support, torch.Tensor) else type(support).__name__
        raise ValueError(f"{owner}: support must be a 1-d tensor of at least 2 atoms, got {shape}.")
    if not support.is_floating_point():
        support = support.to(torch.get_default_dtype())
    return support


class DistributionalDQNnet(TensorDictModuleBase):
    """Log-softmax over the atoms (dim ``-2``) of the entries ``in_keys``, written at ``out_keys``.

    Keyword Args:
        in_keys: default ``["action_value"]``.
        out_keys: default ``["action_value"]`` (in place).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules import DistributionalDQNnet
        >>> td = DistributionalDQNnet()(TensorDict(action_value=torch.randn(10, 5, 2), batch_size=[10]))
        >>> torch.allclose(td["action_value"].exp().sum(-2), torch.ones(10, 2))
        True
    """

    def __init__(
        self, *, in_keys: Sequence[NestedKey] | None = None, out_keys: Sequence[NestedKey] | None = None
    ) -> None:
        super().__init__()
        self.in_keys = _as_key_list(in_keys, ["action_value"], "DistributionalDQNnet: in_keys")
        self.out_keys = _as_key_list(out_keys, ["action_value"], "DistributionalDQNnet: out_keys")
        if len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"DistributionalDQNnet: in_keys {self.in_keys} and out_keys {self.out_keys} must have the same length."
            )

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            values = tensordict.get(in_key)
            if values.ndim < 2:
                raise ValueError(
                    f"DistributionalDQNnet: {in_key!r} must be at least 2-d ([*B, atoms, n_actions]), got {tuple(values.shape)}."
                )
            tensordict.set(out_key, torch.log_softmax(values, dim=-2))
        return tensordict


class DistributionalQValueModule(QValueModule):
    """The greedy action of distributional action values: ``argmax_a sum_j exp(log_p[j, a]) * support[j]``.

    Reads ``action_value_key`` (``[*B, atoms, n]`` log-probabilities, e.g. from
    :class:`DistributionalDQNnet`) and writes the action and the action values (``out_keys``).

    Args:
        action_space: ``"one_hot"``, ``"categorical"`` or ``"mult_one_hot"``, or ``None`` with a ``spec``.
        support: ``[atoms]`` the return of each atom (evenly spaced and increasing for the loss).
        action_value_key: default ``"action_value"``.
        action_mask_key: optional boolean mask of allowed actions ``[*B, n]`` (a masked action is
            never chosen, whatever its expected return).
        out_keys: the two keys written (default ``["action", action_value_key]``).
        var_nums, spec, safe: as :class:`~rl_objectives.modules.QValueModule`.

    Raises:
        ValueError: a support that is not 1-d with 2 atoms or more; at call, action values whose
            atom dim does not match the support, or positive entries (not log-probabilities).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import DistributionalQValueModule
        >>> module = DistributionalQValueModule("categorical", support=torch.tensor([-1.0, 0.0, 1.0]))
        >>> probs = torch.tensor([[0.8, 0.1], [0.1, 0.1], [0.1, 0.8]])  # action 1 puts its mass on +1
        >>> action, values = module(probs.log())
        >>> action
        tensor(1)
    """

    support: torch.Tensor

    def __init__(
        self,
        action_space: str | None,
        support: torch.Tensor,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: Sequence[int] | None = None,
        spec: Any = None,
        safe: bool = False,
    ) -> None:
        support = _check_support("DistributionalQValueModule", support)
        action_value_key = "action_value" if action_value_key is None else action_value_key
        out_keys = _as_key_list(out_keys, ["action", action_value_key], "DistributionalQValueModule: out_keys")
        if len(out_keys) != 2:
            raise ValueError(
                f"DistributionalQValueModule: out_keys must hold 2 keys (action, action values), got {out_keys}."
            )
        super().__init__(
            action_space=action_space,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=[*out_keys, "chosen_action_value"],  # (QValueModule's third key, not written here)
            var_nums=var_nums,
            spec=spec,
            safe=safe,
            strict_shape=False,
        )
        self.out_keys = out_keys
        self.register_buffer("support", support)

    def _support_expected(self, log_probs: torch.Tensor) -> torch.Tensor:
        """``[*B, atoms, n]`` log-probabilities -> ``[*B, n]`` expected returns."""
        support = self.support
        if log_probs.ndim < 2 or log_probs.shape[-2] != support.shape[-1]:
            raise ValueError(
                f"DistributionalQValueModule: the action values {self.action_value_key!r} have shape "
                f"{tuple(log_probs.shape)}; expected [*B, atoms={support.shape[-1]}, n_actions] (atoms: the support's size)."
            )
        if not torch.compiler.is_compiling() and bool((log_probs > 0).any()):
            raise ValueError(
                f"DistributionalQValueModule: the action values must be log-probabilities (<= 0), got a maximum of "
                f"{float(log_probs.max()):.4f}; add a log-softmax over the atoms (DistributionalDQNnet)."
            )
        return (log_probs.exp() * support.to(log_probs.dtype).unsqueeze(-1)).sum(-2)

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        values, mask = self._inputs(tensordict)
        action, _ = self._greedy(self._support_expected(values), mask)
        if self.safe:
            assert self._project is not None  # QValueModule.__init__: safe needs a spec
            action = self._project(action)
        key_action, key_values = self.out_keys
        tensordict.set(key_action, action)
        tensordict.set(key_values, values)
        return tensordict


class DistributionalQValueActor(QValueActor):
    """A C51 policy: a network writing ``[*B, atoms, n]`` action values, a log-softmax over the atoms,
    and a :class:`DistributionalQValueModule` choosing the greedy action.

    Args:
        module: the network (``[*B, atoms, n]`` outputs, e.g. ``MLP(out_features=(atoms, n))``), or a
            TensorDict module writing ``action_value_key``.
        support: ``[atoms]`` the return of each atom.
        in_keys: what a plain network reads (default ``["observation"]``).
        spec, safe, var_nums, action_space, action_mask_key: as :class:`DistributionalQValueModule`.
        action_value_key: default ``"action_value"``.
        make_log_softmax: insert a :class:`DistributionalDQNnet` after ``module`` (default ``True``;
            skipped when ``module`` already is one).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import OneHot
        >>> from rl_objectives.modules import MLP, DistributionalQValueActor
        >>> actor = DistributionalQValueActor(MLP(3, out_features=(5, 4), num_cells=[16]),
        ...                                   support=torch.linspace(-1, 1, 5), spec=OneHot(4))
        >>> td = actor(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        >>> td["action"].shape, td["action_value"].shape
        (torch.Size([2, 4]), torch.Size([2, 5, 4]))
        >>> expected = (td["action_value"].exp() * actor.support[:, None]).sum(-2)
        >>> torch.equal(td["action"].long().argmax(-1), expected.argmax(-1))
        True
    """

    def __init__(
        self,
        module: Any,
        support: torch.Tensor,
        in_keys: Any = None,
        spec: Any = None,
        safe: bool = False,
        var_nums: Sequence[int] | None = None,
        action_space: str | None = None,
        action_value_key: NestedKey = "action_value",
        action_mask_key: NestedKey | None = None,
        make_log_softmax: bool = True,
    ) -> None:
        qvalue = DistributionalQValueModule(
            action_space=action_space,
            support=support,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=["action", action_value_key],
            var_nums=var_nums,
            spec=spec,
            safe=safe,
        )
        module = _action_value_network(module, action_value_key, in_keys, "DistributionalQValueActor")
        steps = [module]
        if make_log_softmax and not isinstance(module, DistributionalDQNnet):
            steps.append(DistributionalDQNnet(in_keys=[action_value_key], out_keys=[action_value_key]))
        TensorDictSequential.__init__(self, *steps, qvalue)  # (QValueActor's own __init__ builds a QValueModule)
        self.make_log_softmax = bool(make_log_softmax)
        self.action_space = qvalue.action_space
        self.action_value_key = action_value_key

    @property
    def support(self) -> torch.Tensor:
        """The atoms' returns (the :class:`DistributionalQValueModule`'s buffer)."""
        return self[-1].support


class DistributionalQValueHook:
    """A forward hook turning a network's distributional action values into ``(action, action_values)``
    (TorchRL's ``DistributionalQValueHook``).

    Register it with ``net.register_forward_hook(hook)``: the network's output ``[*B, atoms, n]``
    (log-probabilities over the atoms) is replaced by what :class:`DistributionalQValueModule`
    (``self.qvalue_model``) returns for it: the greedy action of the expected returns
    ``sum_j exp(log_p[j, a]) * support[j]`` and the action values themselves.

    Args:
        action_space: ``"one_hot"``, ``"categorical"`` or ``"mult_one_hot"`` (``-`` spellings accepted).
        support: ``[atoms]`` the return of each atom.
        var_nums: chunk sizes for ``"mult_one_hot"``.
        action_value_key / action_mask_key / out_keys: as :class:`DistributionalQValueModule`.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from rl_objectives.modules import DistributionalQValueHook
        >>> net = nn.Sequential(nn.Linear(4, 3 * 2), nn.Unflatten(-1, (3, 2)), nn.LogSoftmax(-2))
        >>> _ = net.register_forward_hook(DistributionalQValueHook("categorical", support=torch.arange(3.0)))
        >>> action, values = net(torch.randn(5, 4))
        >>> action.shape, values.shape
        (torch.Size([5]), torch.Size([5, 3, 2]))
    """

    def __init__(
        self,
        action_space: str,
        support: torch.Tensor,
        var_nums: Sequence[int] | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if not isinstance(action_space, str):
            raise TypeError(
                "DistributionalQValueHook: action_space must be a string ('one_hot', 'categorical', 'mult_one_hot'), "
                f"got {type(action_space).__name__} (specs are not accepted here, as in TorchRL)."
            )
        self.qvalue_model = DistributionalQValueModule(
            action_space=action_space.replace("-", "_"),
            support=support,
            var_nums=var_nums,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=out_keys,
        )
        key = self.qvalue_model.in_keys[0]
        self.action_value_key = "_".join(key) if isinstance(key, tuple) else key

    def __call__(self, net: torch.nn.Module, observation: Any, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.qvalue_model(**{self.action_value_key: values})


__all__ += ["DistributionalQValueHook"]
