"""Value and advantage estimators on plain tensors: GAE, TD(0), TD(1), TD(lambda), reward-to-go.

Conventions shared by every function here (TorchRL 0.14 names, this project's shapes):

- Per-step inputs (``state_value``, ``next_state_value``, ``reward``, ``done``, ``terminated``) have
  the same shape, with the time axis at ``time_dim`` (default ``-1``: the data contract puts time
  last, ``[*B, T]``). Feature dims after time (multi-objective rewards, ``[*B, T, F]``) are allowed:
  pass ``time_dim=-2`` (or the non-negative index of the time axis). Shapes are never broadcast
  against each other: a ``[B, T]`` vs ``[B, T, 1]`` mix raises ``ValueError``.
- ``next_state_value[..., t]`` is V(s_{t+1}), the value of the observation that followed step t
  (``td["next", "state_value"]``), so the last step of a window bootstraps without extra input.
- ``done[..., t]`` (bool) marks the last step of a trajectory, terminated or truncated: no recursion
  crosses it. ``terminated[..., t]`` (bool) means there is no next state: V(s_{t+1}) counts as 0.
  A truncated (done, not terminated) step still bootstraps from ``next_state_value``. A terminated
  step also ends the recursion (terminated implies done). ``terminated=None`` reads ``done``.
- ``gamma`` / ``lmbda``: a Python number, or a tensor broadcastable to the inputs' shape, with values
  in ``[0, 1]`` (else ``ValueError`` naming the argument; tensors are not checked inside
  ``torch.compile``). A tensor gives per-step values: ``gamma[..., t]`` discounts the transition of
  step t. With feature dims give it a trailing 1 (``[*B, T, 1]``). The TD(1) / TD(lambda) functions
  take TorchRL's ``rolling_gamma``: ``None`` or ``True`` is that per-step rule; ``False`` ties each
  start step's ``gamma``/``lmbda`` to its whole future (``G_t`` discounts every later step with
  ``gamma[..., t]``), in the loop versions only (the ``vec_`` ones raise ``NotImplementedError``).
  The switch changes nothing for a number.
- Nothing is written in place: results are differentiable through ``state_value``,
  ``next_state_value`` and ``reward`` when those require grad.

The ``vec_`` functions compute the same numbers without a Python loop over time: the backward
recursion ``x_t = a_t + b_t * x_{t+1}`` is solved by a doubling scan (``ceil(log2 T)`` tensor ops,
each over the whole rollout), exact for the zeros a ``done`` puts in ``b`` (no division).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

import torch
from tdict import scalar_like
from tdict.validation import check_unit_interval
import torch.nn.functional as F

__all__ = [
    "generalized_advantage_estimate",
    "reward2go",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
]

Scalar = float | int | torch.Tensor  # gamma / lmbda: a number or a tensor
_Tensor = torch.Tensor


@functools.cache
def _kernel_scan() -> Callable[..., _Tensor] | None:
    """rl-kernels' scan (Triton on CUDA, a compiled loop on CPU) when ``rl-objectives[kernels]`` is
    installed, else ``None`` (the doubling scan below runs)."""
    try:
        from rl_kernels import discounted_reverse_scan
    except ImportError:
        return None
    return discounted_reverse_scan


# --------------------------------------------------------------------------- input checks
def _check_inputs(fn: str, time_dim: int, named: dict) -> int:
    """Check the per-step tensors (same shape, bool masks) and return ``time_dim`` as an index >= 0.

    ``named`` maps argument names to tensors (``None`` entries are skipped); ``done`` and
    ``terminated`` must be bool.
    """
    ref_name = ref = None
    for name, value in named.items():
        if value is None:
            continue
        if not isinstance(value, _Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}.")
        if name in ("done", "terminated") and value.dtype is not torch.bool:
            raise TypeError(f"{fn}: {name} must be a bool tensor, got dtype {value.dtype}.")
        if ref is None:
            ref_name, ref = name, value
        elif value.shape != ref.shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(value.shape)} but {ref_name} has shape {tuple(ref.shape)}; "
                "per-step inputs must have exactly the same shape (they are never broadcast: a [B, T] vs "
                "[B, T, 1] mix is a bug upstream)."
            )
    if ref is None:
        raise ValueError(f"{fn}: no input tensor given.")
    ndim = ref.ndim
    if not isinstance(time_dim, int) or isinstance(time_dim, bool):
        raise TypeError(f"{fn}: time_dim must be an int, got {type(time_dim).__name__}.")
    if ndim == 0 or not -ndim <= time_dim < ndim:
        raise ValueError(
            f"{fn}: time_dim={time_dim} is out of range for inputs of shape {tuple(ref.shape)} "
            f"(expected {-ndim} <= time_dim < {ndim}; inputs need a time axis)."
        )
    dim = time_dim % ndim
    if ref.shape[dim] == 0:
        raise ValueError(f"{fn}: the time axis (dim {dim}) of the inputs of shape {tuple(ref.shape)} is empty.")
    return dim


def _check_unit_interval(owner: str, name: str, value: Scalar) -> None:
    """Raise ``ValueError`` naming ``name`` unless every value of ``value`` is in ``[0, 1]``.

    A discount or a lambda outside ``[0, 1]`` (``gamma=-0.9``, ``lmbda=1.5``) gives estimates that
    diverge or flip sign instead of an error. NaN is rejected too. A tensor is checked eagerly
    only: inside ``torch.compile`` the data-dependent check would break the graph.
    """
    if isinstance(value, _Tensor):
        if torch.compiler.is_compiling() or value.numel() == 0:
            return
        low, high = value.detach().aminmax()
        if bool(low >= 0) and bool(high <= 1):
            return
        shown = (
            f"{float(low):.6g}"
            if value.numel() == 1
            else f"a tensor with values in [{float(low):.6g}, {float(high):.6g}]"
        )
        raise ValueError(f"{owner}: {name} must be in [0, 1], got {shown}.")
    if isinstance(value, (int, float)):
        check_unit_interval(owner, name, value)


def _coef(fn: str, name: str, value: Scalar, shape: torch.Size, dim: int | None) -> Scalar:
    """A discount-like coefficient (``gamma``/``lmbda``, checked to be in ``[0, 1]``): a number as
    is, a tensor broadcast to ``shape`` and, unless ``dim`` is None, laid out time-last like the
    moved inputs."""
    _check_unit_interval(fn, name, value)
    if isinstance(value, _Tensor):
        if value.ndim == 0:
            return value
        try:
            value = value.broadcast_to(shape)
        except RuntimeError:
            raise ValueError(
                f"{fn}: {name} of shape {tuple(value.shape)} does not broadcast to the inputs' shape {tuple(shape)}."
            ) from None
        return value if dim is None else value.movedim(dim, -1)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{fn}: {name} must be a number or a tensor, got {type(value).__name__}.")
    return float(value)


def _with_last_step_true(mask: _Tensor) -> _Tensor:
    """``mask`` with its last time step set (the window end acts like a trajectory end)."""
    return torch.cat([mask[..., :-1], torch.ones_like(mask[..., -1:])], -1)


def _step(x: Scalar, t: int) -> Scalar:
    return x[..., t] if isinstance(x, _Tensor) and x.ndim > 0 else x


# --------------------------------------------------------------------------- scans
def _reverse_scan(a: _Tensor, b: _Tensor) -> _Tensor:
    """Solve ``x_t = a_t + b_t * x_{t+1}`` backwards along the last dim, with ``x_T = 0``.

    Doubling: after the round with stride ``s``, ``(a_t, b_t)`` maps ``x_{t+s}`` to ``x_t``; two
    such maps compose into one of stride ``2s``. Values past the end are 0, so ``log2(T)`` rounds
    give ``x_t = a_t``. With rl-kernels installed, floating inputs go to its scan instead (same numbers).
    """
    kernel = None if torch.compiler.is_compiling() else _kernel_scan()
    if kernel is not None and a.is_floating_point() and b.is_floating_point() and a.ndim > 0:
        return kernel(a, b.expand_as(a))
    steps = a.shape[-1]
    b = b.expand_as(a)
    stride = 1
    while stride < steps:
        a = a + b * F.pad(a[..., stride:], (0, stride))
        b = b * F.pad(b[..., stride:], (0, stride))
        stride *= 2
    return a


# --------------------------------------------------------------------------- GAE
def _gae_prepare(fn, gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim):
    if terminated is None:
        terminated = done
    dim = _check_inputs(
        fn,
        time_dim,
        {
            "state_value": state_value,
            "next_state_value": next_state_value,
            "reward": reward,
            "done": done,
            "terminated": terminated,
        },
    )
    shape = reward.shape
    gamma = _coef(fn, "gamma", gamma, shape, dim)
    lmbda = _coef(fn, "lmbda", lmbda, shape, dim)
    value, next_value, reward, done, terminated = (
        x.movedim(dim, -1) for x in (state_value, next_state_value, reward, done, terminated)
    )
    # where (not a product) so that a NaN/inf next value after a terminal step cannot leak in
    next_value = torch.where(terminated, torch.zeros_like(next_value), next_value)
    delta = reward + gamma * next_value - value
    carry = torch.where(done | terminated, 0.0, gamma * lmbda * torch.ones_like(delta))
    return dim, value, delta, carry


def generalized_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    *,
    time_dim: int = -1,
) -> tuple[_Tensor, _Tensor]:
    """Generalized advantage estimate (Schulman et al., 2016), a reverse-time loop.

    ``delta_t = r_t + gamma_t * (0 if terminated_t else V(s_{t+1})) - V(s_t)`` and
    ``A_t = delta_t + gamma_t * lmbda_t * (0 if done_t else A_{t+1})`` (``A_T = 0``);
    the value target is ``A_t + V(s_t)``. See the module docstring for shapes and masks.

    Returns:
        ``(advantage, value_target)``, both shaped like ``state_value``.

    Examples:
        >>> import torch
        >>> v, nv = torch.zeros(3), torch.ones(3)
        >>> done = torch.tensor([False, True, False])
        >>> adv, target = generalized_advantage_estimate(0.5, 1.0, v, nv, torch.ones(3), done)
        >>> adv
        tensor([2.0000, 1.0000, 1.5000])
    """
    fn = "generalized_advantage_estimate"
    dim, value, delta, carry = _gae_prepare(
        fn, gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim
    )
    steps = delta.shape[-1]
    adv = torch.zeros_like(delta[..., 0])
    out = [None] * steps
    for t in reversed(range(steps)):
        adv = delta[..., t] + carry[..., t] * adv
        out[t] = adv
    advantage = torch.stack(out, -1)
    return advantage.movedim(-1, dim), (advantage + value).movedim(-1, dim)


def vec_generalized_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    *,
    time_dim: int = -1,
) -> tuple[_Tensor, _Tensor]:
    """:func:`generalized_advantage_estimate` without a Python loop over time (same numbers).

    Examples:
        >>> import torch
        >>> v, nv = torch.zeros(3), torch.ones(3)
        >>> done = torch.tensor([False, True, False])
        >>> adv, target = vec_generalized_advantage_estimate(0.5, 1.0, v, nv, torch.ones(3), done)
        >>> adv
        tensor([2.0000, 1.0000, 1.5000])
    """
    fn = "vec_generalized_advantage_estimate"
    dim, value, delta, carry = _gae_prepare(
        fn, gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim
    )
    advantage = _reverse_scan(delta, carry)
    return advantage.movedim(-1, dim), (advantage + value).movedim(-1, dim)


# --------------------------------------------------------------------------- TD(0)
def td0_return_estimate(
    gamma: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    terminated: _Tensor | None = None,
    *,
    done: _Tensor | None = None,
    time_dim: int = -1,
) -> _Tensor:
    """One-step bootstrapped return ``r_t + gamma_t * (0 if terminated_t else V(s_{t+1}))``.

    ``done`` is only read when ``terminated`` is None (TorchRL's older call).

    Examples:
        >>> import torch
        >>> td0_return_estimate(0.9, torch.ones(2), torch.ones(2), torch.tensor([False, True]))
        tensor([1.9000, 1.0000])
    """
    fn = "td0_return_estimate"
    if terminated is None:
        if done is None:
            raise ValueError(f"{fn}: pass terminated (or done, read as terminated when terminated is None).")
        terminated = done
    _check_inputs(fn, time_dim, {"next_state_value": next_state_value, "reward": reward, "terminated": terminated})
    return _td0_return(_coef(fn, "gamma", gamma, reward.shape, None), next_state_value, reward, terminated)


def _td0_return(gamma: Scalar, next_state_value: _Tensor, reward: _Tensor, terminated: _Tensor) -> _Tensor:
    """:func:`td0_return_estimate` on inputs already checked (same shapes, bool ``terminated``,
    ``gamma`` in ``[0, 1]`` and broadcastable): the value estimators' path, which checks them once."""
    if isinstance(gamma, (int, float)):  # a number: one tensor made once, not converted at every call
        gamma = scalar_like(gamma, next_state_value)
    return reward + gamma * torch.where(terminated, torch.zeros_like(next_state_value), next_state_value)


def td0_advantage_estimate(
    gamma: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """TD(0) advantage: :func:`td0_return_estimate` minus ``state_value``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True])
        >>> td0_advantage_estimate(0.9, torch.ones(2), torch.ones(2), torch.ones(2), done)
        tensor([0.9000, 0.0000])
    """
    fn = "td0_advantage_estimate"
    if terminated is None:
        terminated = done
    _check_inputs(
        fn,
        time_dim,
        {
            "state_value": state_value,
            "next_state_value": next_state_value,
            "reward": reward,
            "done": done,
            "terminated": terminated,
        },
    )
    return td0_return_estimate(gamma, next_state_value, reward, terminated, time_dim=time_dim) - state_value


# --------------------------------------------------------------------------- TD(lambda)
def _start_step_discounts(fn: str, rolling_gamma: bool | None) -> bool:
    """Whether ``rolling_gamma`` asks for TorchRL's ``rolling_gamma=False`` rule (checked)."""
    if rolling_gamma is None or rolling_gamma is True:
        return False
    if rolling_gamma is not False:
        raise TypeError(f"{fn}: rolling_gamma must be True, False or None, got {rolling_gamma!r}.")
    if fn.startswith("vec_"):
        raise NotImplementedError(
            f"{fn}: rolling_gamma=False is not available here. When using rolling_gamma=False (the gamma and "
            f"lmbda of each start step discount its whole future), call {fn[len('vec_') :]}, the loop version. "
            "The vectorized version of TD(1) / TD(lambda) computes rolling_gamma=True (each step's own discount) only."
        )
    return True


def _start_step_returns(gamma: Scalar, lmbda: Scalar, next_value: _Tensor, reward: _Tensor, end: _Tensor) -> _Tensor:
    """TD(lambda) returns where ``G_k`` uses ``gamma[..., k]`` and ``lmbda[..., k]`` at every later step
    (``rolling_gamma=False``; time-last inputs as prepared by :func:`_td_lambda_prepare`).

    Each start ``k`` is the usual recursion with constant coefficients: one scan over a leading
    start dim (``[T, *B, T]``), whose diagonal holds the answer."""

    def per_start(x: Scalar) -> Scalar:
        # start k's coefficient at every step: [K, *B, 1]
        return x.movedim(-1, 0).unsqueeze(-1) if isinstance(x, _Tensor) and x.ndim > 0 else x

    g, lm = per_start(gamma), per_start(lmbda)
    zero = torch.zeros_like(next_value)
    a = reward + g * ((1 - lm) * next_value + lm * torch.where(end, next_value, zero))
    b = torch.where(end, zero, g * lm * torch.ones_like(next_value))
    a = a.expand(reward.shape[-1], *reward.shape)
    return _reverse_scan(a, b).diagonal(dim1=0, dim2=-1)


def _td_lambda_prepare(fn, gamma, lmbda, next_state_value, reward, done, terminated, time_dim, state_value=None):
    if terminated is None:
        terminated = done
    dim = _check_inputs(
        fn,
        time_dim,
        {
            "state_value": state_value,
            "next_state_value": next_state_value,
            "reward": reward,
            "done": done,
            "terminated": terminated,
        },
    )
    shape = reward.shape
    gamma = _coef(fn, "gamma", gamma, shape, dim)
    lmbda = _coef(fn, "lmbda", lmbda, shape, dim)
    next_value, reward, done, terminated = (x.movedim(dim, -1) for x in (next_state_value, reward, done, terminated))
    next_value = torch.where(terminated, torch.zeros_like(next_value), next_value)
    # a trajectory end, or the end of the window: the lambda-return bootstraps from V(s_{t+1})
    end = _with_last_step_true(done | terminated)
    return dim, gamma, lmbda, next_value, reward, end


def td_lambda_return_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """TD(lambda) return, a reverse-time loop.

    ``G_t = r_t + gamma_t * ((1 - lmbda_t) * V'_t + lmbda_t * C_t)`` with ``V'_t`` the next value
    (0 when terminated) and ``C_t = V'_t`` at a trajectory end or the last step of the window,
    ``G_{t+1}`` otherwise. ``lmbda=1`` is :func:`td1_return_estimate`, ``lmbda=0`` TD(0).

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, False])
        >>> td_lambda_return_estimate(1.0, 0.5, torch.tensor([2.0, 4.0]), torch.zeros(2), done)
        tensor([3., 4.])
    """
    fn = "td_lambda_return_estimate"
    start_step = _start_step_discounts(fn, rolling_gamma)
    dim, gamma, lmbda, next_value, reward, end = _td_lambda_prepare(
        fn, gamma, lmbda, next_state_value, reward, done, terminated, time_dim
    )
    if start_step and any(isinstance(x, _Tensor) and x.ndim > 0 for x in (gamma, lmbda)):
        return _start_step_returns(gamma, lmbda, next_value, reward, end).movedim(-1, dim)
    steps = reward.shape[-1]
    out: list[torch.Tensor | None] = [None] * steps
    ret = None
    for t in reversed(range(steps)):
        nv = next_value[..., t]
        follow = nv if ret is None else torch.where(end[..., t], nv, ret)
        lm = _step(lmbda, t)
        ret = reward[..., t] + _step(gamma, t) * ((1 - lm) * nv + lm * follow)
        out[t] = ret
    return torch.stack(cast(list[torch.Tensor], out), -1).movedim(-1, dim)  # (every step is filled)


def vec_td_lambda_return_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """:func:`td_lambda_return_estimate` without a Python loop over time (same numbers).

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, False])
        >>> vec_td_lambda_return_estimate(1.0, 0.5, torch.tensor([2.0, 4.0]), torch.zeros(2), done)
        tensor([3., 4.])
    """
    fn = "vec_td_lambda_return_estimate"
    _start_step_discounts(fn, rolling_gamma)
    dim, gamma, lmbda, next_value, reward, end = _td_lambda_prepare(
        fn, gamma, lmbda, next_state_value, reward, done, terminated, time_dim
    )
    # G_t = a_t + b_t * G_{t+1}: the bootstrap terms go to a_t, the continuation weight to b_t
    zero = torch.zeros_like(next_value)
    a = reward + gamma * ((1 - lmbda) * next_value + lmbda * torch.where(end, next_value, zero))
    b = torch.where(end, zero, gamma * lmbda * torch.ones_like(next_value))
    return _reverse_scan(a, b).movedim(-1, dim)


def td_lambda_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """TD(lambda) advantage: :func:`td_lambda_return_estimate` minus ``state_value``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, False])
        >>> td_lambda_advantage_estimate(1.0, 0.5, torch.ones(2), torch.tensor([2.0, 4.0]), torch.zeros(2), done)
        tensor([2., 3.])
    """
    _check_inputs("td_lambda_advantage_estimate", time_dim, {"state_value": state_value, "reward": reward})
    return (
        td_lambda_return_estimate(
            gamma, lmbda, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
        )
        - state_value
    )


def vec_td_lambda_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """:func:`td_lambda_advantage_estimate` without a Python loop over time (same numbers).

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, False])
        >>> vec_td_lambda_advantage_estimate(1.0, 0.5, torch.ones(2), torch.tensor([2.0, 4.0]), torch.zeros(2), done)
        tensor([2., 3.])
    """
    _start_step_discounts("vec_td_lambda_advantage_estimate", rolling_gamma)
    _check_inputs("vec_td_lambda_advantage_estimate", time_dim, {"state_value": state_value, "reward": reward})
    return (
        vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated, time_dim=time_dim)
        - state_value
    )


# --------------------------------------------------------------------------- TD(1)
def td1_return_estimate(
    gamma: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """Discounted Monte-Carlo return that bootstraps where the data stops: at a truncated step and at
    the end of the window (``G_t = r_t + gamma_t * G_{t+1}``, ``V(s_{t+1})`` at those ends, 0 after a
    terminated step). TD(lambda) with ``lmbda=1``; a reverse-time loop.

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True, False])  # step 1 is truncated: it bootstraps
        >>> no_term = torch.zeros(3, dtype=torch.bool)
        >>> td1_return_estimate(0.5, torch.full((3,), 8.0), torch.ones(3), done, no_term)
        tensor([3.5000, 5.0000, 5.0000])
    """
    _check_unit_interval("td1_return_estimate", "gamma", gamma)  # named here: the error would name TD(lambda)
    return td_lambda_return_estimate(
        gamma, 1.0, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )


def vec_td1_return_estimate(
    gamma: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """:func:`td1_return_estimate` without a Python loop over time (same numbers).

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True, False])  # step 1 is truncated: it bootstraps
        >>> no_term = torch.zeros(3, dtype=torch.bool)
        >>> vec_td1_return_estimate(0.5, torch.full((3,), 8.0), torch.ones(3), done, no_term)
        tensor([3.5000, 5.0000, 5.0000])
    """
    _start_step_discounts("vec_td1_return_estimate", rolling_gamma)
    _check_unit_interval("vec_td1_return_estimate", "gamma", gamma)  # named here: the error would name TD(lambda)
    return vec_td_lambda_return_estimate(gamma, 1.0, next_state_value, reward, done, terminated, time_dim=time_dim)


def td1_advantage_estimate(
    gamma: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """TD(1) advantage: :func:`td1_return_estimate` minus ``state_value``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True, False])
        >>> td1_advantage_estimate(0.5, torch.ones(3), torch.full((3,), 8.0), torch.ones(3), done)
        tensor([0.5000, 0.0000, 4.0000])
    """
    _check_unit_interval("td1_advantage_estimate", "gamma", gamma)  # named here: the error would name TD(lambda)
    return td_lambda_advantage_estimate(
        gamma, 1.0, state_value, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )


def vec_td1_advantage_estimate(
    gamma: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -1,
) -> _Tensor:
    """:func:`td1_advantage_estimate` without a Python loop over time (same numbers).

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True, False])
        >>> vec_td1_advantage_estimate(0.5, torch.ones(3), torch.full((3,), 8.0), torch.ones(3), done)
        tensor([0.5000, 0.0000, 4.0000])
    """
    _start_step_discounts("vec_td1_advantage_estimate", rolling_gamma)
    _check_unit_interval("vec_td1_advantage_estimate", "gamma", gamma)  # named here: the error would name TD(lambda)
    return vec_td_lambda_advantage_estimate(
        gamma, 1.0, state_value, next_state_value, reward, done, terminated, time_dim=time_dim
    )


# --------------------------------------------------------------------------- reward-to-go
def reward2go(reward: _Tensor, done: _Tensor, gamma: Scalar, *, time_dim: int = -1) -> _Tensor:
    """Discounted reward-to-go ``G_t = r_t + gamma_t * G_{t+1}``, restarted after each ``done``.

    No bootstrap: the sum stops at a trajectory end and at the end of the window. Vectorised.

    Examples:
        >>> import torch
        >>> reward2go(torch.ones(4), torch.tensor([False, True, False, False]), 0.5)
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """
    fn = "reward2go"
    dim = _check_inputs(fn, time_dim, {"reward": reward, "done": done})
    gamma = _coef(fn, "gamma", gamma, reward.shape, dim)
    reward, done = reward.movedim(dim, -1), done.movedim(dim, -1)
    carry = torch.where(done, 0.0, gamma * torch.ones_like(reward))
    return _reverse_scan(reward, carry).movedim(-1, dim)
