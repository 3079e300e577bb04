"""GAE, TD(lambda) and V-trace on :func:`~rl_kernels.discounted_reverse_scan`.

Same arguments and conventions as rl-objectives' functional estimators
(``rl_objectives.functional.generalized_advantage_estimate``, ``vec_td_lambda_return_estimate``,
``vtrace_advantage_estimate``): per-step tensors of one shape with time at ``time_dim`` (default
last); ``next_state_value[..., t]`` is V(s_{t+1}); ``done`` (bool) ends the recursion, ``terminated``
(bool, default ``done``) also zeroes the next value; ``gamma`` / ``lmbda`` are numbers or tensors
broadcastable to the inputs, in ``[0, 1]``. Here ``done=None`` means no trajectory ends. The per-step
terms are torch ops; the recursion is the scan (Triton on CUDA, a compiled loop on CPU).
"""

from __future__ import annotations

import torch

from ._backend import resolve_backend
from .scan import _scan

__all__ = ["gae", "td_lambda_return", "vtrace"]

_Tensor = torch.Tensor
Scalar = float | int | torch.Tensor


def _check(fn: str, time_dim: int, named: dict[str, _Tensor | None]) -> int:
    """Same shape for every given tensor, bool masks, floating values; ``time_dim`` as an index >= 0."""
    ref_name, ref = None, None
    for name, value in named.items():
        if value is None:
            continue
        if not isinstance(value, _Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}.")
        if name in ("done", "terminated"):
            if value.dtype is not torch.bool:
                raise TypeError(f"{fn}: {name} must be a bool tensor, got dtype {value.dtype}.")
        elif not value.is_floating_point():
            raise TypeError(f"{fn}: {name} must be a floating-point tensor, got dtype {value.dtype}.")
        if ref is None:
            ref_name, ref = name, value
        elif value.shape != ref.shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(value.shape)} but {ref_name} has shape {tuple(ref.shape)}; "
                "per-step inputs must have exactly the same shape."
            )
        elif value.device != ref.device:
            raise ValueError(f"{fn}: {name} is on {value.device} but {ref_name} is on {ref.device}.")
    assert ref is not None
    if not isinstance(time_dim, int) or isinstance(time_dim, bool):
        raise TypeError(f"{fn}: time_dim must be an int, got {type(time_dim).__name__}.")
    if ref.ndim == 0 or not -ref.ndim <= time_dim < ref.ndim:
        raise ValueError(
            f"{fn}: time_dim={time_dim} is out of range for inputs of shape {tuple(ref.shape)} "
            f"(expected {-ref.ndim} <= time_dim < {ref.ndim}; inputs need a time axis)."
        )
    return time_dim % ref.ndim


