"""V-trace (Espeholt et al., 2018, IMPALA): off-policy value targets and policy-gradient advantages.

Same conventions as :mod:`rl_objectives.functional.value` (shapes, ``time_dim``, ``done`` /
``terminated`` masks, per-step ``gamma``); ``log_pi`` / ``log_mu`` are per-step log-probs with the
inputs' shape.
"""

from __future__ import annotations

import torch

from .value import Scalar, _check_inputs, _coef, _reverse_scan

__all__ = ["vtrace_advantage_estimate"]

_Tensor = torch.Tensor


def vtrace_advantage_estimate(
    gamma: Scalar,
    log_pi: _Tensor,
    log_mu: _Tensor,
    state_value: _Tensor,
    next_state_value: _Tensor,
    reward: _Tensor,
    done: _Tensor,
    terminated: _Tensor | None = None,
    rho_thresh: float | _Tensor = 1.0,
    c_thresh: float | _Tensor = 1.0,
    *,
    time_dim: int = -1,
) -> tuple[_Tensor, _Tensor]:
    """V-trace value targets and advantages.

    With importance ratios ``rho_t = exp(log_pi_t - log_mu_t)`` (target policy pi, behaviour
    policy mu), ``rhobar_t = min(rho_thresh, rho_t)`` and ``c_t = min(c_thresh, rho_t)``:

    - ``delta_t = rhobar_t * (r_t + gamma_t * V'_t - V(s_t))``, ``V'_t`` the next value, 0 when
      terminated;
    - value target ``v_t = V(s_t) + delta_t + gamma_t * c_t * (v_{t+1} - V(s_{t+1}))``, the
      correction term dropped at a trajectory end (``done``) and past the window;
    - advantage ``rhobar_t * (r_t + gamma_t * v_next_t - V(s_t))`` with ``v_next_t = v_{t+1}`` inside a
      trajectory and ``V'_t`` at its end (a truncated step bootstraps from the next value) and at the
      last step of the window.

    Args:
        gamma: discount, a number or a tensor broadcastable to the inputs (per-step).
        log_pi: log-probs of the taken actions under the policy being learnt.
        log_mu: log-probs of the taken actions under the behaviour policy (the collector's).
        state_value, next_state_value, reward, done, terminated: as in
            :func:`~rl_objectives.functional.generalized_advantage_estimate`.
        rho_thresh: clipping of the ratios in ``delta`` and in the advantage (rho-bar).
        c_thresh: clipping of the ratios that carry the correction backwards (c-bar).
        time_dim: the time axis of the inputs.

    Returns:
        ``(advantage, value_target)``, both shaped like ``state_value``.

    Examples:
        >>> import torch
        >>> zeros = torch.zeros(2)
        >>> adv, target = vtrace_advantage_estimate(
        ...     1.0, zeros, zeros, zeros, torch.ones(2), torch.ones(2), torch.tensor([False, False]))
        >>> target
        tensor([4., 2.])
        >>> adv
        tensor([3., 2.])
    """
    fn = "vtrace_advantage_estimate"
    if terminated is None:
        terminated = done
    dim = _check_inputs(
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
    gamma = _coef(fn, "gamma", gamma, reward.shape, dim)
    log_pi, log_mu, value, next_value, reward, done, terminated = (
        x.movedim(dim, -1) for x in (log_pi, log_mu, state_value, next_state_value, reward, done, terminated)
    )
    rho = (log_pi - log_mu).exp()
    rho_bar = rho.clamp(max=rho_thresh)
    c = rho.clamp(max=c_thresh)
    zero = torch.zeros_like(next_value)
    next_value = torch.where(terminated, zero, next_value)
    end = done | terminated
    delta = rho_bar * (reward + gamma * next_value - value)
    vs_minus_v = _reverse_scan(delta, torch.where(end, zero, gamma * c))
    vs = value + vs_minus_v
    # v_{t+1} inside a trajectory; the (bootstrapped) next value at its end and at the window's end
    vs_following = torch.cat([vs[..., 1:], next_value[..., -1:]], -1)
    vs_next = torch.where(end, next_value, vs_following)
    advantage = rho_bar * (reward + gamma * vs_next - value)
    return advantage.movedim(-1, dim), vs.movedim(-1, dim)
