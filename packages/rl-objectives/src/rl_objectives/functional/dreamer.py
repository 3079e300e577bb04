"""DreamerV3's scalar and latent math (Hafner et al. 2023) as plain tensor functions.

- ``symlog`` / ``symexp``: the squashing of targets of any scale, ``sign(x) log(1 + |x|)``, and its
  inverse.
- Two-hot scalars: a value is a categorical over a fixed support (``symexp_bins``: ``num_bins``
  raw values, evenly spaced in symlog space over ``[-limit, limit]``, exactly symmetric around 0).
  ``two_hot_encode`` spreads a target over its two neighbouring support points (linear
  interpolation in raw value space, saturated at the ends), ``two_hot_decode`` is the softmax
  expectation, ``two_hot_cross_entropy`` the loss of logits against raw targets.
- Discrete latents: ``unimix_probs`` mixes 1% of uniform into each categorical,
  ``straight_through_categorical`` draws one-hot samples whose gradient is that of the
  probabilities, and the KL terms between posterior and prior (``categorical_kl_terms``: the
  dynamics and representation losses with free nats on their sum over the categoricals, as
  DreamerV3; ``categorical_kl_balanced``: the alpha-balanced loss of DreamerV2 with free bits per
  categorical).

Names and semantics follow TorchRL (``torchrl.modules.symlog``, ``torchrl.objectives.two_hot_encode``,
``categorical_kl_terms``...). Latent logits are shaped ``[..., num_categoricals, num_classes]``.

Examples:
    >>> import torch
    >>> bins = symexp_bins(5, limit=2.0)
    >>> encoded = two_hot_encode(torch.tensor([0.5, -10.0]), bins)
    >>> (encoded * bins).sum(-1)  # the expectation is the (saturated) target
    tensor([ 0.5000, -6.3891])
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from tdict import scalar_like
from tdict.validation import check_int, check_positive

__all__ = [
    "categorical_kl_balanced",
    "categorical_kl_terms",
    "straight_through_categorical",
    "symexp",
    "symexp_bins",
    "symlog",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
    "unimix_probs",
]


def symlog(value: torch.Tensor) -> torch.Tensor:
    """``sign(x) * log(1 + |x|)`` element-wise (its derivative at 0 is 1).

    Examples:
        >>> symlog(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-4.6151,  0.0000,  4.6151])
    """
    # at 0 the identity branch carries the derivative 1 (sign's own derivative would give 0)
    return torch.where(value == 0, value, value.sign() * torch.log1p(value.abs()))


def symexp(value: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`symlog`: ``sign(x) * (exp(|x|) - 1)``.

    Examples:
        >>> symexp(symlog(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """
    return torch.where(value == 0, value, value.sign() * torch.expm1(value.abs()))


