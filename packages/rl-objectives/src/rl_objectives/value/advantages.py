"""The value estimators: GAE, TD(0), TD(1), TD(lambda) and V-trace, as TensorDict modules.

Each maps keys (see :class:`~rl_objectives.value.ValueEstimatorBase`) to one function of
:mod:`rl_objectives.functional`; the math lives there.
"""
from __future__ import annotations

from typing import Any

import torch

from ..functional import (
    generalized_advantage_estimate,
    td0_return_estimate,
    td1_return_estimate,
    td_lambda_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_return_estimate,
    vtrace_advantage_estimate,
)
from .base import ValueEstimatorBase

__all__ = ["GAE", "TD0Estimator", "TD1Estimator", "TDLambdaEstimator", "VTrace"]

_Tensor = torch.Tensor


def _set_coefficient(module: torch.nn.Module, name: str, value: Any) -> None:
    """A float attribute, or a registered buffer for a tensor (so ``.to(device)`` moves it)."""
    if isinstance(value, _Tensor):
        module.register_buffer(name, value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        setattr(module, name, float(value))
    else:
        raise TypeError(f"{type(module).__name__}: {name} must be a number or a tensor, got {type(value).__name__}.")


def _standardize(x: _Tensor, eps: float) -> _Tensor:
    return (x - x.mean()) / x.std().clamp_min(eps)


class _TDBase(ValueEstimatorBase):
    """Shared by the TD estimators: the target needs only next values; optional reward averaging."""

    _target_needs_value = False

    def __init__(self, gamma: Any, value_network: Any, average_rewards: bool, **kwargs: Any) -> None:
        super().__init__(value_network=value_network, **kwargs)
        _set_coefficient(self, "gamma", gamma)
        self.average_rewards = bool(average_rewards)

    def _return(self, next_value: _Tensor, reward: _Tensor, done: _Tensor, terminated: _Tensor, time_dim: int) -> _Tensor:
        raise NotImplementedError

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        if self.average_rewards:
            # the stored rewards are left as they are (TorchRL writes the standardised ones back)
            reward = _standardize(reward, 1e-4)
        value_target = self._return(next_value, reward, done, terminated, time_dim)
        advantage = None if value is None else value_target - value
        return advantage, value_target


class TD0Estimator(_TDBase):
    """One-step TD target ``r_t + gamma * V(s_{t+1})`` (0 after termination); advantage = target - V(s_t).

    Args:
        gamma: discount (a number or a tensor broadcastable to the rollout's per-step shape).
        value_network: writes the value key, or ``None`` when values are in the TensorDict.
        average_rewards: standardise the rewards (over all elements) before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.

    Example:
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

    def __init__(
        self,
        gamma: float | _Tensor,
        value_network: Any,
        average_rewards: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
    ) -> None:
        super().__init__(gamma, value_network, average_rewards, differentiable=differentiable,
                         skip_existing=skip_existing, shifted=shifted, time_dim=time_dim)

    def _return(self, next_value, reward, done, terminated, time_dim):
        return td0_return_estimate(self.gamma, next_value, reward, terminated, time_dim=time_dim)


class TD1Estimator(_TDBase):
    """TD(1): the discounted return to the end of the trajectory, bootstrapped with V(s_{t+1}) where
    the data stops without a termination (a truncation, the end of the window).

    Args:
        gamma: discount.
        value_network: writes the value key, or ``None``.
        average_rewards: standardise the rewards before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Example:
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
    ) -> None:
        super().__init__(gamma, value_network, average_rewards, differentiable=differentiable,
                         skip_existing=skip_existing, shifted=shifted, time_dim=time_dim)
        self.vectorized = bool(vectorized)

    def _return(self, next_value, reward, done, terminated, time_dim):
        fn = vec_td1_return_estimate if self.vectorized else td1_return_estimate
        return fn(self.gamma, next_value, reward, done, terminated, time_dim=time_dim)


class TDLambdaEstimator(_TDBase):
    """TD(lambda): the lambda-weighted mix of n-step returns (``lmbda=0`` is TD(0), ``1`` TD(1)).

    Args:
        gamma: discount.
        lmbda: the lambda weight (a number or a per-step tensor).
        value_network: writes the value key, or ``None``.
        average_rewards: standardise the rewards before the estimate.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Example:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.value import TDLambdaEstimator
        >>> td = TensorDict({"state_value": torch.zeros(2), "next": {"state_value": torch.tensor([2.0, 4.0]),
        ...     "reward": torch.zeros(2), "done": torch.zeros(2, dtype=torch.bool)}}, batch_size=[2])
        >>> TDLambdaEstimator(gamma=1.0, lmbda=0.5, value_network=None)(td)["value_target"]
        tensor([3., 4.])
    """

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
    ) -> None:
        super().__init__(gamma, value_network, average_rewards, differentiable=differentiable,
                         skip_existing=skip_existing, shifted=shifted, time_dim=time_dim)
        _set_coefficient(self, "lmbda", lmbda)
        self.vectorized = bool(vectorized)

    def _return(self, next_value, reward, done, terminated, time_dim):
        fn = vec_td_lambda_return_estimate if self.vectorized else td_lambda_return_estimate
        return fn(self.gamma, self.lmbda, next_value, reward, done, terminated, time_dim=time_dim)


