"""The math of distributional (C51) Q-learning (Bellemare et al. 2017) as plain tensor functions.

A return distribution is a probability vector over a fixed, evenly spaced support of ``atoms``
values ``z_0 < ... < z_{N-1}``. :func:`categorical_projection` moves the Bellman target
``r + discount * z_j`` (clamped to ``[z_0, z_{N-1}]``) back onto that support, splitting each atom's
mass between its two neighbouring support points in proportion to the distance;
:func:`distributional_cross_entropy` is the loss against the projected target.

They use no ``.item()`` and no data-dependent shapes, so they trace with
``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import torch

__all__ = ["categorical_projection", "distributional_cross_entropy"]


def categorical_projection(
    next_probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor | float, support: torch.Tensor
) -> torch.Tensor:
    """Project the distribution of ``reward + discount * Z'`` onto ``support``.

    Args:
        next_probs: the next state's probabilities over the atoms, ``[*B, atoms]`` (e.g. the target
            network's distribution of the next action).
        reward: ``[*B]``.
        discount: ``[*B]`` or a number: ``gamma ** n`` times ``1 - terminated`` (0 for a terminal
            transition: all the mass goes to the atoms around the reward).
        support: ``[atoms]``, evenly spaced and increasing (at least 2 atoms).

    Returns:
        ``[*B, atoms]`` probabilities (each row sums to the row of ``next_probs``).

    Examples:
        >>> import torch
        >>> from rl_objectives.functional import categorical_projection
        >>> support = torch.tensor([-1.0, 0.0, 1.0])
        >>> p = torch.tensor([[0.0, 1.0, 0.0]])  # all the mass on 0
        >>> categorical_projection(p, torch.tensor([0.25]), 0.9, support)  # 0.25 lies between 0 and 1
        tensor([[0.0000, 0.7500, 0.2500]])
        >>> categorical_projection(p, torch.tensor([5.0]), 0.9, support)  # clamped to the top atom
        tensor([[0., 0., 1.]])
    """
    atoms = support.shape[-1]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (atoms - 1)
    if not isinstance(discount, torch.Tensor):
        discount = torch.as_tensor(discount, dtype=next_probs.dtype, device=next_probs.device)
    target_atoms = reward.unsqueeze(-1) + discount.unsqueeze(-1) * support  # [*B, atoms]
    # position of each target atom on the support, in units of delta, in [0, atoms - 1]
    b = ((target_atoms - v_min) / delta).clamp(0, atoms - 1)
    # lower neighbour at most atoms - 2, so that the upper one (lower + 1) exists; a target on a
    # support point gets all its mass on that point (upper weight 0, or lower weight 0 at the top)
    lower = b.floor().clamp(max=atoms - 2)
    upper_weight = b - lower
    lower_index = lower.long()
    projected = torch.zeros_like(next_probs)
    projected = projected.scatter_add(-1, lower_index, next_probs * (1 - upper_weight))
    return projected.scatter_add(-1, lower_index + 1, next_probs * upper_weight)


def distributional_cross_entropy(target_probs: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """``-sum_j m_j log p_j`` over the last (atom) dim: ``[*B, atoms] -> [*B]``.

    Examples:
        >>> import torch
        >>> from rl_objectives.functional import distributional_cross_entropy
        >>> distributional_cross_entropy(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]).log())
        tensor(0.6931)
    """
    return -(target_probs * log_probs).sum(-1)
