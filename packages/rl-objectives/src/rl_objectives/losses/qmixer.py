"""QMixerLoss: QMIX / VDN, Q-learning on a mixed team value.

Each agent's network gives its action values; the values of the taken actions are mixed into one
team value ``Q_tot(s, a) = mixer(Q_1(s, a_1), ..., Q_n(s, a_n); state)`` (a
:class:`~rl_objectives.modules.multiagent.QMixer` or
:class:`~rl_objectives.modules.multiagent.VDNMixer`), which is regressed, as in DQN, onto
``r + gamma * (1 - terminated) * mixer_target(max_a Q_target_1(s', a), ..., max_a Q_target_n(s', a); state')``.
The arithmetic is :mod:`rl_objectives.functional.dqn`'s; this module maps keys and runs the networks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict.nn import TensorDictModuleBase
from tdict import TensorDict

from ..functional.dqn import chosen_action_value, greedy_value, squared_td_error, td_loss
from ._actions import check_discrete_action, resolve_action_space
from .common import LossModule
from .utils import (
    _check_batch_shaped,
    _check_loss_function,
    _check_reduction,
    _get,
    _make_bootstrapped_estimator,
    _reduce,
    bootstrap_target,
)

__all__ = ["QMixerLoss"]


class QMixerLoss(LossModule):
    """The QMIX loss (TorchRL's ``QMixerLoss``); with a :class:`VDNMixer` it is VDN.

    Args:
        local_value_network: the agents' Q-network, e.g. ``TensorDictModule(MultiAgentMLP(...),
            in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")])`` followed by a
            ``QValueModule(action_value_key=("agents", "action_value"), out_keys=[("agents", "action"),
            ("agents", "action_value"), ("agents", "chosen_action_value")], ...)``. It writes the action
            values ``[*B, n_agents, n_actions]``.
        mixer_network: reads the agents' chosen values ``[*B, n_agents]`` (and the global state) and
            writes the team value ``[*B]`` (a :class:`~rl_objectives.modules.multiagent.Mixer`).

    Keyword Args:
        loss_function: ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        delay_value: keep target copies of both networks (default ``True``), moved with
            :class:`~rl_objectives.SoftUpdate` / :class:`~rl_objectives.HardUpdate`; without them the
            online parameters bootstrap, detached.
        action_space: ``"one_hot"`` or ``"categorical"``, or an action spec; default: the local
            network's (a ``QValueModule``'s ``action_space``, or its ``spec``), else decided per call
            from the action's shape (``[*B, n_agents]``: indices; ``[*B, n_agents, n_actions]``: one-hot).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample losses ``[*B]``).
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Keys (``set_keys``), for a batch ``[*B]`` whose agent entries sit in a sub-TensorDict ``"agents"``
    of batch ``[*B, n_agents]`` (TorchRL's multi-agent layout):

    ========================  ===================================  ==========================
    name                      default                              shape
    ========================  ===================================  ==========================
    ``action``                ``("agents", "action")``             ``[*B, n_agents(, n_actions)]``
    ``action_value``          ``("agents", "action_value")``       ``[*B, n_agents, n_actions]``
    ``local_value``           ``("agents", "chosen_action_value")``  ``[*B, n_agents]``
    ``global_value``          ``"chosen_action_value"``             ``[*B]``
    ``reward``                ``"reward"`` (read under ``"next"``)  ``[*B]`` (team reward)
    ``done``, ``terminated``  ``"done"``, ``"terminated"`` (under ``"next"``)  ``[*B]``
    ``priority``              ``"td_error"`` (written)              ``[*B]``
    ``advantage``, ``value_target``  as in DQN (estimator keys)
    ========================  ===================================  ==========================

    The mixer reads the global state (``"state"`` by default) at the root and under ``"next"``.
    ``local_value`` is where the agents' chosen values are put for the mixer, so it must be the
    mixer's first in-key; when the local network writes it (a ``QValueModule`` does: the greedy
    action's value, which respects action masks) the bootstrap uses that, else the max over
    ``action_value``. Returns a TensorDict with ``"loss"``; writes the detached squared TD error
    into the input at ``priority`` and nothing else there.

    The target comes from the value estimator (TD(0) by default, ``gamma=0.99``); change it with
    ``make_value_estimator(ValueEstimators.TDLambda, gamma=..., lmbda=...)``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.losses.qmixer import QMixerLoss
        >>> from rl_objectives.modules import QValueModule
        >>> from rl_objectives.modules.multiagent import MultiAgentMLP, QMixer
        >>> from tdict.nn import TensorDictSequential
        >>> local = TensorDictSequential(
        ...     TensorDictModule(MultiAgentMLP(4, 3, n_agents=2, share_params=False, depth=1, num_cells=8),
        ...                      in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")]),
        ...     QValueModule(action_space="categorical", action_value_key=("agents", "action_value"),
        ...                  out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")]))
        >>> loss = QMixerLoss(local, QMixer(state_shape=(5,), mixing_embed_dim=8, n_agents=2))
        >>> agents = lambda: TensorDict(observation=torch.randn(6, 2, 4), batch_size=[6, 2])
        >>> td = TensorDict({"agents": agents(), "state": torch.randn(6, 5),
        ...     "next": {"agents": agents(), "state": torch.randn(6, 5), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> td["agents", "action"] = torch.randint(3, (6, 2))
        >>> out = loss(td)
        >>> out["loss"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([6]))
    """

    local_value_network: TensorDictModuleBase  # set by convert_to_functional

    default_keys: ClassVar[dict] = {
        "advantage": "advantage",
        "value_target": "value_target",
        "local_value": ("agents", "chosen_action_value"),
        "global_value": "chosen_action_value",
        "action_value": ("agents", "action_value"),
        "action": ("agents", "action"),
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    default_value_estimator = "TD(0)"
    default_value_kwargs: ClassVar[dict] = {"gamma": 0.99, "lmbda": 0.95}
    out_keys: ClassVar[list] = ["loss"]

    def __init__(
        self,
        local_value_network: Any,
        mixer_network: Any,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        action_space: Any = None,
        reduction: str | None = "mean",
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        super().__init__()
        self.loss_function = _check_loss_function("QMixerLoss", loss_function)
        self.reduction = _check_reduction("QMixerLoss", "mean" if reduction is None else reduction)
        self._set_deprecated_ctor_args(gamma=gamma, priority_key=priority_key)
        for name, net in (("local_value_network", local_value_network), ("mixer_network", mixer_network)):
            if not hasattr(net, "in_keys") or not hasattr(net, "out_keys"):
                raise TypeError(
                    f"QMixerLoss: {name} must be a TensorDict module (with in_keys and out_keys), got {type(net).__name__}."
                )
        self.action_space = resolve_action_space(
            "QMixerLoss", action_space, self.default_keys["action"], network=local_value_network
        )
        self.delay_value = bool(delay_value)
        self.convert_to_functional(local_value_network, "local_value_network", create_target_params=self.delay_value)
        self.convert_to_functional(mixer_network, "mixer_network", create_target_params=self.delay_value)

    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> QMixerLoss:
        """Build the bootstrapped estimator: TD(0) (default), TD(1) or TD(lambda); GAE raises."""
        _make_bootstrapped_estimator(self, value_type, hyperparams)
        return self

    # ------------------------------------------------------------------ helpers
    def _action_values(self, td: Any, batch: torch.Size, where: str) -> torch.Tensor:
        key = self.tensor_keys.action_value
        values = _get("QMixerLoss", td, key)
        if values.ndim != len(batch) + 2 or values.shape[: len(batch)] != batch:
            raise ValueError(
                f"QMixerLoss: {where} {key!r} has shape {tuple(values.shape)}, expected the batch shape {tuple(batch)} "
                "then the agents and the actions ([*B, n_agents, n_actions])."
            )
        return values

    def _mix(self, td: Any, local: torch.Tensor, batch: torch.Size, target: bool) -> torch.Tensor:
        """The mixer's team value for the agents' values ``local``, set at ``local_value`` in ``td``."""
        keys = self.tensor_keys
        td.set(keys.local_value, local)
        out = self.call_network("mixer_network", td, target=target)
        value = _get("QMixerLoss", out, keys.global_value)
        _check_batch_shaped("QMixerLoss", {keys.global_value: value}, batch)
        return value

    # ------------------------------------------------------------------ loss
    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("QMixerLoss", tensordict, keys.action)
        next_td = _get("QMixerLoss", tensordict, "next")
        estimator = self.value_estimator

        # the networks write into a shallow copy: the caller's entries stay as they are
        work = self.call_network("local_value_network", tensordict.copy())
        action_value = self._action_values(work, batch, "the local network's")
        space = check_discrete_action("QMixerLoss", self.action_space, action, action_value.shape, keys.action)
        local = chosen_action_value(action_value, action, space)
        pred = self._mix(work, local, batch, target=False)

        with torch.no_grad():
            next_work = self.call_network("local_value_network", next_td.copy(), target=self.delay_value)
            next_values = self._action_values(next_work, batch, "the target local network's")
            if keys.local_value in self.local_value_network.out_keys:
                next_local = _get("QMixerLoss", next_work, keys.local_value)
                if next_local.shape != next_values.shape[:-1]:
                    raise ValueError(
                        f"QMixerLoss: the local network's {keys.local_value!r} has shape {tuple(next_local.shape)}, expected "
                        f"{tuple(next_values.shape[:-1])} ([*B, n_agents], no trailing singleton dim)."
                    )
            else:
                next_local = greedy_value(next_values)
            next_value = self._mix(next_work, next_local, batch, target=self.delay_value)
            target = bootstrap_target(estimator, tensordict, next_value)
        _check_batch_shaped("QMixerLoss", {"value_target": target}, batch)

        tensordict.set(keys.priority, squared_td_error(pred, target))
        loss = _reduce(td_loss(pred, target, self.loss_function), self.reduction)
        return TensorDict(loss=loss)
