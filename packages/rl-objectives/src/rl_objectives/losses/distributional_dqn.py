"""DistributionalDQNLoss: C51 (Bellemare et al. 2017) on a replay batch, with a target network.

The online network's log-probabilities over the atoms for the taken action, ``log p(s, a)``, are
fitted by cross-entropy to the target distribution: the next state's distribution for the greedy
action ``a* = argmax_a E[Z(s', a)]`` (chosen by the online network, its distribution from the target
network, as TorchRL's loss does), shifted to ``r + gamma^n (1 - terminated) z`` and projected back
onto the support (:func:`~rl_objectives.functional.categorical_projection`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.validation import check_unit_interval

from ..functional.distributional import categorical_projection, distributional_cross_entropy
from ..functional.dqn import chosen_action_value
from ._actions import check_discrete_action, resolve_action_space
from .common import LossModule
from .utils import _check_batch_shaped, _check_prioritized, _check_reduction, _get, _reduce

__all__ = ["DistributionalDQNLoss"]

_OWNER = "DistributionalDQNLoss"


def _find_support(network: Any) -> torch.Tensor:
    """The ``support`` buffer of the network's distributional Q-value module."""
    for module in network.modules():
        support = module._buffers.get("support") if hasattr(module, "_buffers") else None
        if isinstance(support, torch.Tensor):
            return support
    raise ValueError(
        f"{_OWNER}: the value network has no 'support' buffer; use a DistributionalQValueActor (or end the network "
        "with a DistributionalQValueModule)."
    )


