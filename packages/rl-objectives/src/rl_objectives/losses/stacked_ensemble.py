"""An ensemble of linear networks run as one batched call: every parameter set at once.

A loss trains an ensemble (SAC's twin critics, REDQ's ten) as one network whose parameters are
stacked over the sets. Running the sets one after the other costs one call per set, plus unbinding
the stacked parameters and stacking the outputs (forward and backward). When every parameter of the
network lives in plain ``nn.Linear`` and ``nn.LayerNorm`` layers, the sets can instead run
together, as ``torch.vmap`` would run them: the inputs get a leading dim of the sets' size (expanded,
no copy), each linear layer becomes one batched product with its stacked weight (``torch.baddbmm``)
and each layer norm scales by its stacked weight. The other layers hold no parameters and see that
leading dim as one more batch dim.

That holds only for layers that treat leading dims alike, which code cannot tell; so the loss runs
a new input signature both ways once and keeps the batched call only when it gives the loop's
values (:func:`stacked_matches`). It is also kept only for layers small enough that it is the
faster way (:meth:`LinearStack.pays_off`: on the CPU, large batched products are slower than a
product per set).

Examples:
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    >>> slots = [(net[i]._parameters, name) for i in (0, 2) for name in ("weight", "bias")]
    >>> stack = LinearStack.of(net, slots)
    >>> weights = [torch.randn(2, 8, 3), torch.randn(2, 8), torch.randn(2, 1, 8), torch.randn(2, 1)]
    >>> x = torch.randn(5, 3)
    >>> out = stack.run(weights, net, (x,))
    >>> out.shape  # [sets, batch, 1]
    torch.Size([2, 5, 1])
    >>> loop = torch.stack([nn.functional.linear(torch.tanh(nn.functional.linear(x, weights[0][i], weights[1][i])),
    ...                                          weights[2][i], weights[3][i]) for i in range(2)])
    >>> torch.allclose(out, loop, atol=1e-5)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["LinearStack", "stacked_matches", "transformed"]


class _StandIn(nn.Module):
    """Stands in for one layer during a stacked call, with its stacked ``weight`` and ``bias``
    (plain attributes, filled by :meth:`LinearStack.run` and emptied after)."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        vars(self).update(weight=None, bias=None)

    def _sets(self, x: torch.Tensor, tail: int) -> int:
        """The number of sets, checked against ``x``'s leading dim (``tail``: the dims the layer reads)."""
        stacked = self.weight if self.weight is not None else self.bias
        sets = 1 if stacked is None else stacked.shape[0]
        if x.ndim < tail + 1 or x.shape[0] != sets:
            raise RuntimeError(
                f"a stacked {type(self).__name__} expects a leading dim of {sets} parameter sets before its "
                f"{tail} feature dim(s), got an input of shape {tuple(x.shape)}."
            )
        return sets


class _StackedLinear(_StandIn):
    """``nn.Linear``: ``x`` of shape ``[sets, *batch, in]`` times the stacked ``weight``
    ``[sets, out, in]``, plus ``bias`` ``[sets, out]`` (or ``None``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        assert weight is not None  # (every linear layer's weight is a leaf: LinearStack.of checks)
        sets = self._sets(x, 1)
        flat = x if x.ndim == 3 else x.reshape(sets, -1, x.shape[-1])
        out = torch.bmm(flat, weight.mT) if bias is None else torch.baddbmm(bias.unsqueeze(1), flat, weight.mT)
        return out if x.ndim == 3 else out.view(*x.shape[:-1], weight.shape[1])

    # an internal stand-in has no hooks: its parent's call goes straight to forward
    __call__ = forward  # pyright: ignore[reportAssignmentType]


class _StackedLayerNorm(_StandIn):
    """``nn.LayerNorm``: normalised over its trailing dims, then scaled and shifted by the stacked
    ``weight`` and ``bias`` (``[sets, *normalized_shape]``, either may be ``None``)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__(layer)
        assert isinstance(layer, nn.LayerNorm)
        self.normalized_shape, self.eps = tuple(layer.normalized_shape), layer.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normalized = torch.nn.functional.layer_norm(x, self.normalized_shape, None, None, self.eps)
        weight, bias = self.weight, self.bias
        if weight is None and bias is None:
            return normalized
        features = len(self.normalized_shape)
        sets = self._sets(x, features)
        shape = (sets, *([1] * (x.ndim - 1 - features)), *self.normalized_shape)
        if weight is None:
            return normalized + bias.view(shape)  # pyright: ignore[reportOptionalMemberAccess]
        if bias is None:
            return normalized * weight.view(shape)
        return torch.addcmul(bias.view(shape), normalized, weight.view(shape))

    __call__ = forward  # pyright: ignore[reportAssignmentType]