def symexp_bins(
    num_bins: int = 255,
    *,
    limit: float = 20.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """DreamerV3's two-hot support: ``symexp`` of ``num_bins`` points evenly spaced over ``[-limit, limit]``.

    The negative half is computed and mirrored, so the support is exactly symmetric (and holds 0
    exactly when ``num_bins`` is odd).

    Examples:
        >>> symexp_bins(5, limit=1.0)
        tensor([-1.7183, -0.6487,  0.0000,  0.6487,  1.7183])
    """
    check_int("symexp_bins", "num_bins", num_bins, minimum=2)
    check_positive("symexp_bins", "limit", limit)
    grid = torch.linspace(-limit, limit, num_bins, dtype=torch.float64)
    half = symexp(grid[: num_bins // 2])
    middle = torch.zeros(num_bins % 2, dtype=torch.float64)
    bins = torch.cat((half, middle, -half.flip(0)))
    return bins.to(device=device, dtype=dtype or torch.get_default_dtype())


def _check_support(bins: torch.Tensor, what: str) -> None:
    if bins.ndim != 1 or bins.numel() < 2:
        raise ValueError(
            f"{what}: bins must be a 1-D ascending tensor of at least 2 values, got shape {list(bins.shape)}."
        )


def two_hot_encode(x: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """``x`` (raw values) as weights on the two support points around each: shape ``[*x.shape, K]``.

    With ``b_k <= x < b_{k+1}`` the weights are ``(b_{k+1} - x) / (b_{k+1} - b_k)`` on ``b_k`` and
    the rest on ``b_{k+1}``, so that ``sum(w * bins) == x``; values outside the support saturate
    at its ends.

    Examples:
        >>> two_hot_encode(torch.tensor([0.25]), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([[0.0000, 0.7500, 0.2500]])
    """
    _check_support(bins, "two_hot_encode")
    bins = bins.to(device=x.device, dtype=x.dtype)
    x = torch.minimum(torch.maximum(x, bins[0]), bins[-1])
    lower = (torch.searchsorted(bins, x.contiguous(), right=True) - 1).clamp(0, bins.numel() - 2)
    low, high = bins[lower], bins[lower + 1]
    upper_weight = (x - low) / (high - low)
    size = bins.numel()
    return F.one_hot(lower, size).to(x.dtype) * (1 - upper_weight).unsqueeze(-1) + F.one_hot(lower + 1, size).to(
        x.dtype
    ) * upper_weight.unsqueeze(-1)


def two_hot_decode(logits: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """The expectation ``sum(softmax(logits) * bins)`` over the last dim.

    The support's mirrored halves are added pairwise first, so a distribution symmetric around a
    symmetric support decodes to exactly 0 whatever the magnitudes of the bins.

    Examples:
        >>> bins = torch.tensor([-1.0, 0.0, 1.0])
        >>> two_hot_decode(two_hot_encode(torch.tensor([0.25]), bins).add(1e-8).log(), bins)
        tensor([0.2500])
    """
    _check_support(bins, "two_hot_decode")
    if logits.shape[-1] != bins.numel():
        raise ValueError(
            f"two_hot_decode: the logits' last dim ({logits.shape[-1]}) must equal the number of bins ({bins.numel()})."
        )
    bins = bins.to(device=logits.device, dtype=logits.dtype)
    weighted = torch.softmax(logits, dim=-1) * bins
    half = bins.numel() // 2
    pairs = weighted[..., :half] + weighted[..., bins.numel() - half :].flip(-1)
    total = pairs.sum(-1)
    return total + weighted[..., half] if bins.numel() % 2 else total


def two_hot_cross_entropy(logits: torch.Tensor, target: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """``-sum(two_hot_encode(target) * log_softmax(logits))`` per value (target ``[*B]`` or ``[*B, 1]``).

    Examples:
        >>> two_hot_cross_entropy(torch.zeros(2, 3), torch.tensor([-0.5, 0.5]), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([1.0986, 1.0986])
    """
    batch = logits.shape[:-1]
    if target.shape == (*batch, 1):
        target = target.squeeze(-1)
    if target.shape != batch:
        raise ValueError(
            f"two_hot_cross_entropy: target must have shape {list(batch)} or {[*batch, 1]} (the logits' batch), "
            f"got {list(target.shape)}."
        )
    return -(two_hot_encode(target, bins) * torch.log_softmax(logits, dim=-1)).sum(-1)


def unimix_probs(logits: torch.Tensor, unimix: float = 0.01) -> torch.Tensor:
    """``(1 - unimix) * softmax(logits) + unimix / num_classes``: no class below ``unimix / num_classes``.

    Examples:
        >>> unimix_probs(torch.tensor([0.0, -1e9]), 0.1)
        tensor([0.9500, 0.0500])
    """
    if not 0.0 <= unimix < 1.0:
        raise ValueError(f"unimix_probs: unimix must be in [0, 1), got {unimix!r}.")
    probs = torch.softmax(logits, dim=-1)
    return probs if unimix == 0 else _mix_uniform(probs, unimix)


def _mix_uniform(probs: torch.Tensor, unimix: float) -> torch.Tensor:
    """``(1 - unimix) * probs + unimix / num_classes`` (the numbers as tensors made once: a
    Python number is converted at every call)."""
    return probs.mul(scalar_like(1.0 - unimix, probs)).add_(scalar_like(unimix / probs.shape[-1], probs))


def straight_through_categorical(probs: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """A one-hot draw from each categorical of ``probs`` (last dim), whose gradient is that of ``probs``.

    Examples:
        >>> probs = torch.tensor([[0.0, 1.0, 0.0]], requires_grad=True)
        >>> sample = straight_through_categorical(probs)
        >>> sample.tolist()
        [[0.0, 1.0, 0.0]]
        >>> sample.sum().backward(); probs.grad
        tensor([[1., 1., 1.]])
    """
    return _straight_through_draw(probs, generator)[0]


def _straight_through_draw(
    probs: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`straight_through_categorical` and the classes drawn, ``[...]`` (int64)."""
    detached = probs.detach()
    index = _categorical_index(detached, generator)
    one_hot = torch.zeros_like(detached).scatter_(-1, index.unsqueeze(-1), 1.0)
    return one_hot + (probs - detached), index  # exactly the one-hot values, the probabilities' gradient


def _categorical_index(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One class index per categorical of ``probs`` (last dim, unnormalised), by inverting the
    cumulative distribution at a uniform draw: one random number per categorical, where
    ``torch.multinomial`` draws one per class. The index is the number of cumulative values at or
    below the draw (a binary search: the cumulative sums of non-negative values never decrease). A
    class of zero probability is never drawn (its cumulative value equals its predecessor's), and the
    last cumulative value, divided by itself, is exactly 1, above every uniform draw. On the CPU a
    categorical without a finite, positive total raises (elsewhere the check would wait for the
    device at every draw)."""
    cdf = probs.cumsum(-1)
    total = cdf[..., -1:]
    if total.device.type == "cpu" and not torch.compiler.is_compiling() and total.numel():
        low, high = torch.aminmax(total)  # NaN propagates to both
        if not (low.item() > 0 and high.item() < math.inf):
            raise ValueError(
                "straight_through_categorical: every categorical needs a finite, positive total probability."
            )
    uniform = torch.rand(total.shape, generator=generator, dtype=probs.dtype, device=probs.device)
    return torch.searchsorted(cdf / total, uniform, right=True).squeeze(-1)


def _check_latents(posterior_logits: torch.Tensor, prior_logits: torch.Tensor, what: str) -> None:
    if posterior_logits.shape != prior_logits.shape or posterior_logits.ndim < 2:
        raise ValueError(
            f"{what}: posterior and prior logits must have the same shape [..., num_categoricals, num_classes], "
            f"got {list(posterior_logits.shape)} and {list(prior_logits.shape)}."
        )


def categorical_kl_terms(
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    free_nats: float = 1.0,
    unimix: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DreamerV3's dynamics and representation losses, each a scalar mean over the batch.

    With ``q`` the posterior and ``p`` the prior (each categorical mixed with ``unimix`` of
    uniform) and ``KL`` summed over every categorical of the latent:

    - dynamics: ``max(free_nats, KL(sg(q) || p))``, which trains the prior;
    - representation: ``max(free_nats, KL(q || sg(p)))``, which trains the posterior.

    With gradients (outside the compiler) the KL and both gradients come in closed form from one
    pass over the logits (:func:`_balanced_kl`); each term stays its own autograd node, not twice
    differentiable.

    Examples:
        >>> q = torch.zeros(2, 4, 8)
        >>> dynamics, representation = categorical_kl_terms(q, q.clone(), free_nats=0.0)
        >>> float(dynamics), float(representation)
        (0.0, 0.0)
    """
    _check_latents(posterior_logits, prior_logits, "categorical_kl_terms")
    if not 0.0 <= unimix < 1.0:
        raise ValueError(f"categorical_kl_terms: unimix must be in [0, 1), got {unimix!r}.")
    if torch.compiler.is_compiling() or not torch.is_grad_enabled():
        q = unimix_probs(posterior_logits, unimix)
        p = unimix_probs(prior_logits, unimix)
        log_q, log_p = q.log(), p.log()
        dynamics = (q.detach() * (log_q.detach() - log_p)).sum((-2, -1))
        representation = (q * (log_q - log_p.detach())).sum((-2, -1))
    else:
        dynamics, representation = _balanced_kl(posterior_logits, prior_logits, unimix)
    if free_nats:
        dynamics, representation = dynamics.clamp_min(free_nats), representation.clamp_min(free_nats)
    return dynamics.mean(), representation.mean()


class _KLSide(torch.autograd.Function):
    """One side of :func:`categorical_kl_terms`: the KL ``[...]`` computed outside, its gradient
    with respect to ``logits`` (one side's) the precomputed ``unit`` (the gradient of each KL)
    times the incoming one. Each side is its own node, so either loss may be differentiated
    alone."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: torch.Tensor, kl: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return kl.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[2])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        (unit,) = ctx.saved_tensors
        return unit * grad[..., None, None], None, None


def _balanced_kl(
    posterior_logits: torch.Tensor, prior_logits: torch.Tensor, unimix: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dynamics and representation KLs ``[...]`` (before free nats) with their gradients in
    closed form, in a few passes over the logits (each new tensor of the size of the logits is a
    pass, and often fresh pages): with ``s`` a softmax, ``q = (1 - u) s_q + u / K``, ``d = log q -
    log p``,

    - representation, to the posterior logits: ``(1 - u) s_q (d - <s_q, d>)``;
    - dynamics, to the prior logits: ``-(1 - u) s_p (q / p - <s_p, q / p>)``

    (``<., .>`` over each categorical's classes)."""
    with torch.no_grad():
        soft_q, soft_p = torch.softmax(posterior_logits, -1), torch.softmax(prior_logits, -1)
        q, p = _mix_uniform(soft_q, unimix), _mix_uniform(soft_p, unimix)
        difference = q.log().sub_(p.log())
        kl = torch.linalg.vecdot(q, difference).sum(-1)
        representation_unit = dynamics_unit = None
        if posterior_logits.requires_grad:  # (in place: the difference is not needed after)
            unit = difference.sub_(torch.linalg.vecdot(soft_q, difference).unsqueeze(-1))
            representation_unit = unit.mul_(soft_q).mul_(1.0 - unimix)
        if prior_logits.requires_grad:
            ratio = q.div_(p)
            unit = ratio.sub_(torch.linalg.vecdot(soft_p, ratio).unsqueeze(-1))
            dynamics_unit = unit.mul_(soft_p).mul_(unimix - 1.0)
    dynamics = kl if dynamics_unit is None else _KLSide.apply(prior_logits, kl, dynamics_unit)
    representation = kl if representation_unit is None else _KLSide.apply(posterior_logits, kl, representation_unit)
    return dynamics, representation


def categorical_kl_balanced(
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    alpha: float = 0.8,
    free_bits: float = 1.0,
) -> torch.Tensor:
    """DreamerV2's balanced KL: ``alpha * KL(sg(q) || p) + (1 - alpha) * KL(q || sg(p))``, a scalar.

    Each categorical's KL is floored at ``free_bits`` and the floors averaged over categoricals
    and batch (probabilities floored at 1e-8).

    Examples:
        >>> q = torch.zeros(2, 4, 8)
        >>> float(categorical_kl_balanced(q, q.clone(), free_bits=0.5))
        0.5
    """
    _check_latents(posterior_logits, prior_logits, "categorical_kl_balanced")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"categorical_kl_balanced: alpha must be in [0, 1], got {alpha!r}.")
    q = torch.softmax(posterior_logits, dim=-1).clamp_min(1e-8)
    p = torch.softmax(prior_logits, dim=-1).clamp_min(1e-8)
    log_q, log_p = q.log(), p.log()
    prior_term = (q.detach() * (log_q.detach() - log_p)).sum(-1).clamp_min(free_bits).mean()
    posterior_term = (q * (log_q - log_p.detach())).sum(-1).clamp_min(free_bits).mean()
    return alpha * prior_term + (1.0 - alpha) * posterior_term
