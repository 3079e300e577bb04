"""EnsembleModule: one module run with several stacked parameter sets through ``torch.vmap``."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from ..base import is_tensor_collection
from ..tensordict import TensorDict
from ..validation import check_positive_int
from .common import _reset_submodules
from .params import TensorDictParams

__all__ = ["EnsembleModule"]


class EnsembleModule(nn.Module):
    """Run ``num_copies`` independently initialised copies of a module as one vmapped call.

    The parameters of ``num_copies`` re-initialised copies of ``module`` are stacked along a new
    dim 0 (:meth:`TensorDict.from_modules`) and held as a :class:`TensorDictParams`
    (``params_td``), so optimizers see them. A call maps the module over that dim with
    ``torch.vmap``, swapping each parameter set in with :meth:`~tdict.TensorDict.to_module`; the
    outputs get a leading ensemble dim. ``module`` itself is kept unregistered, its own tensors
    moved to the ``meta`` device: only ``params_td`` holds memory.

    Args:
        module: the module to ensemble (an ``nn.Module`` or a TensorDictModule).
        num_copies: how many parameter sets.
        expand_input: ``True`` feeds the same input to every copy; ``False`` expects inputs that
            already carry a leading dim of size ``num_copies`` (one slice per copy).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import EnsembleModule, TensorDictModule
        >>> net = TensorDictModule(nn.Linear(4, 2), in_keys=["obs"], out_keys=["action"])
        >>> ensemble = EnsembleModule(net, num_copies=3)
        >>> ensemble(TensorDict(obs=torch.randn(5, 4), batch_size=[5]))["action"].shape
        torch.Size([3, 5, 2])
        >>> EnsembleModule(nn.Linear(4, 2), num_copies=3)(torch.randn(5, 4)).shape
        torch.Size([3, 5, 2])
    """

    module: nn.Module  # the template, kept in __dict__ (not a submodule: its own tensors are freed)

    def __init__(self, module: nn.Module, num_copies: int, expand_input: bool = True) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"EnsembleModule: module must be an nn.Module, got {type(module).__name__}.")
        check_positive_int("EnsembleModule", "num_copies", num_copies)
        copies = []
        for _ in range(num_copies):
            c = copy.deepcopy(module)
            _reset_submodules(c)
            copies.append(c)
        self.params_td = TensorDictParams(TensorDict.from_modules(*copies, lock=False), no_convert=True)
        self.num_copies = num_copies
        self.expand_input = expand_input
        # the template's own tensors are never read (each call swaps params_td in): free them
        TensorDict.from_module(module, lock=False).apply(lambda t: t.detach().to("meta")).to_module(
            module, return_swap=False
        )
        self.__dict__["module"] = module
        if hasattr(module, "in_keys"):
            self.in_keys = module.in_keys
        if hasattr(module, "out_keys"):
            self.out_keys = module.out_keys

    def reset_parameters_recursive(self, parameters: Any = None) -> Any:
        """Re-initialise every copy independently (each gets its own fresh draw).

        Args:
            parameters: ``None`` resets :attr:`params_td` in place; otherwise a TensorDict of
                parameters for ``module`` (batch dims enumerate copies), reset in place.

        Returns:
            The reset parameters (``params_td`` when ``parameters`` is ``None``).
        """
        target = self.params_td._param_td if parameters is None else getattr(parameters, "_param_td", parameters)
        if not target.ndim:
            self._reset_one(target)
        else:
            for copy_params in target.reshape(-1).unbind(0):
                self._reset_one(copy_params)
        return self.params_td if parameters is None else parameters

    def _reset_one(self, params: Any) -> None:
        # swap views of one copy into the template and re-run its initialisers: they write in place
        with torch.no_grad(), params.to_module(self.module):
            if not _reset_submodules(self.module):
                raise RuntimeError(
                    f"EnsembleModule.reset_parameters_recursive: {type(self.module).__name__} has no submodule with reset_parameters."
                )

    def _call(self, params: Any, *args: Any, **kwargs: Any) -> Any:
        with params.to_module(self.module):
            return self.module(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        params = self.params_td._param_td
        if self.expand_input:
            in_dims = (0,) + (None,) * len(args)
            kw_dims = None
        else:
            in_dims = (0,) * (len(args) + 1)
            kw_dims = 0
        fn: Callable[..., Any] = self._call
        if kwargs:
            names = list(kwargs)
            values = [kwargs[n] for n in names]

            def call_with_kwargs(p: Any, *all_args: Any) -> Any:  # vmap maps positional args only
                pos, kw = all_args[: len(args)], all_args[len(args) :]
                return self._call(p, *pos, **dict(zip(names, kw)))

            fn = call_with_kwargs

            in_dims = in_dims + (kw_dims,) * len(values)
            args = args + tuple(values)
        if not self.expand_input:
            for i, a in enumerate(args):
                size = a.batch_size[0] if is_tensor_collection(a) else a.shape[0]
                if size != self.num_copies:
                    raise ValueError(
                        f"EnsembleModule: with expand_input=False input {i} must have a leading dim of {self.num_copies}, got {size}."
                    )
        return torch.vmap(fn, in_dims=in_dims, randomness="different")(params, *args)