def _coef(fn: str, name: str, value: Scalar, shape: torch.Size, dim: int) -> float | _Tensor:
    """``gamma`` / ``lmbda``: checked to be in ``[0, 1]``; a number as a float, a tensor broadcast to
    ``shape`` with its time axis moved last."""
    if isinstance(value, _Tensor):
        if value.numel() and not torch.compiler.is_compiling():
            low, high = value.detach().aminmax()
            if not (bool(low >= 0) and bool(high <= 1)):
                raise ValueError(
                    f"{fn}: {name} must be in [0, 1], got values in [{float(low):.6g}, {float(high):.6g}]."
                )
        if value.ndim == 0:
            return value
        try:
            return value.broadcast_to(shape).movedim(dim, -1)
        except RuntimeError:
            raise ValueError(
                f"{fn}: {name} of shape {tuple(value.shape)} does not broadcast to the inputs' shape {tuple(shape)}."
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{fn}: {name} must be a number or a tensor, got {type(value).__name__}.")
    if not 0 <= value <= 1:
        raise ValueError(f"{fn}: {name} must be in [0, 1], got {value!r}.")
    return float(value)


def _ends(done: _Tensor | None, terminated: _Tensor | None) -> tuple[_Tensor | None, _Tensor | None]:
    """``(stop, terminated)``: where the recursion stops (done or terminated) and where V' is 0."""
    if terminated is None:
        terminated = done
    if done is None:
        return terminated, terminated
    return (done if terminated is None else done | terminated), terminated


def _zero_where(mask: _Tensor | None, x: _Tensor) -> _Tensor:
    # where (not a product): a NaN/inf next value after a terminal step cannot leak in
    return x if mask is None else torch.where(mask, torch.zeros_like(x), x)


def gae(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor | None = None,
    terminated: _Tensor | None = None,
    *,
    time_dim: int = -1,
    backend: str = "auto",
) -> tuple[_Tensor, _Tensor]:
    """Generalized advantage estimate: ``A_t = delta_t + gamma_t * lmbda_t * (0 if done_t else A_{t+1})``.

    ``delta_t = r_t + gamma_t * (0 if terminated_t else V(s_{t+1})) - V(s_t)``; ``A`` is zero past the
    window. Returns ``(advantage, value_target)`` with ``value_target = advantage + state_value``.

    Examples:
        >>> import torch
        >>> v, nv = torch.zeros(3), torch.ones(3)
        >>> done = torch.tensor([False, True, False])
        >>> adv, target = gae(0.5, 1.0, v, nv, torch.ones(3), done, backend="torch")
        >>> adv
        tensor([2.0000, 1.0000, 1.5000])
    """
    fn = "gae"
    dim = _check(
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
    path = resolve_backend(fn, backend, reward.device)
    shape = reward.shape
    g = _coef(fn, "gamma", gamma, shape, dim)
    lm = _coef(fn, "lmbda", lmbda, shape, dim)
    value, next_value, reward = (x.movedim(dim, -1) for x in (state_value, next_state_value, reward))
    stop, term = _ends(*(None if m is None else m.movedim(dim, -1) for m in (done, terminated)))
    delta = reward + g * _zero_where(term, next_value) - value
    advantage = _scan(delta, g * lm, stop, path)
    return advantage.movedim(-1, dim), (advantage + value).movedim(-1, dim)


def td_lambda_return(
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor | None = None,
    terminated: _Tensor | None = None,
    *,
    time_dim: int = -1,
    backend: str = "auto",
) -> _Tensor:
    """TD(lambda) return ``G_t = r_t + gamma_t * ((1 - lmbda_t) * V'_t + lmbda_t * C_t)``.

    ``V'_t`` is the next value (0 when terminated); ``C_t = V'_t`` at a trajectory end and at the last
    step of the window, ``G_{t+1}`` otherwise.

    Examples:
        >>> import torch
        >>> td_lambda_return(1.0, 0.5, torch.tensor([2.0, 4.0]), torch.zeros(2), backend="torch")
        tensor([3., 4.])
    """
    fn = "td_lambda_return"
    dim = _check(
        fn,
        time_dim,
        {"next_state_value": next_state_value, "reward": reward, "done": done, "terminated": terminated},
    )
    path = resolve_backend(fn, backend, reward.device)
    shape = reward.shape
    g = _coef(fn, "gamma", gamma, shape, dim)
    lm = _coef(fn, "lmbda", lmbda, shape, dim)
    next_value, reward = next_state_value.movedim(dim, -1), reward.movedim(dim, -1)
    stop, term = _ends(*(None if m is None else m.movedim(dim, -1) for m in (done, terminated)))
    next_value = _zero_where(term, next_value)
    # the window's end bootstraps like a trajectory end
    end = torch.zeros_like(reward, dtype=torch.bool) if stop is None else stop.clone()
    end[..., -1] = True
    # G_t = a_t + gamma_t * lmbda_t * G_{t+1} (cut at the ends), with the bootstrap terms in a_t
    a = reward + g * ((1 - lm) * next_value + lm * torch.where(end, next_value, torch.zeros_like(next_value)))
    return _scan(a, g * lm, end, path).movedim(-1, dim)


def vtrace(
    gamma: Scalar,
    log_pi: _Tensor,
    log_mu: _Tensor,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor | None = None,
    terminated: _Tensor | None = None,
    rho_thresh: float | _Tensor = 1.0,
    c_thresh: float | _Tensor = 1.0,
    *,
    time_dim: int = -1,
    backend: str = "auto",
) -> tuple[_Tensor, _Tensor]:
    """V-trace (IMPALA) advantages and value targets, ``(advantage, value_target)``.

    ``rho_t = exp(log_pi_t - log_mu_t)``, ``rhobar_t = min(rho_thresh, rho_t)``, ``c_t = min(c_thresh, rho_t)``;
    ``v_t = V(s_t) + delta_t + gamma_t * c_t * (v_{t+1} - V(s_{t+1}))`` with ``delta_t = rhobar_t * (r_t +
    gamma_t * V'_t - V(s_t))``, the correction cut at a trajectory end and past the window; advantage
    ``rhobar_t * (r_t + gamma_t * v_next_t - V(s_t))``, ``v_next_t = v_{t+1}`` inside a trajectory, ``V'_t``
    at its end and at the window's last step.

    Examples:
        >>> import torch
        >>> zeros = torch.zeros(2)
        >>> adv, target = vtrace(1.0, zeros, zeros, zeros, torch.ones(2), torch.ones(2), backend="torch")
        >>> target
        tensor([4., 2.])
        >>> adv
        tensor([3., 2.])
    """
    fn = "vtrace"
    dim = _check(
        fn,
        time_dim,
        {
            "log_pi": log_pi,
            "log_mu": log_mu,
            "state_value": state_value,
            "next_state_value": next_state_value,
            "reward": reward,
            "done": done,
            "terminated": terminated,
        },
    )
    path = resolve_backend(fn, backend, reward.device)
    g = _coef(fn, "gamma", gamma, reward.shape, dim)
    log_pi, log_mu, value, next_value, reward = (
        x.movedim(dim, -1) for x in (log_pi, log_mu, state_value, next_state_value, reward)
    )
    stop, term = _ends(*(None if m is None else m.movedim(dim, -1) for m in (done, terminated)))
    rho = (log_pi - log_mu).exp()
    rho_bar = rho.clamp(max=rho_thresh)
    c = rho.clamp(max=c_thresh)
    next_value = _zero_where(term, next_value)
    delta = rho_bar * (reward + g * next_value - value)
    vs = value + _scan(delta, g * c, stop, path)
    following = torch.cat([vs[..., 1:], next_value[..., -1:]], -1)
    vs_next = following if stop is None else torch.where(stop, next_value, following)
    advantage = rho_bar * (reward + g * vs_next - value)
    return advantage.movedim(-1, dim), vs.movedim(-1, dim)