class GAE(ValueEstimatorBase):
    """Generalized advantage estimate; the value target is ``advantage + V(s_t)``.

    Args:
        gamma: discount (a number or a per-step tensor).
        lmbda: the GAE lambda.
        value_network: writes the value key, or ``None`` when values are in the TensorDict.
        average_gae: standardise the written advantage (mean 0, std 1 over all its elements; the
            value target is computed from the raw advantage).
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.
        vectorized: use the loop-free scan (default) instead of the reverse-time loop.

    Example:
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
    ) -> None:
        super().__init__(value_network=value_network, differentiable=differentiable,
                         skip_existing=skip_existing, shifted=shifted, time_dim=time_dim)
        _set_coefficient(self, "gamma", gamma)
        _set_coefficient(self, "lmbda", lmbda)
        self.average_gae = bool(average_gae)
        self.vectorized = bool(vectorized)

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        fn = vec_generalized_advantage_estimate if self.vectorized else generalized_advantage_estimate
        advantage, value_target = fn(self.gamma, self.lmbda, value, next_value, reward, done, terminated, time_dim=time_dim)
        if self.average_gae:
            advantage = _standardize(advantage, 1e-5)
        return advantage, value_target


class VTrace(ValueEstimatorBase):
    """V-trace (IMPALA) value targets and policy-gradient advantages for off-policy data.

    The behaviour policy's log-prob is read from the ``sample_log_prob`` key (root, batch shape,
    as the collector's policy wrote it). The current policy's log-prob is
    ``actor_network.log_prob(td)``, which :class:`tdict.nn.ProbabilisticTensorDictModule` and
    :class:`tdict.nn.ProbabilisticTensorDictSequential` provide (batch-shaped: summed over the
    action's event dims); it runs on a shallow copy, so the actor's intermediate outputs (``loc``,
    ``scale``, ...) are not written into the input.

    Args:
        gamma: discount.
        actor_network: the policy being learnt; anything with ``log_prob(tensordict) -> Tensor``.
        value_network: writes the value key, or ``None``.
        rho_thresh: clipping of the importance ratios (rho-bar).
        c_thresh: clipping of the trace coefficients (c-bar).
        average_adv: standardise the written advantage.
        differentiable, skip_existing, shifted, time_dim: see :class:`ValueEstimatorBase`.

    Example:
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
    ) -> None:
        super().__init__(value_network=value_network, differentiable=differentiable,
                         skip_existing=skip_existing, shifted=shifted, time_dim=time_dim)
        if not callable(getattr(actor_network, "log_prob", None)):
            raise TypeError(
                f"VTrace: actor_network must have a log_prob(tensordict) method (e.g. a ProbabilisticTensorDictModule "
                f"or ProbabilisticTensorDictSequential), got {type(actor_network).__name__}."
            )
        for name, thresh in (("rho_thresh", rho_thresh), ("c_thresh", c_thresh)):
            if not isinstance(thresh, (int, float)) or isinstance(thresh, bool) or thresh <= 0:
                raise ValueError(f"VTrace: {name} must be a positive number, got {thresh!r}.")
        self.__dict__["actor_network"] = actor_network  # owned by the loss, like value_network
        _set_coefficient(self, "gamma", gamma)
        self.rho_thresh = float(rho_thresh)
        self.c_thresh = float(c_thresh)
        self.average_adv = bool(average_adv)

    @property
    def in_keys(self) -> list:
        keys = super().in_keys
        return keys + [self._tensor_keys.sample_log_prob] + [key for key in self.actor_network.in_keys if key not in keys]

    def _estimate(self, tensordict, value, next_value, reward, done, terminated, time_dim):
        key = self._tensor_keys.sample_log_prob
        log_mu = self._read(tensordict, key, f"{key!r} (the behaviour policy's log-prob)")
        log_pi = self.actor_network.log_prob(tensordict.copy())
        batch = tensordict.batch_size
        log_mu = self._to_feature_shape(log_mu, value.shape, batch)
        log_pi = self._to_feature_shape(log_pi, value.shape, batch)
        self._check_shapes([(self._tensor_keys.value, value), (key, log_mu), ("actor_network.log_prob(td)", log_pi)], batch)
        advantage, value_target = vtrace_advantage_estimate(
            self.gamma, log_pi, log_mu, value, next_value, reward, done, terminated,
            self.rho_thresh, self.c_thresh, time_dim=time_dim,
        )
        if self.average_adv:
            advantage = _standardize(advantage, 1e-5)
        return advantage, value_target