# the layers with parameters a stacked call runs, and their stand-ins
_STAND_INS: dict[type, type[_StandIn]] = {nn.Linear: _StackedLinear, nn.LayerNorm: _StackedLayerNorm}

# Measured on the CPU (torch 2.13, MKL, one thread; SACLoss with twin critics of two hidden layers,
# interleaved A/B against the loop): the stacked call's step is 0.90x the loop's at 64 wide and
# batch 256, 0.95x at 256 wide and batch 64, about even at 256 x 256 or 128 wide x 1024 rows, and
# 1.05x at 512 wide (MKL's batched product is the slower one for large layers): past these bounds
# the loop serves.
_MAX_WEIGHT = 256 * 256  # elements of one set's weight, per linear layer
_MAX_ROWS_TIMES_WIDTH = 131_072  # batch rows times the widest linear layer


def transformed() -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``, ...) is running: the probe's
    comparison reads values, which a transform's tensors do not allow, so the loop serves."""
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)  # pyright: ignore[reportAttributeAccessIssue]  # private torch API
    return peek is not None and peek() is not None


def _registers_tensors(module: nn.Module) -> bool:
    """Whether ``module`` registers a parameter or buffer of its own (a loss's copy keeps its
    network's tensors as plain attributes instead: those are found through the slots)."""
    return any(value is not None for value in (*module._parameters.values(), *module._buffers.values()))


def _hooked(module: nn.Module) -> bool:
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