class DistributionalDQNLoss(LossModule):
    """The distributional DQN (C51) loss (TorchRL's ``DistributionalDQNLoss``).

    Args:
        value_network: a :class:`~rl_objectives.modules.DistributionalQValueActor` (or a sequence
            ending in a :class:`~rl_objectives.modules.DistributionalQValueModule`) writing
            ``"action_value"`` (``[*B, atoms, n]`` log-probabilities) and the greedy ``"action"``.

    Keyword Args:
        gamma: the discount (required, as in TorchRL); a buffer, schedulable with ``loss.gamma = 0.95``.
        delay_value: keep target parameters for the next state's distribution (default ``True``);
            update them with :class:`~rl_objectives.HardUpdate` / :class:`~rl_objectives.SoftUpdate`.
            Without it the online parameters are used, detached. The next action is always the online
            network's greedy one (double DQN, as TorchRL).
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample losses).
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (a prioritized buffer's importance weights) the loss is
            ``sum(w * l) / sum(w)`` (``"sum"``: ``sum(w * l)``, ``"none"``: ``w * l``); ``False``
            ignores them.

    Reads ``"action"`` (an index ``[*B]``, or one-hot ``[*B, n]``), the network's in-keys,
    ``"steps_to_next_obs"`` when present (the discount becomes ``gamma ** steps``), and
    ``("next", ...)``: the next observation, ``"reward"`` and ``"terminated"`` (``"done"`` when
    ``"terminated"`` is missing), batch-shaped. Returns a TensorDict with ``"loss"``, and writes
    the detached per-sample cross-entropy at ``"td_error"`` (the ``priority`` key) for prioritized
    replay (batch-shaped, as :class:`~rl_objectives.DQNLoss`; TorchRL's has a trailing 1).

    The support must be evenly spaced and increasing. Only TD(0) is supported
    (``make_value_estimator`` accepts ``ValueEstimators.TD0`` and ``gamma=``), as in TorchRL.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Categorical
        >>> from rl_objectives import DistributionalDQNLoss
        >>> from rl_objectives.modules import MLP, DistributionalQValueActor
        >>> actor = DistributionalQValueActor(MLP(3, out_features=(11, 2), num_cells=[16]),
        ...                                   support=torch.linspace(-5, 5, 11), spec=Categorical(2))
        >>> loss = DistributionalDQNLoss(actor, gamma=0.9)
        >>> td = TensorDict({"observation": torch.randn(4, 3), "action": torch.randint(2, (4,)),
        ...     "next": {"observation": torch.randn(4, 3), "reward": torch.randn(4),
        ...              "done": torch.zeros(4, dtype=torch.bool), "terminated": torch.zeros(4, dtype=torch.bool)}},
        ...     batch_size=[4])
        >>> out = loss(td)
        >>> out["loss"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([4]))
    """

    default_keys: ClassVar[dict] = {
        "action_value": "action_value",
        "action": "action",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "steps_to_next_obs": "steps_to_next_obs",
        "priority_weight": "priority_weight",
    }
    out_keys: ClassVar[list] = ["loss"]
    default_value_estimator = "TD(0)"
    _schedulable_buffers = frozenset({"gamma"})
    gamma: torch.Tensor

    def __init__(
        self,
        value_network: Any,
        *,
        gamma: float,
        delay_value: bool = True,
        priority_key: Any = None,
        reduction: str | None = None,
        use_prioritized_weights: bool | str = "auto",
    ) -> None:
        reduction = "mean" if reduction is None else reduction
        _check_reduction(_OWNER, reduction)
        _check_prioritized(_OWNER, use_prioritized_weights)
        check_unit_interval(_OWNER, "gamma", gamma)
        super().__init__()
        self.reduction = reduction
        self.use_prioritized_weights = use_prioritized_weights
        self.delay_value = bool(delay_value)
        self.register_buffer("gamma", torch.tensor(float(gamma)))
        self._set_deprecated_ctor_args(priority_key=priority_key)
        support = _find_support(value_network)
        steps = support.diff()
        if support.ndim != 1 or support.numel() < 2 or not bool((steps > 0).all()):
            raise ValueError(f"{_OWNER}: the support must be 1-d, increasing, with 2 atoms or more; got {support}.")
        if not torch.allclose(steps, steps[0].expand_as(steps), rtol=1e-4, atol=1e-6):
            raise ValueError(f"{_OWNER}: the support must be evenly spaced (the projection assumes it); got {support}.")
        self.action_space = resolve_action_space(_OWNER, None, self.default_keys["action"], network=value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=self.delay_value)
        # the module holding the support (kept out of the loss's submodules: it is part of value_network)
        self.__dict__["_support_holder"] = next(
            m for m in self.value_network.modules() if isinstance(m._buffers.get("support"), torch.Tensor)
        )

    def _check_hyperparameter(self, name: str, value: float) -> None:
        if name == "gamma":
            check_unit_interval(_OWNER, "gamma", value)

    # ------------------------------------------------------------------ value estimator
    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> DistributionalDQNLoss:
        """Only TD(0) (computed in ``forward``, no estimator object, as TorchRL); ``gamma=`` sets the discount."""
        from ..value import ValueEstimators  # local: keeps the import graph as the other losses'

        value_type = self._resolve_value_type(value_type)
        if value_type is not ValueEstimators.TD0:
            raise NotImplementedError(
                f"{_OWNER}: value_type {value_type.value!r} is not implemented; only TD(0) is (as in TorchRL)."
            )
        unknown = sorted(set(hyperparams) - {"gamma"})
        if unknown:
            raise ValueError(f"{_OWNER}.make_value_estimator: unexpected hyper-parameters {unknown}; only gamma.")
        if "gamma" in hyperparams:
            self.gamma = hyperparams["gamma"]
        self.value_type = value_type
        return self

    # ------------------------------------------------------------------ helpers
    def _action_index_space(self, action: torch.Tensor, batch: torch.Size, n: int, key: Any) -> tuple:
        """``(action, space)`` checked against ``[*batch, n]`` action values (an index ``[*batch, 1]`` is squeezed)."""
        if self.action_space == "categorical" and action.shape == batch + (1,) and n != 1:
            action = action.squeeze(-1)
        return action, check_discrete_action(_OWNER, self.action_space, action, batch + (n,), key)

    def _pick(self, values: torch.Tensor, action: torch.Tensor, space: str) -> torch.Tensor:
        """``[*B, atoms, n]`` -> ``[*B, atoms]``: each atom's entry of the action."""
        return chosen_action_value(values.movedim(-2, 0), action, space).movedim(0, -1)

    def _priority_weight(self, tensordict: Any) -> torch.Tensor | None:
        if self.use_prioritized_weights is False:
            return None
        key = self.tensor_keys.priority_weight
        weights = tensordict.get(key, None)
        if weights is not None:
            _check_batch_shaped(_OWNER, {key: weights}, tensordict.batch_size)
        return weights

    # ------------------------------------------------------------------ forward
    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        support = self._support_holder._buffers["support"]
        atoms = support.shape[-1]
        action = _get(_OWNER, tensordict, keys.action)
        next_td = _get(_OWNER, tensordict, "next")
        reward = _get(_OWNER, next_td, keys.reward)
        terminated = next_td.get(keys.terminated, None)
        if terminated is None:
            terminated = _get(_OWNER, next_td, keys.done)
        _check_batch_shaped(_OWNER, {("next", keys.reward): reward, ("next", keys.terminated): terminated}, batch)
        steps = tensordict.get(keys.steps_to_next_obs, None)
        gamma = self.gamma.to(reward.dtype)
        if steps is not None:
            _check_batch_shaped(_OWNER, {keys.steps_to_next_obs: steps}, batch)
            gamma = gamma**steps
        discount = gamma * (~terminated.bool()).to(reward.dtype)

        online = self.call_network("value_network", tensordict.copy())
        log_p = _get(_OWNER, online, keys.action_value)
        if log_p.shape[: len(batch)] != batch or log_p.ndim != len(batch) + 2 or log_p.shape[-2] != atoms:
            raise ValueError(
                f"{_OWNER}: {keys.action_value!r} has shape {tuple(log_p.shape)}, expected the batch shape {tuple(batch)} "
                f"plus (atoms={atoms}, n_actions)."
            )
        n_actions = log_p.shape[-1]
        action, space = self._action_index_space(action, batch, n_actions, keys.action)
        log_p_taken = self._pick(log_p, action, space)  # [*B, atoms]

        with torch.no_grad():
            greedy = self.call_network("value_network", next_td.copy())
            if self.delay_value:
                next_log_p = _get(
                    _OWNER, self.call_network("value_network", next_td.copy(), target=True), keys.action_value
                )
            else:
                next_log_p = _get(_OWNER, greedy, keys.action_value)
            next_action, next_space = self._action_index_space(
                _get(_OWNER, greedy, keys.action), batch, n_actions, ("next", keys.action)
            )
            next_probs = self._pick(next_log_p.exp(), next_action, next_space)
            target = categorical_projection(next_probs, reward, discount, support.to(reward.dtype))

        loss = distributional_cross_entropy(target, log_p_taken)
        tensordict.set(keys.priority, loss.detach())
        return TensorDict(loss=_reduce(loss, self.reduction, self._priority_weight(tensordict)))
