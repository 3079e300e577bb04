"""Autograd over a whole collection: ``data``, ``grad`` and ``backward``, as tensordict 0.14 has them.

``td.data`` and ``td.grad`` are collections of the leaves' ``.data`` and ``.grad`` (leaves without
a gradient are left out, ``None`` when none has one), locked when ``td`` is; both can be assigned,
leaf by matching key. ``td.backward()`` runs one
``torch.autograd.backward`` over every differentiable leaf: a collection of loss terms is
back-propagated as their sum, or with ``gradient=`` weights matched by key.
"""

# Mixin of TensorDictBase: the attributes it reads (apply, items, ...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import Any, Sequence

import torch

from .locking import keep_lock
from .utils import is_tensor_collection


def _differentiable(td: Any) -> tuple[list, list]:
    keys, leaves = [], []
    for key, leaf in td.items(True, True):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            keys.append(key)
            leaves.append(leaf)
    return keys, leaves


class AutogradMixin:
    __slots__ = ()

    @property
    def data(self) -> Any:
        """A collection of the leaves' ``.data`` (same storage, outside the autograd graph).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> w = torch.ones(2, requires_grad=True)
            >>> td = TensorDict(w=w)
            >>> td.data["w"].requires_grad, td.data["w"].data_ptr() == w.data_ptr()
            (False, True)
        """
        return keep_lock(self, self.apply(lambda leaf: leaf.data))

    @data.setter
    def data(self, value: Any) -> None:
        self._assign_by_key("data", value, lambda leaf, new: setattr(leaf, "data", new))

    @property
    def grad(self) -> Any:
        """A collection of the leaves' ``.grad``; leaves without a gradient are left out (``None``
        when no leaf has one, as in tensordict).

        Assigning one sets each matching leaf's gradient (copied into an existing one).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> w, b = torch.ones(2, requires_grad=True), torch.zeros(2, requires_grad=True)
            >>> td = TensorDict(w=w, b=b)
            >>> (3 * w).sum().backward()
            >>> list(td.grad.keys()), td.grad["w"].tolist()
            (['w'], [3.0, 3.0])
        """
        grads = self.apply(lambda leaf: leaf.grad, filter_empty=True)
        return None if grads is None else keep_lock(self, grads)

    @grad.setter
    def grad(self, value: Any) -> None:
        def assign(leaf: torch.Tensor, new: torch.Tensor) -> None:
            if leaf.grad is None:
                leaf.grad = new
            else:
                leaf.grad.copy_(new)

        self._assign_by_key("grad", value, assign)

    def _assign_by_key(self, what: str, value: Any, assign: Any) -> None:
        if not is_tensor_collection(value):
            raise TypeError(f"{what} = value: expected a TensorDict of the same keys, got {type(value).__name__}.")
        own = dict(self.items(True, True))
        pairs = list(value.items(True, True))
        absent = [key for key, _ in pairs if key not in own]
        if absent:
            raise KeyError(
                f"{what} = value: keys {absent} are not leaves of this TensorDict; its leaves are {list(own)}."
            )
        for key, new in pairs:
            if own[key].shape != new.shape:
                raise ValueError(
                    f"{what} = value: key {key!r} has shape {list(new.shape)}, the leaf has {list(own[key].shape)}."
                )
        for key, new in pairs:
            assign(own[key], new)

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Any = None,
    ) -> None:
        """Back-propagate every differentiable leaf in one ``torch.autograd.backward`` call.

        Without ``gradient`` every differentiable leaf must hold one element and gets the
        implicit gradient 1 (``td.backward()`` equals ``sum(td.values()).backward()``);
        otherwise ``gradient`` is a TensorDict holding, for each differentiable leaf, a tensor of
        its shape under the same key. Leaves that do not require grad are skipped. ``inputs`` (a
        TensorDict or tensors) restricts which graph leaves accumulate ``.grad``.

        Raises:
            RuntimeError: no leaf requires grad.
            ValueError: a leaf has several elements and no ``gradient``; a gradient's shape differs.
            KeyError: ``gradient`` lacks a differentiable leaf's key.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
            >>> losses = TensorDict(actor=x.sum(), critic=x.pow(2).sum(), step=torch.tensor(3))
            >>> losses.backward()
            >>> x.grad.tolist()
            [3.0, 5.0]
        """
        keys, leaves = _differentiable(self)
        if not leaves:
            raise RuntimeError("backward: no leaf of this TensorDict requires grad (was it computed under no_grad?).")
        if gradient is None:
            many = [key for key, leaf in zip(keys, leaves) if leaf.numel() != 1]
            if many:
                raise ValueError(
                    f"backward: leaves {many} hold several elements; pass gradient= (a TensorDict of their shapes)."
                )
            grads = None
        else:
            if not is_tensor_collection(gradient):
                raise TypeError(f"backward: gradient must be a TensorDict, got {type(gradient).__name__}.")
            grads = []
            for key, leaf in zip(keys, leaves):
                grad = gradient.get(key, None)
                if grad is None:
                    raise KeyError(f"backward: gradient has no entry {key!r} for that differentiable leaf.")
                if grad.shape != leaf.shape:
                    raise ValueError(
                        f"backward: gradient {key!r} has shape {list(grad.shape)}, the leaf has {list(leaf.shape)}."
                    )
                grads.append(grad)
        if inputs is not None and is_tensor_collection(inputs):
            inputs = [leaf for _, leaf in inputs.items(True, True) if isinstance(leaf, torch.Tensor)]
        elif inputs is not None:
            inputs = list(_as_tensors(inputs))
        torch.autograd.backward(leaves, grads, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)


def _as_tensors(inputs: Sequence[Any]) -> Sequence[torch.Tensor]:
    bad = [type(t).__name__ for t in inputs if not isinstance(t, torch.Tensor)]
    if bad:
        raise TypeError(f"backward: inputs must be a TensorDict or tensors, got {bad}.")
    return inputs