class LinearStack:
    """Where a network's ``nn.Linear`` (and ``nn.LayerNorm``) layers sit, and a stand-in for each: :meth:`run` puts the
    stand-ins in their parents' places, fills them with the stacked weights and biases, calls the
    network, and puts the layers back. Built by :meth:`of`, which says whether the network qualifies.
    """

    def __init__(
        self,
        modules: list[nn.Module],
        places: list[tuple[dict, str, nn.Module, _StandIn]],
        fills: list[tuple[_StandIn, str]],
    ) -> None:
        self._modules = modules  # every module of the network
        self._places = places  # (the parent's _modules, the child's name, the layer, its stand-in)
        self._fills = fills  # per leaf: (the stand-in it fills, "weight" or "bias")

    @classmethod
    def of(cls, network: nn.Module, slots: Sequence[tuple[dict, str]]) -> LinearStack | None:
        """The stack of ``network`` whose leaves sit in ``slots`` (per leaf: the dict holding it and
        its name, as ``LossModule``'s swap plan has them). ``None`` when a parameter or buffer lives
        outside a plain ``nn.Linear`` or ``nn.LayerNorm`` (a subclass, a parametrized layer, a batch
        norm, a convolution), when a layer is reached twice, or when no layer has parameters."""
        places, owners = [], {}  # owners: id of a dict that may hold a layer's tensors -> (layer, stand-in)
        modules = list(network.modules())
        for parent in modules:
            if type(parent) not in _STAND_INS and _registers_tensors(parent):
                return None
            for name, child in parent._modules.items():
                make = _STAND_INS.get(type(child))
                if (
                    child is None
                    or make is None
                    or (getattr(child, "weight", None) is None and getattr(child, "bias", None) is None)
                ):
                    continue  # (a layer without parameters, such as a LayerNorm without affine, runs as it is)
                if id(child._parameters) in owners:
                    return None
                stand_in = make(child)
                # (a loss keeps a network's tensors as plain attributes: the layer's __dict__)
                owners[id(child._parameters)] = owners[id(child.__dict__)] = (child, stand_in)
                places.append((parent._modules, name, child, stand_in))
        fills, filled = [], set()
        for holder, name in slots:
            found = owners.get(id(holder))
            if found is None or name not in ("weight", "bias"):
                return None
            fills.append((found[1], name))
            filled.add((id(found[0]), name))
        for _, _, layer, _ in places:  # every tensor a layer uses comes from the leaves
            if any(
                getattr(layer, name, None) is not None and (id(layer), name) not in filled
                for name in ("weight", "bias")
            ):
                return None
        return cls(modules, places, fills) if places else None

    def intact(self) -> bool:
        """Whether each layer is still in its place and no module has hooks (checked at every call:
        the stand-ins would skip a layer's hooks, and the others would see the sets' dim)."""
        return all(holder.get(name) is layer for holder, name, layer, _ in self._places) and not any(
            map(_hooked, self._modules)
        )

    def run(self, leaves: Sequence[torch.Tensor], call: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> Any:
        """``call(*inputs)`` with every set at once: the leaves (stacked over the sets, in the order
        of the slots given to :meth:`of`) fill the stand-ins, and the inputs are expanded over the
        sets. Returns what ``call`` returns (its values with the sets' leading dim)."""
        sets = leaves[0].shape[0]
        for (stand_in, name), leaf in zip(self._fills, leaves):
            vars(stand_in)[name] = leaf  # (plain attributes: nn.Module would register a Parameter)
        for holder, name, _, stand_in in self._places:
            holder[name] = stand_in
        try:
            return call(*[x.expand(sets, *x.shape) for x in inputs])
        finally:
            for holder, name, layer, stand_in in self._places:
                holder[name] = layer
                vars(stand_in).update(weight=None, bias=None)  # (no reference to the leaves kept between calls)

    def pays_off(self, leaves: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> bool:
        """Whether the stacked call is expected to be the faster one for these leaves and inputs:
        its linear layers have at most ``_MAX_WEIGHT`` weights each, and rows times the widest
        layer stay under ``_MAX_ROWS_TIMES_WIDTH`` (past those, one batched product per layer was
        measured slower than a product per set)."""
        weights = [
            leaf.shape[1:]
            for (stand_in, name), leaf in zip(self._fills, leaves)
            if name == "weight" and type(stand_in) is _StackedLinear
        ]
        rows = max((x.shape[:-1].numel() for x in inputs), default=1)
        largest = max((shape.numel() for shape in weights), default=0)
        width = max((max(shape) for shape in weights), default=0)
        return largest <= _MAX_WEIGHT and rows * width <= _MAX_ROWS_TIMES_WIDTH

    def probe(
        self, leaves: Sequence[torch.Tensor], call: Callable[..., Any], inputs: Sequence[torch.Tensor], loop: Callable
    ) -> bool:
        """Whether :meth:`run` gives what ``loop()`` (the sets one after the other, on the same
        leaves and inputs) gives (see :func:`stacked_matches`). Both run without gradients and on a
        forked random state, so that the draws after the probe are the ones without it; a stacked
        call that raises does not match."""
        device = leaves[0].device
        devices, kind = ([], "cuda") if device.type == "cpu" else ([device], device.type)
        with torch.random.fork_rng(devices=devices, device_type=kind), torch.no_grad():
            try:
                candidate = self.run(leaves, call, inputs)
            except Exception:  # noqa: BLE001  (a layer that needs the loop: the loop then serves)
                return False
            reference = loop()
        return stacked_matches(reference, candidate)


def stacked_matches(reference: torch.Tensor, candidate: Any) -> bool:
    """Whether a stacked call's ``candidate`` gives the loop's ``reference``: same shape and dtype,
    and the same values up to the rounding of a different product order (relative and absolute
    ``sqrt(eps)`` of the dtype, the absolute part scaled by the mean magnitude, at least 1)."""
    if not isinstance(candidate, torch.Tensor) or candidate.shape != reference.shape:
        return False
    if candidate.dtype != reference.dtype or candidate.device != reference.device:
        return False
    reference, candidate = reference.detach(), candidate.detach()
    if not reference.is_floating_point():
        return bool(torch.equal(reference, candidate))
    if reference.numel() == 0:
        return True
    tol = torch.finfo(reference.dtype).eps ** 0.5
    scale = float(reference.nan_to_num(0.0, 0.0, 0.0).abs().mean().clamp_min(1.0))
    return bool(torch.allclose(candidate, reference, rtol=tol, atol=tol * scale, equal_nan=True))
