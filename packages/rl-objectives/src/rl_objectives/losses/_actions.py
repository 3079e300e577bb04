"""How the losses read actions: one version of each rule, shared by the value-based and SAC-family losses.

Discrete actions (DQN, QMixer, discrete SAC / IQL / CQL): the action space (an index,
``"categorical"``, or a (multi-)one-hot vector, ``"one_hot"``) comes from a name, a spec or the
network; the stored action is checked against the ``[..., n]`` action values and its entry picked;
a categorical policy gives its probabilities and their logs.

Continuous actions (SAC, REDQ, CQL): a reparameterised draw from the actor with its batch-shaped
log-prob, and the ``"auto"`` entropy target ``-prod(action shape)``.

Every helper takes ``owner``, the loss class's name, which opens its error messages.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from tdict.specs import Categorical, Composite, MultiOneHot, OneHot
from tdict.nn import CompositeDistribution
from tdict.nn import sum_to_batch as _sum_to_batch

from .utils import _check_batch_shaped

# the names a loss accepts for its action space, and the two ways it reads a stored action
ACTION_SPACES = {
    "one_hot": "one_hot",
    "one-hot": "one_hot",
    "mult_one_hot": "one_hot",
    "multi_one_hot": "one_hot",
    "categorical": "categorical",
}


def action_leaf_spec(spec: Any, action_key: Any) -> Any:
    """The action's own spec: ``spec``, or its ``action_key`` entry if it is a ``Composite``
    (``None`` when that entry is missing or ``spec`` is ``None``)."""
    if isinstance(spec, Composite):
        return spec[action_key] if action_key in spec else None  # noqa: SIM401 (a spec, not a dict)
    return spec


def _space_of_spec(owner: str, spec: Any, where: str) -> str:
    if isinstance(spec, (OneHot, MultiOneHot)):
        return "one_hot"
    if isinstance(spec, Categorical):
        return "categorical"
    raise ValueError(
        f"{owner}: cannot read an action space from {where} ({type(spec).__name__}); expected OneHot, MultiOneHot or Categorical."
    )


def resolve_action_space(owner: str, action_space: Any, action_key: Any, network: Any = None) -> str | None:
    """``"one_hot"`` or ``"categorical"`` from a name or a spec given as ``action_space``.

    With ``action_space=None`` the ``network`` (when given) decides: a submodule's ``action_space``
    attribute (a ``QValueModule``'s), else its ``spec``; otherwise ``None``, and each call decides
    from the stored action's shape (see :func:`check_discrete_action`).
    """
    if isinstance(action_space, str):
        if action_space not in ACTION_SPACES:
            raise ValueError(
                f"{owner}: action_space must be one of {sorted(ACTION_SPACES)} or a spec, got {action_space!r}."
            )
        return ACTION_SPACES[action_space]
    if action_space is not None:
        if isinstance(action_space, Composite) and action_key not in action_space:
            raise ValueError(f"{owner}: the action_space Composite spec has no {action_key!r} entry.")
        return _space_of_spec(owner, action_leaf_spec(action_space, action_key), "the action_space spec")
    if network is None:
        return None
    for module in network.modules():
        found = getattr(module, "action_space", None)
        if isinstance(found, str) and found in ACTION_SPACES:
            return ACTION_SPACES[found]
    spec = action_leaf_spec(getattr(network, "spec", None), action_key)
    return None if spec is None else _space_of_spec(owner, spec, "the network's spec")


def check_action_values(owner: str, values: torch.Tensor, batch: torch.Size, key: Any) -> None:
    """Check that one network's action values ``values`` are ``[*batch, n]``."""
    if values.shape[:-1] != batch:
        raise ValueError(
            f"{owner}: {key!r} has shape {tuple(values.shape)}, expected the batch shape {tuple(batch)} plus the number of actions."
        )


def check_discrete_action(
    owner: str, space: str | None, action: torch.Tensor, values_shape: torch.Size, key: Any
) -> str:
    """Check the stored ``action`` against action values of shape ``values_shape`` (``[*lead, n]``)
    and return its space.

    An index has the shape ``values_shape[:-1]``, a one-hot vector the shape ``values_shape``;
    ``space=None`` decides from the shape.
    """
    index_shape = values_shape[:-1]
    if space is None:
        if action.shape == index_shape:
            space = "categorical"
        elif action.shape == values_shape:
            space = "one_hot"
    expected = index_shape if space == "categorical" else values_shape
    if space is None or action.shape != expected:
        raise ValueError(
            f"{owner}: the action {key!r} has shape {tuple(action.shape)}; expected {tuple(index_shape)} (indices) "
            f"or {tuple(values_shape)} (one-hot over the action values){'' if space is None else f' for action_space={space!r}'}."
        )
    if space == "categorical" and (action.is_floating_point() or action.dtype is torch.bool):
        raise ValueError(f"{owner}: a categorical action {key!r} must hold integer indices, got dtype {action.dtype}.")
    return space


def categorical_probs(
    owner: str, dist: Any, n_actions: int | None, batch: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """A categorical policy's ``[*batch, n]`` probabilities and their logs (``log 0`` read as
    ``log 1e-8``, as TorchRL)."""
    probs = getattr(dist, "probs", None)
    if probs is None:
        raise TypeError(
            f"{owner}: the actor's {type(dist).__name__} has no probs; use Categorical or OneHotCategorical."
        )
    if probs.shape[:-1] != batch or (n_actions is not None and probs.shape[-1] != n_actions):
        raise ValueError(
            f"{owner}: the actor's probabilities have shape {tuple(probs.shape)}, expected {tuple(batch)} plus "
            f"{'the number of actions' if n_actions is None else f'({n_actions},) (num_actions)'}."
        )
    # a masked action has probability 0: its log is finite so that 0 * log 0 contributes 0
    log_probs = torch.log(torch.where(probs == 0, torch.full_like(probs, 1e-8), probs))
    return probs, log_probs


class PolicyDraw(NamedTuple):
    """A reparameterised draw from the actor (see :func:`rsample_action`)."""

    td: Any  # a copy of the input, holding the actor's outputs and the drawn action
    action: Any  # a tensor, or a TensorDict for a composite policy
    log_prob: torch.Tensor  # batch-shaped: summed over the action's own dims
    dist: Any  # the distribution, e.g. to score other actions


def rsample_action(owner: str, actor: Any, swapped: Any, tensordict: Any, action_key: Any) -> PolicyDraw:
    """Draw a reparameterised action from ``actor`` on a copy of ``tensordict``; ``swapped`` is the
    context manager that puts the parameters to use into ``actor`` (:meth:`LossModule.swapped`)."""
    work = tensordict.copy()
    with swapped:
        dist = actor.get_dist(work)
    action, log_prob = rsample_with_log_prob(owner, dist, tensordict.batch_size)
    work.set(action_key, action)
    return PolicyDraw(work, action, log_prob, dist)


def rsample_with_log_prob(owner: str, dist: Any, batch_size: torch.Size) -> tuple[Any, torch.Tensor]:
    """``(a, log pi(a))``: a reparameterised draw from ``dist`` and its log-prob summed to the batch
    shape ``batch_size`` (checked)."""
    composite = isinstance(dist, CompositeDistribution)
    if composite or not dist.has_rsample:
        flat = [d for d in (dist.dists.values() if composite else (dist,)) if not d.has_rsample]
        if flat:
            raise ValueError(
                f"{owner}: the actor's {type(flat[0]).__name__} distribution has no rsample; a reparameterisable one is needed (e.g. TanhNormal)."
            )
    joint = None if composite else getattr(dist, "rsample_and_log_prob", None)
    if joint is not None:  # scores the draw itself (TanhNormal: no inverse tanh of a saturated sample)
        action, log_prob = joint()
        log_prob = _sum_to_batch(log_prob, len(batch_size))
    elif composite:  # a TensorDict action: its heads' log-probs summed
        action = dist.rsample()
        log_prob = dist.log_prob(action, aggregate_probabilities=True)
    else:
        action = dist.rsample()
        log_prob = _sum_to_batch(dist.log_prob(action), len(batch_size))
    if log_prob.shape != batch_size:
        _check_batch_shaped(owner, {"log_prob": log_prob}, batch_size)
    return action, log_prob


def on_live_rows(owner: str, tensordict: Any, done_key: Any, fn: Any) -> tuple:
    """TorchRL's ``skip_done_states``: ``fn`` (a TensorDict -> tuple of tensors) runs only on the
    rows of ``tensordict`` whose ``done_key`` entry is ``False``; the rows of done states get zeros.

    Returns ``fn``'s tensors laid out over the whole batch (``fn(tensordict)`` itself when no state
    is done). The done flag must have the batch shape.
    """
    done = tensordict.get(done_key, None)
    if done is None or not bool(done.any()):
        return fn(tensordict)
    _check_batch_shaped(owner, {done_key: done}, tensordict.batch_size)
    live = ~done
    outs = []
    for value in fn(tensordict[live]):
        full = value.new_zeros(tensordict.batch_size + value.shape[1:])
        full[live] = value
        outs.append(full)
    return tuple(outs)


def auto_target_entropy(action_shape: Any) -> float:
    """The ``"auto"`` entropy target of a continuous action: ``-prod(action shape)``."""
    return -float(math.prod(action_shape))


def _number_or_auto(owner: str, target_entropy: Any) -> float | None:
    """``target_entropy`` as a float, or ``None`` for ``"auto"``."""
    if isinstance(target_entropy, (int, float)) and not isinstance(target_entropy, bool):
        return float(target_entropy)
    if target_entropy != "auto":
        raise ValueError(f"{owner}: target_entropy must be a number or 'auto', got {target_entropy!r}.")
    return None


def continuous_target_entropy(
    owner: str, target_entropy: Any, action_spec: Any, actor_network: Any, action_key: Any
) -> float | None:
    """A number as given; ``"auto"``: :func:`auto_target_entropy` of the action spec (given or the
    actor's), or ``None`` when no spec is known (the loss then reads an action's shape on its first call)."""
    number = _number_or_auto(owner, target_entropy)
    if number is not None:
        return number
    spec = action_leaf_spec(
        action_spec if action_spec is not None else getattr(actor_network, "spec", None), action_key
    )
    return None if spec is None else auto_target_entropy(spec.shape)


def discrete_target_entropy(owner: str, target_entropy: Any, target_entropy_weight: float, num_actions: int) -> float:
    """A number as given; ``"auto"``: ``target_entropy_weight * log(num_actions)``, a fraction of the
    largest entropy of ``num_actions`` actions."""
    number = _number_or_auto(owner, target_entropy)
    if number is not None:
        return number
    if not 0 < target_entropy_weight <= 1:
        raise ValueError(f"{owner}: target_entropy_weight must be in (0, 1], got {target_entropy_weight!r}.")
    return float(target_entropy_weight * math.log(num_actions))
