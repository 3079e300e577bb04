"""Noisy linear layers for exploration (Fortunato et al. 2017, "Noisy Networks for Exploration").

:class:`NoisyLinear` is a linear layer whose weights are ``mu + sigma * epsilon``: ``mu`` and ``sigma``
are learnt, ``epsilon`` is factorised Gaussian noise held in buffers, ``epsilon_W = f(e_out) f(e_in)^T``
and ``epsilon_b = f(e_out)`` with ``f(x) = sign(x) sqrt(|x|)`` and ``e ~ N(0, 1)``. The noise changes
only when :meth:`NoisyLinear.reset_noise` (or :func:`reset_noise` on a whole network) is called.

Names and arguments follow ``torchrl.modules`` (0.14): whether the noise is used is decided by the
interaction type (``tdict.nn.set_interaction_type``, TorchRL's ``set_exploration_type``): noise under
``RANDOM``, the mean weights otherwise (also when none is set). With ``use_exploration_type=False``
the layer follows ``train()`` / ``eval()`` instead (noise in training mode).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tdict.nn import InteractionType, interaction_type
from tdict.validation import check_positive_int
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

__all__ = ["NoisyLazyLinear", "NoisyLinear", "reset_noise"]


def _scaled_noise(size: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``f(e) = sign(e) * sqrt(|e|)`` for ``e ~ N(0, 1)`` of shape ``[size]``."""
    e = torch.randn(size, device=device, dtype=dtype)
    return e.sign() * e.abs().sqrt()


class NoisyLinear(nn.Linear):
    """A linear layer with learnt factorised Gaussian noise on its weights and bias.

    ``weight = weight_mu + weight_sigma * weight_epsilon`` and ``bias = bias_mu + bias_sigma *
    bias_epsilon`` when the noise is on, ``weight_mu`` / ``bias_mu`` when it is off. ``weight`` and
    ``bias`` are properties computed at each call, so gradients reach both ``mu`` and ``sigma``.

    Args:
        in_features: input size.
        out_features: output size.
        bias: whether the layer has a (noisy) bias.
        device: where the parameters and noise buffers are created.
        dtype: their dtype.
        std_init: initial ``sigma`` scale: ``weight_sigma = std_init / sqrt(in_features)`` and
            ``bias_sigma = std_init / sqrt(out_features)`` (default 0.5, the paper's and TorchRL's).
        use_exploration_type: ``True`` (default; ``None`` means the same): noise only under the
            ``RANDOM`` interaction type; ``False``: noise in training mode, none in eval mode.

    Examples:
        >>> import torch
        >>> from tdict.nn import InteractionType, set_interaction_type
        >>> from rl_objectives.modules import NoisyLinear
        >>> layer = NoisyLinear(3, 2)
        >>> x = torch.randn(4, 3)
        >>> torch.allclose(layer(x), x @ layer.weight_mu.T + layer.bias_mu)  # no interaction type: mean weights
        True
        >>> with set_interaction_type(InteractionType.RANDOM):
        ...     noisy = layer(x)
        >>> torch.allclose(noisy, x @ layer.weight_mu.T + layer.bias_mu)
        False
        >>> eval_mode = NoisyLinear(3, 2, use_exploration_type=False).eval()  # train/eval decides
        >>> torch.equal(eval_mode.weight, eval_mode.weight_mu)
        True
    """

    weight_epsilon: torch.Tensor
    bias_epsilon: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.5,
        use_exploration_type: bool | None = True,
    ) -> None:
        nn.Module.__init__(self)  # nn.Linear's own weight and bias are replaced by the properties below
        if not isinstance(std_init, (int, float)) or isinstance(std_init, bool) or std_init < 0:
            raise ValueError(f"{type(self).__name__}: std_init must be a number >= 0, got {std_init!r}.")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.std_init = float(std_init)
        self.use_exploration_type = True if use_exploration_type is None else bool(use_exploration_type)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self._make_tensors(bias, (self.out_features, self.in_features), (self.out_features,), factory)
        self.reset_parameters()
        self.reset_noise()

    def _make_tensors(self, bias: bool, w_shape: tuple, b_shape: tuple, factory: dict[str, Any]) -> None:
        self.weight_mu = nn.Parameter(torch.empty(w_shape, **factory))
        self.weight_sigma = nn.Parameter(torch.empty(w_shape, **factory))
        self.register_buffer("weight_epsilon", torch.empty(w_shape, **factory))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(b_shape, **factory))
            self.bias_sigma = nn.Parameter(torch.empty(b_shape, **factory))
            self.register_buffer("bias_epsilon", torch.empty(b_shape, **factory))
        else:  # registered empty, so that a lazy layer can fill them in
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_sigma", None)
            self.register_buffer("bias_epsilon", None)

    def reset_parameters(self) -> None:
        """``mu ~ U(-1/sqrt(in), 1/sqrt(in))``; ``sigma`` set from ``std_init`` (see the class)."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.std_init / math.sqrt(self.in_features))
            if self.bias_mu is not None and self.bias_sigma is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(self.std_init / math.sqrt(self.out_features))

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new factorised noise into ``weight_epsilon`` (and ``bias_epsilon``), in place."""
        device, dtype = self.weight_mu.device, self.weight_mu.dtype
        eps_in = _scaled_noise(self.in_features, device, dtype)
        eps_out = _scaled_noise(self.out_features, device, dtype)
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        if self.bias_epsilon is not None:
            self.bias_epsilon.copy_(eps_out)

    def _noisy(self) -> bool:
        if self.use_exploration_type:
            return interaction_type() is InteractionType.RANDOM
        return self.training

    @property
    def weight(self) -> torch.Tensor:  # pyright: ignore[reportIncompatibleVariableOverride]  # (computed, as TorchRL's)
        """``weight_mu + weight_sigma * weight_epsilon`` with the noise on, else ``weight_mu``."""
        if self._noisy():
            return self.weight_mu + self.weight_sigma * self.weight_epsilon
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor | None:  # pyright: ignore[reportIncompatibleVariableOverride]
        """``bias_mu + bias_sigma * bias_epsilon`` with the noise on, else ``bias_mu`` (``None`` without a bias)."""
        if self.bias_mu is None or self.bias_sigma is None or self.bias_epsilon is None:
            return None
        if self._noisy():
            return self.bias_mu + self.bias_sigma * self.bias_epsilon
        return self.bias_mu

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias_mu is not None}, "
            f"std_init={self.std_init}"
        )


