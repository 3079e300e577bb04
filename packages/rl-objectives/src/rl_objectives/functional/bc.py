"""The math of behaviour cloning as plain tensor functions.

With ``a`` the dataset's action at state ``s`` (a target, detached by the caller) and ``pi`` the actor:

    bc_nll_loss             -log pi(a|s)                      (a probabilistic actor)
    bc_regression_loss      d(a_hat, a): (a_hat - a)^2 ("l2", "mse"), |a_hat - a| ("l1") or Huber
                            ("smooth_l1"), per action element (a deterministic prediction a_hat)
    bc_cross_entropy_loss   -log softmax(logits)[a]            (logits [*B, n]; a an index or one-hot)

Every loss is unreduced (per sample, or per action element for the regression); the caller
masks padding and reduces it.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.bc import bc_cross_entropy_loss, bc_regression_loss
    >>> bc_regression_loss(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]))
    tensor([1., 0.])
    >>> bc_cross_entropy_loss(torch.zeros(2, 4), torch.tensor([0, 3]))
    tensor([1.3863, 1.3863])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .distance import distance

__all__ = ["bc_cross_entropy_loss", "bc_nll_loss", "bc_regression_loss"]

_Tensor = torch.Tensor


def bc_nll_loss(log_prob: _Tensor) -> _Tensor:
    """The negative log-likelihood ``-log pi(a|s)`` of the data's action (``log_prob`` summed over the
    action's event dims, one value per sample).

    Examples:
        >>> import torch
        >>> d = torch.distributions.Normal(torch.zeros(2), torch.ones(2))
        >>> bc_nll_loss(d.log_prob(torch.tensor([0.0, 1.0])))
        tensor([0.9189, 1.4189])
    """
    return -log_prob


def bc_regression_loss(prediction: _Tensor, action: _Tensor, loss_function: str = "l2") -> _Tensor:
    """``d(a_hat, a)`` per action element: ``"l2"`` / ``"mse"`` (``(a_hat - a)^2``), ``"l1"`` or
    ``"smooth_l1"``; ``action`` is cast to the prediction's dtype.

    Examples:
        >>> import torch
        >>> bc_regression_loss(torch.tensor([[0.5, 3.0]]), torch.tensor([[0.0, 0.0]]), "smooth_l1")
        tensor([[0.1250, 2.5000]])
    """
    return distance(prediction, action.to(prediction.dtype), "l2" if loss_function == "mse" else loss_function)


def bc_cross_entropy_loss(logits: _Tensor, action: _Tensor) -> _Tensor:
    """``-log softmax(logits)[a]``, ``logits`` ``[*B, n]``; ``action`` a one-hot ``[*B, n]``, an
    index ``[*B]`` or an index ``[*B, 1]`` (TorchRL's layout). Returns ``[*B]``.

    Raises:
        ValueError: when ``action`` has none of these shapes.

    Examples:
        >>> import torch
        >>> logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
        >>> bc_cross_entropy_loss(logits, torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
        tensor([0.6931, 0.1269])
    """
    if action.shape == logits.shape:  # one-hot
        index = action.argmax(-1)
    elif action.shape == logits.shape[:-1]:
        index = action
    elif action.shape == logits.shape[:-1] + (1,):
        index = action.squeeze(-1)
    else:
        raise ValueError(
            f"bc_cross_entropy_loss: needs logits [*B, n] and an action index [*B] (or [*B, 1], or a one-hot "
            f"[*B, n]); got logits {tuple(logits.shape)} and the action {tuple(action.shape)}."
        )
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), index.reshape(-1).long(), reduction="none")
    return flat.reshape(index.shape)
