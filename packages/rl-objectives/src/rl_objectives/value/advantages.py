"""The value estimators: GAE, TD(0), TD(1), TD(lambda), V-trace and the multi-agent GAE, as TensorDict
modules (and TorchRL's deprecated names ``TD0Estimate``, ``TD1Estimate``, ``TDLambdaEstimate``).

Each maps keys (see :class:`~rl_objectives.value.ValueEstimatorBase`) to one function of
:mod:`rl_objectives.functional`; the math lives there.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tdict.validation import check_positive

from ..functional import (
    generalized_advantage_estimate,
    td1_return_estimate,
    td_lambda_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_return_estimate,
    vtrace_advantage_estimate,
)
from ..functional.value import _td0_return
from .base import ValueEstimatorBase, ValueEstimators, _standardize
from .registry import register_value_estimator

_DISCOUNT = {"gamma": 0.99}
_DISCOUNT_AND_LAMBDA = {"gamma": 0.99, "lmbda": 0.95}

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimate",
    "TD0Estimator",
    "TD1Estimate",
    "TD1Estimator",
    "TDLambdaEstimate",
    "TDLambdaEstimator",
    "VTrace",
]

_Tensor = torch.Tensor


def _sum_to(x: _Tensor, ndim: int) -> _Tensor:
    return x.sum(tuple(range(ndim, x.ndim))) if x.ndim > ndim else x


class _TDBase(ValueEstimatorBase):
    """Shared by the TD estimators: the target needs only next values; optional reward averaging."""

    _target_needs_value = False

    def __init__(self, gamma: Any, value_network: Any, average_rewards: bool, **kwargs: Any) -> None:
        super().__init__(value_network=value_network, **kwargs)
        self._set_coefficient("gamma", gamma)
        self.average_rewards = bool(average_rewards)

    def _return(
        self,
        gamma: float | _Tensor,
        next_value: _Tensor,
        reward: _Tensor,
        done: _Tensor,
        terminated: _Tensor,
        time_dim: int,
    ) -> _Tensor:
        raise NotImplementedError

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        if self.average_rewards:
            # the stored rewards are left as they are (TorchRL writes the standardised ones back)
            reward = _standardize(reward, 1e-4, groups=self._group_ids(tensordict))
        gamma = self._step_discount(tensordict, reward)
        value_target = self._return(gamma, next_value, reward, done, terminated, time_dim)
        advantage = None if value is None else value_target - value
        return advantage, value_target


@register_value_estimator(ValueEstimators.TD0, default_kwargs=_DISCOUNT)
class TD0Estimator(_TDBase):
    """One-step TD target ``r_t + gamma * V(s_{t+1})`` (0 after termination); advantage = target - V(s_t).

    Args:
        gamma: discount (a number or a tensor broadcastable to the rollout's per-step shape).
        value_network: writes the value key, or ``None`` when values are in the TensorDict.
        average_rewards: standardise the rewards (over all elements) before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        **kwargs: the other :class:`ValueEstimatorBase` keyword arguments (``value_chunk_size``,
            ``num_chunks``, ``value_chunk_dim``, ``shifted_budget``, ``group_key``, ``device``,
            ``deactivate_vmap``, the deprecated ``advantage_key`` / ``value_target_key`` / ``value_key``).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.value import TD0Estimator
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])
        >>> td = TensorDict({"obs": torch.ones(2, 3, 4), "next": {"obs": torch.ones(2, 3, 4),
        ...     "reward": torch.ones(2, 3), "done": torch.zeros(2, 3, dtype=torch.bool)}}, batch_size=[2, 3])
        >>> td = TD0Estimator(gamma=0.5, value_network=critic)(td)
        >>> td["value_target"][0], td["advantage"][0]
        (tensor([3., 3., 3.]), tensor([-1., -1., -1.]))
    """

    recursive_in_time = False  # one step at a time: a shuffled, flattened batch gives the same targets

    def __init__(
        self,
        gamma: float | _Tensor,
        value_network: Any,
        average_rewards: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            gamma,
            value_network,
            average_rewards,
            differentiable=differentiable,
            skip_existing=skip_existing,
            shifted=shifted,
            time_dim=time_dim,
            **kwargs,
        )

    def _return(self, gamma, next_value, reward, done, terminated, time_dim):
        # the inputs were checked by _inputs / _check_shapes, gamma when it was set
        return _td0_return(gamma, next_value, reward, terminated)

    def target_from_next_value(self, tensordict: Any, next_value: _Tensor) -> _Tensor:
        """The target ``r + gamma * V'`` for a ``next_value`` computed by the caller (the off-policy
        losses' clipped double-Q, entropy bonus, ...): what :meth:`value_estimate` returns with
        ``next_value`` at ``("next", value)``, without writing it there or running a network.

        One step needs no time dim: ``tensordict`` may be any batch of transitions (at least one
        batch dim). Reward, done and terminated are read and checked as :meth:`value_estimate` does.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> from rl_objectives.value import TD0Estimator
            >>> td = TensorDict({"next": {"reward": torch.ones(2), "done": torch.tensor([False, True]),
            ...     "terminated": torch.tensor([False, True])}}, batch_size=[2])
            >>> TD0Estimator(gamma=0.5, value_network=None).target_from_next_value(td, torch.full((2,), 4.0))
            tensor([3., 1.])
        """
        keys = self.tensor_keys
        reward, done, terminated = self._inputs(tensordict, -1)
        if next_value.shape != reward.shape:
            self._check_shapes(
                [(("next", keys.reward), reward), (("next", keys.value), next_value)], tensordict.batch_size
            )
        with self._grad_context():
            return self._estimate(tensordict, None, next_value, reward, done, terminated, tensordict.batch_dims - 1)[1]


@register_value_estimator(ValueEstimators.TD1, default_kwargs=_DISCOUNT)
class TD1Estimator(_TDBase):
    """TD(1): the discounted return to the end of the trajectory, bootstrapped with V(s_{t+1}) where
    the data stops without a termination (a truncation, the end of the window).

    Args:
        gamma: discount.
        value_network: writes the value key, or ``None``.
        average_rewards: standardise the rewards before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        **kwargs: the other :class:`ValueEstimatorBase` keyword arguments (``value_chunk_size``,
            ``num_chunks``, ``value_chunk_dim``, ``shifted_budget``, ``group_key``, ``device``,
            ``deactivate_vmap``, the deprecated ``advantage_key`` / ``value_target_key`` / ``value_key``).
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.value import TD1Estimator
        >>> td = TensorDict({"state_value": torch.zeros(3), "next": {"state_value": torch.full((3,), 10.0),
        ...     "reward": torch.ones(3), "done": torch.tensor([False, False, True]),
        ...     "terminated": torch.tensor([False, False, True])}}, batch_size=[3])
        >>> TD1Estimator(gamma=0.5, value_network=None)(td)["value_target"]
        tensor([1.7500, 1.5000, 1.0000])
    """

    def __init__(
        self,
        gamma: float | _Tensor,
        value_network: Any,
        average_rewards: bool = False,
        differentiable: bool = False,
        vectorized: bool = True,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            gamma,
            value_network,
            average_rewards,
            differentiable=differentiable,
            skip_existing=skip_existing,
            shifted=shifted,
            time_dim=time_dim,
            **kwargs,
        )
        self.vectorized = bool(vectorized)

    def _return(self, gamma, next_value, reward, done, terminated, time_dim):
        fn = vec_td1_return_estimate if self.vectorized else td1_return_estimate
        return fn(gamma, next_value, reward, done, terminated, time_dim=time_dim)


@register_value_estimator(ValueEstimators.TDLambda, default_kwargs=_DISCOUNT_AND_LAMBDA)
class TDLambdaEstimator(_TDBase):
    """TD(lambda): the lambda-weighted mix of n-step returns (``lmbda=0`` is TD(0), ``1`` TD(1)).

    Args:
        gamma: discount.
        lmbda: the lambda weight (a number or a per-step tensor).
        value_network: writes the value key, or ``None``.
        average_rewards: standardise the rewards before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        **kwargs: the other :class:`ValueEstimatorBase` keyword arguments (``value_chunk_size``,
            ``num_chunks``, ``value_chunk_dim``, ``shifted_budget``, ``group_key``, ``device``,
            ``deactivate_vmap``, the deprecated ``advantage_key`` / ``value_target_key`` / ``value_key``).
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.value import TDLambdaEstimator
        >>> td = TensorDict({"state_value": torch.zeros(2), "next": {"state_value": torch.tensor([2.0, 4.0]),
        ...     "reward": torch.zeros(2), "done": torch.zeros(2, dtype=torch.bool)}}, batch_size=[2])
        >>> TDLambdaEstimator(gamma=1.0, lmbda=0.5, value_network=None)(td)["value_target"]
        tensor([3., 4.])
    """

    lmbda: float | torch.Tensor  # a float attribute or a buffer (_set_coefficient)

    def __init__(
        self,
        gamma: float | _Tensor,
        lmbda: float | _Tensor,
        value_network: Any,
        average_rewards: bool = False,
        differentiable: bool = False,
        vectorized: bool = True,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            gamma,
            value_network,
            average_rewards,
            differentiable=differentiable,
            skip_existing=skip_existing,
            shifted=shifted,
            time_dim=time_dim,
            **kwargs,
        )
        self._set_coefficient("lmbda", lmbda)
        self.vectorized = bool(vectorized)

    def _return(self, gamma, next_value, reward, done, terminated, time_dim):
        fn = vec_td_lambda_return_estimate if self.vectorized else td_lambda_return_estimate
        return fn(gamma, self.lmbda, next_value, reward, done, terminated, time_dim=time_dim)


@register_value_estimator(ValueEstimators.GAE, default_kwargs=_DISCOUNT_AND_LAMBDA)
class GAE(ValueEstimatorBase):
    """Generalized advantage estimate; the value target is ``advantage + V(s_t)``.

    Args:
        gamma: discount (a number or a per-step tensor).
        lmbda: the GAE lambda.
        value_network: writes the value key, or ``None`` when values are in the TensorDict.
        average_gae: standardise the written advantage (mean 0, std 1 over all its elements, or
            within the groups of ``group_key``; the value target is computed from the raw advantage).
        auto_reset_env: TorchRL's option for data whose ``("next", obs)`` after a truncation is
            already the reset observation: a truncated step (``("next", "truncated")``) bootstraps
            from its own ``V(s_t)`` (``r_t + gamma * V(s_t)``) and every done step ends the recursion.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        **kwargs: the other :class:`ValueEstimatorBase` keyword arguments (``value_chunk_size``,
            ``num_chunks``, ``value_chunk_dim``, ``shifted_budget``, ``group_key``, ``device``,
            ``deactivate_vmap``, the deprecated ``advantage_key`` / ``value_target_key`` / ``value_key``).
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.value import GAE
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])
        >>> td = TensorDict({"obs": torch.zeros(2, 3, 4), "next": {"obs": torch.zeros(2, 3, 4),
        ...     "reward": torch.ones(2, 3), "done": torch.zeros(2, 3, dtype=torch.bool)}},
        ...     batch_size=[2, 3], names=[None, "time"])
        >>> td = GAE(gamma=0.5, lmbda=1.0, value_network=critic)(td)
        >>> td["advantage"][0]
        tensor([1.7500, 1.5000, 1.0000])
    """

    lmbda: float | torch.Tensor  # a float attribute or a buffer (_set_coefficient)

    def __init__(
        self,
        gamma: float | _Tensor,
        lmbda: float | _Tensor,
        value_network: Any,
        average_gae: bool = False,
        differentiable: bool = False,
        vectorized: bool = True,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        auto_reset_env: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            value_network=value_network,
            differentiable=differentiable,
            skip_existing=skip_existing,
            shifted=shifted,
            time_dim=time_dim,
            **kwargs,
        )
        if not isinstance(auto_reset_env, bool):
            raise TypeError(
                f"{type(self).__name__}: auto_reset_env must be a bool, got {type(auto_reset_env).__name__}."
            )
        self._set_coefficient("gamma", gamma)
        self._set_coefficient("lmbda", lmbda)
        self.average_gae = bool(average_gae)
        self.vectorized = bool(vectorized)
        self.auto_reset_env = auto_reset_env

    def _auto_reset(
        self, tensordict: Any, gamma: float | _Tensor, value: _Tensor, reward: _Tensor, done: _Tensor
    ) -> tuple[_Tensor, _Tensor]:
        """TorchRL's ``auto_reset_env``: the next observation after a truncation is the reset one, so
        a truncated step bootstraps from ``V(s_t)`` (added to its reward) and every ``done`` ends the
        recursion like a termination."""
        truncated = self._read(tensordict, ("next", "truncated"), "('next', 'truncated') (auto_reset_env reads it)")
        truncated = self._to_feature_shape(truncated, value.shape, tensordict.batch_size)
        self._check_shapes([(self.tensor_keys.value, value), (("next", "truncated"), truncated)], tensordict.batch_size)
        return reward + gamma * value * truncated.to(value.dtype), done

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        fn = vec_generalized_advantage_estimate if self.vectorized else generalized_advantage_estimate
        assert value is not None  # GAE needs V(s_t) (_target_needs_value)
        gamma = self._step_discount(tensordict, reward)
        if self.auto_reset_env:
            reward, terminated = self._auto_reset(tensordict, gamma, value, reward, done)
        advantage, value_target = fn(gamma, self.lmbda, value, next_value, reward, done, terminated, time_dim=time_dim)
        if self.average_gae:
            advantage = self._standardize_advantage(advantage, tensordict)
        return advantage, value_target

    def _standardize_advantage(self, advantage: _Tensor, tensordict: Any) -> _Tensor:
        return _standardize(advantage, 1e-5, groups=self._group_ids(tensordict))


@register_value_estimator(ValueEstimators.VTrace, default_kwargs=_DISCOUNT)
class VTrace(ValueEstimatorBase):
    """V-trace (IMPALA) value targets and policy-gradient advantages for off-policy data.

    The behaviour policy's log-prob is read from the ``sample_log_prob`` key (``"action_log_prob"``,
    as the collector's policy wrote it, batch-shaped; a list of per-head keys is summed). The
    current policy's log-prob is ``actor_network.log_prob(td)``, which
    :class:`tdict.nn.ProbabilisticTensorDictModule` and
    :class:`tdict.nn.ProbabilisticTensorDictSequential` provide (batch-shaped: summed over the
    action's event dims; a composite policy's per-head log-probs are summed); it runs on a shallow
    copy, so the actor's intermediate outputs (``loc``, ``scale``, ...) are not written into the
    input. With ``differentiable=True`` the actor is held out of the graph like the value network.

    Args:
        gamma: discount.
        actor_network: the policy being learnt; anything with ``log_prob(tensordict) -> Tensor``.
        value_network: writes the value key, or ``None``.
        rho_thresh: clipping of the importance ratios (rho-bar).
        c_thresh: clipping of the trace coefficients (c-bar).
        average_adv: standardise the written advantage.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        **kwargs: the other :class:`ValueEstimatorBase` keyword arguments (``value_chunk_size``,
            ``num_chunks``, ``value_chunk_dim``, ``shifted_budget``, ``group_key``, ``device``,
            ``deactivate_vmap``, the deprecated ``advantage_key`` / ``value_target_key`` / ``value_key``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import ProbabilisticTensorDictModule
        >>> from rl_objectives.value import VTrace
        >>> actor = ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                       return_log_prob=True)
        >>> td = TensorDict({"loc": torch.zeros(4, 1), "scale": torch.ones(4, 1),
        ...     "state_value": torch.zeros(4),
        ...     "next": {"state_value": torch.ones(4), "reward": torch.ones(4),
        ...              "done": torch.zeros(4, dtype=torch.bool)}}, batch_size=[4])
        >>> td = actor(td)  # on-policy: the ratios are 1
        >>> td = VTrace(gamma=0.5, actor_network=actor, value_network=None)(td)
        >>> td["value_target"]
        tensor([2.8125, 2.6250, 2.2500, 1.5000])
    """

    actor_network: ProbabilisticTensorDictModule | ProbabilisticTensorDictSequential  # in __dict__, owned by the loss

    def __init__(
        self,
        gamma: float | _Tensor,
        actor_network: Any,
        value_network: Any,
        rho_thresh: float = 1.0,
        c_thresh: float = 1.0,
        average_adv: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            value_network=value_network,
            differentiable=differentiable,
            skip_existing=skip_existing,
            shifted=shifted,
            time_dim=time_dim,
            **kwargs,
        )
        if not callable(getattr(actor_network, "log_prob", None)):
            raise TypeError(
                f"VTrace: actor_network must have a log_prob(tensordict) method (e.g. a ProbabilisticTensorDictModule "
                f"or ProbabilisticTensorDictSequential), got {type(actor_network).__name__}."
            )
        check_positive("VTrace", "rho_thresh", rho_thresh)
        check_positive("VTrace", "c_thresh", c_thresh)
        self.__dict__["actor_network"] = actor_network  # owned by the loss, like value_network
        self._set_coefficient("gamma", gamma)
        self.rho_thresh = float(rho_thresh)
        self.c_thresh = float(c_thresh)
        self.average_adv = bool(average_adv)

    @property
    def in_keys(self) -> list:
        keys = super().in_keys
        lp = self.tensor_keys.sample_log_prob
        return (
            keys
            + (lp if isinstance(lp, list) else [lp])
            + [key for key in self.actor_network.in_keys if key not in keys]
        )

    def _behaviour_log_prob(self, tensordict: Any) -> _Tensor:
        key = self.tensor_keys.sample_log_prob
        if not isinstance(key, list):
            return self._read(tensordict, key, f"{key!r} (the behaviour policy's log-prob)")
        heads = [self._read(tensordict, k, f"{k!r} (the behaviour policy's log-prob of a head)") for k in key]
        return cast(_Tensor, sum(_sum_to(h, tensordict.batch_dims) for h in heads))  # (a sum of the heads' tensors)

    def _current_log_prob(self, tensordict: Any) -> _Tensor:
        actor = self.actor_network
        if self.differentiable and isinstance(actor, torch.nn.Module):
            # held out of the graph like the value network: no gradient into the actor's parameters
            with TensorDict.from_module(actor).detach().to_module(actor, preserve_module_state=False):
                log_pi = actor.log_prob(tensordict.copy())
        else:
            log_pi = actor.log_prob(tensordict.copy())
        if getattr(type(log_pi), "_is_tensor_collection", False):  # a composite policy: one entry per head
            log_pi = log_pi.sum(dim="feature", reduce=True)
        return log_pi

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        key = self.tensor_keys.sample_log_prob
        assert value is not None  # V-trace needs V(s_t) (_target_needs_value)
        log_mu = self._behaviour_log_prob(tensordict)
        log_pi = self._current_log_prob(tensordict)
        batch = tensordict.batch_size
        log_mu = self._to_feature_shape(log_mu, value.shape, batch)
        log_pi = self._to_feature_shape(log_pi, value.shape, batch)
        self._check_shapes(
            [(self.tensor_keys.value, value), (key, log_mu), ("actor_network.log_prob(td)", log_pi)], batch
        )
        advantage, value_target = vtrace_advantage_estimate(
            self.gamma,
            log_pi,
            log_mu,
            value,
            next_value,
            reward,
            done,
            terminated,
            self.rho_thresh,
            self.c_thresh,
            time_dim=time_dim,
        )
        if self.average_adv:
            advantage = _standardize(advantage, 1e-5, groups=self._group_ids(tensordict))
        return advantage, value_target


@register_value_estimator(ValueEstimators.MAGAE, default_kwargs=_DISCOUNT_AND_LAMBDA)
class MultiAgentGAE(GAE):
    """GAE for per-agent values with a team reward (TorchRL's ``MultiAgentGAE``).

    The values have an agent dim (``("agents", "state_value")`` of shape ``[*B, T, n_agents]``)
    while the reward, done and terminated may be shared by the team (``[*B, T]``): those are
    broadcast along ``agent_dim`` before the GAE recursion; per-agent ones (same shape as the
    values) pass through. With ``average_gae`` the advantage is standardised per agent.

    Args:
        agent_dim: the agent dim of the value tensor. Default ``-1``: values carry no trailing
            singleton dim here (TorchRL's default ``-2`` points at the agent dim of ``[*B, T, n_agents, 1]``).
        **kwargs: as :class:`GAE`.

    Raises:
        ValueError: at call, when a team signal has neither the values' number of dims nor one less.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.value import MultiAgentGAE
        >>> td = TensorDict({"agents": TensorDict(state_value=torch.zeros(2, 3), batch_size=[2]),
        ...     "next": {"agents": TensorDict(state_value=torch.zeros(2, 3), batch_size=[2]),
        ...              "reward": torch.ones(2), "done": torch.zeros(2, dtype=torch.bool)}}, batch_size=[2])
        >>> est = MultiAgentGAE(gamma=1.0, lmbda=1.0, value_network=None).set_keys(value=("agents", "state_value"))
        >>> est(td)["advantage"]
        tensor([[2., 2., 2.],
                [1., 1., 1.]])
    """

    def __init__(self, *, agent_dim: int = -1, **kwargs: Any) -> None:
        if isinstance(agent_dim, bool) or not isinstance(agent_dim, int):
            raise TypeError(f"MultiAgentGAE: agent_dim must be an int, got {type(agent_dim).__name__}.")
        super().__init__(**kwargs)
        self.agent_dim = agent_dim

    def _broadcast(self, name: str, signal: _Tensor, value: _Tensor) -> _Tensor:
        if signal.ndim == value.ndim:
            return signal
        if signal.ndim != value.ndim - 1:
            raise ValueError(
                f"MultiAgentGAE: {name} of shape {tuple(signal.shape)} must have the values' shape {tuple(value.shape)} "
                f"(per agent) or that shape without the agent dim {self.agent_dim} (shared by the team)."
            )
        dim = self.agent_dim % value.ndim
        return signal.unsqueeze(dim).expand(value.shape)

    def _prepare_signals(self, reward, done, terminated, value):
        return tuple(
            self._broadcast(name, x, value)
            for name, x in (("reward", reward), ("done", done), ("terminated", terminated))
        )

    def _standardize_advantage(self, advantage: _Tensor, tensordict: Any) -> _Tensor:
        # per agent: a high-variance agent is not flattened by the others
        return _standardize(advantage, 1e-4, keep_dim=self.agent_dim, groups=self._group_ids(tensordict))


def _deprecated_name(old: str, new: type) -> type:
    """A subclass under TorchRL's old name that warns when built (TorchRL 0.14 keeps these names)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(f"{old} is deprecated, use {new.__name__} instead.", DeprecationWarning, stacklevel=2)
        new.__init__(self, *args, **kwargs)

    return type(
        old,
        (new,),
        {"__init__": __init__, "__doc__": f"Deprecated name of :class:`{new.__name__}`.", "__module__": __name__},
    )


TD0Estimate = _deprecated_name("TD0Estimate", TD0Estimator)
TD1Estimate = _deprecated_name("TD1Estimate", TD1Estimator)
TDLambdaEstimate = _deprecated_name("TDLambdaEstimate", TDLambdaEstimator)