class NoisyLazyLinear(LazyModuleMixin, NoisyLinear):
    """A :class:`NoisyLinear` whose ``in_features`` is read from the first input (like ``nn.LazyLinear``).

    Once run, it becomes a :class:`NoisyLinear`; before that, :meth:`reset_noise` does nothing.

    Args:
        out_features, bias, device, dtype, std_init, use_exploration_type: as :class:`NoisyLinear`.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import NoisyLazyLinear, NoisyLinear
        >>> layer = NoisyLazyLinear(2)
        >>> layer(torch.randn(4, 5)).shape, type(layer) is NoisyLinear, layer.weight_sigma.shape
        (torch.Size([4, 2]), True, torch.Size([2, 5]))
    """

    cls_to_become = NoisyLinear  # pyright: ignore[reportAssignmentType]  # (torch's stub: None)

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.5,
        use_exploration_type: bool | None = True,
    ) -> None:
        check_positive_int("NoisyLazyLinear", "out_features", out_features)
        # NoisyLinear(0, 0) builds empty tensors, replaced by uninitialised ones below
        super().__init__(0, 0, False, device=device, dtype=dtype, std_init=std_init)  # pyright: ignore[reportAttributeAccessIssue]  # (torch's mixin stub)
        self.out_features = int(out_features)
        self.use_exploration_type = True if use_exploration_type is None else bool(use_exploration_type)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.weight_mu = UninitializedParameter(**factory)
        self.weight_sigma = UninitializedParameter(**factory)
        self.weight_epsilon = UninitializedBuffer(**factory)
        if bias:
            self.bias_mu = UninitializedParameter(**factory)
            self.bias_sigma = UninitializedParameter(**factory)
            self.register_buffer("bias_epsilon", UninitializedBuffer(**factory))

    def _pending(self) -> bool:
        """Not materialised yet (its tensors have no shape)."""
        return self.in_features == 0 or self.has_uninitialized_params()  # pyright: ignore[reportAttributeAccessIssue]  # (torch's mixin protocol)

    def reset_parameters(self) -> None:
        if not self._pending():
            super().reset_parameters()

    def reset_noise(self) -> None:
        if not self._pending():
            super().reset_noise()

    def initialize_parameters(self, input: torch.Tensor) -> None:  # noqa: A002  (torch's name)
        if not self.has_uninitialized_params():  # pyright: ignore[reportAttributeAccessIssue]
            return
        with torch.no_grad():
            self.in_features = int(input.shape[-1])
            w_shape, b_shape = (self.out_features, self.in_features), (self.out_features,)
            for name in ("weight_mu", "weight_sigma", "weight_epsilon", "bias_mu", "bias_sigma", "bias_epsilon"):
                tensor = getattr(self, name)
                if isinstance(
                    tensor, (UninitializedParameter, UninitializedBuffer)
                ):  # (the bias ones are None without a bias)
                    tensor.materialize(w_shape if name.startswith("weight") else b_shape)
            self.reset_parameters()
            self.reset_noise()


def reset_noise(layer: nn.Module) -> None:
    """Draw new noise in every noisy layer of ``layer`` (the layer itself, or its submodules).

    A module with a ``reset_noise`` method has it called (and is not searched further); otherwise
    its children are searched. ``reset_noise(net)`` is enough; ``net.apply(reset_noise)`` (TorchRL's
    usage) also works.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import NoisyLinear, reset_noise
        >>> net = torch.nn.Sequential(NoisyLinear(3, 4), torch.nn.ReLU(), NoisyLinear(4, 2))
        >>> before = net[2].weight_epsilon.clone()
        >>> reset_noise(net)
        >>> torch.equal(before, net[2].weight_epsilon)
        False
    """
    fn = getattr(layer, "reset_noise", None)
    if callable(fn):
        fn()
        return
    for child in layer.children():
        reset_noise(child)
