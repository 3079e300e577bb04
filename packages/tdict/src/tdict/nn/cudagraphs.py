"""CudaGraphModule: capture a module call as a CUDA graph after a warmup, then replay it."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .._core.utils import unravel_key
from ..base import is_tensor_collection
from ..validation import check_positive_int

__all__ = ["CudaGraphModule"]


class CudaGraphModule:
    """Run a TensorDictModule (or a function of tensors) through a captured CUDA graph.

    The first ``warmup`` calls run eagerly (on a side stream, as CUDA graph capture requires);
    the next call captures the module into a ``torch.cuda.CUDAGraph`` using static input buffers,
    and every later call copies its inputs into those buffers, replays the graph and returns
    clones of the static outputs. Inputs must keep the shapes, dtypes and device of the captured
    call (a ``ValueError`` names the first one that differs). Replays run without autograd (the
    outputs carry no graph): the wrapper is meant for inference (acting in a collector).

    Without CUDA (or with a non-CUDA ``device``) the module runs eagerly with the same API, and
    each construction warns (a ``UserWarning``, which Python's default filter shows once per call site).

    Args:
        module: a TensorDictModule (called with a TensorDict) or a callable taking tensors /
            pytrees of tensors.
        warmup: eager calls before the capture.
        in_keys: keys read from the input TensorDict (default ``module.in_keys``); with ``in_keys``
            and ``out_keys`` given, any callable taking and returning a TensorDict is accepted.
        out_keys: keys written back to the input TensorDict (default ``module.out_keys``).
        device: the CUDA device (default: the current one).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import CudaGraphModule, TensorDictModule
        >>> policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["action"])
        >>> graphed = CudaGraphModule(policy, warmup=2)  # eager (with a warning) without CUDA
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> graphed.module.to(device)  # doctest: +ELLIPSIS
        TensorDictModule(...)
        >>> for _ in range(4):
        ...     out = graphed(TensorDict(obs=torch.ones(5, 3, device=device), batch_size=[5]))
        >>> out["action"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        module: Callable,
        warmup: int = 2,
        in_keys: Sequence | None = None,
        out_keys: Sequence | None = None,
        device: Any = None,
    ) -> None:
        if not callable(module):
            raise TypeError(f"CudaGraphModule: module must be callable, got {type(module).__name__}.")
        check_positive_int("CudaGraphModule", "warmup", warmup)
        self.module = module
        self.warmup = warmup
        self.in_keys = [unravel_key(k) for k in (in_keys if in_keys is not None else getattr(module, "in_keys", []))]
        self.out_keys = [
            unravel_key(k) for k in (out_keys if out_keys is not None else getattr(module, "out_keys", []))
        ]
        self._is_td = bool(self.in_keys) and bool(self.out_keys)
        self.device = torch.device(device) if device is not None else None
        self.counter = 0
        self._graph: torch.cuda.CUDAGraph | None = None  # captured on the first call after the warmup
        self._eager = not torch.cuda.is_available() or (self.device is not None and self.device.type != "cuda")
        if self._eager:
            warnings.warn(
                "CudaGraphModule: CUDA is unavailable (or device is not CUDA); the module runs eagerly.", stacklevel=2
            )

    def __repr__(self) -> str:
        return f"CudaGraphModule(module={self.module!r}, warmup={self.warmup}, captured={self._graph is not None})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._eager:
            return self.module(*args, **kwargs)
        if self.counter < self.warmup:
            self.counter += 1
            return self._side_stream(args, kwargs)
        if self._is_td:
            return self._call_td(*args, **kwargs)
        return self._call_fn(args, kwargs)

    # ------------------------------------------------------------------ eager warmup
    def _side_stream(self, args: tuple, kwargs: dict) -> Any:
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            out = self.module(*args, **kwargs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return out

    # ------------------------------------------------------------------ TensorDict modules
    def _call_td(self, tensordict: Any = None, **kwargs: Any) -> Any:
        if tensordict is None:
            tensordict = kwargs.pop("tensordict")
        if kwargs:
            raise TypeError(
                f"CudaGraphModule: a TensorDict module takes only the TensorDict, got extra {sorted(kwargs)}."
            )
        if self._graph is None:
            self._capture_td(tensordict)
        else:
            for key, static in self._static_pairs:
                value = tensordict.get(key)
                if value.shape != static.shape or value.dtype != static.dtype or value.device != static.device:
                    raise ValueError(
                        f"CudaGraphModule: input {key!r} is {tuple(value.shape)} {value.dtype} on {value.device}, the graph was "
                        f"captured with {tuple(static.shape)} {static.dtype} on {static.device}."
                    )
                static.copy_(value)
        assert self._graph is not None  # set by _capture_td
        self._graph.replay()
        for key, static in self._static_out:
            tensordict.set(key, static.clone())
        return tensordict

    def _capture_td(self, tensordict: Any) -> None:
        static_in = tensordict.select(*self.in_keys, strict=True).clone()
        self._static_pairs = [(key, static_in.get(key)) for key in self.in_keys]
        self._graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self._graph):
            out = self.module(static_in)
        self._static_out = [(key, out.get(key)) for key in self.out_keys]

    # ------------------------------------------------------------------ tensor functions
    def _call_fn(self, args: tuple, kwargs: dict) -> Any:
        flat, spec = tree_flatten((args, kwargs))
        if self._graph is None:
            self._static_flat = [x.clone() if isinstance(x, torch.Tensor) else x for x in flat]
            self._spec = spec
            static_args, static_kwargs = tree_unflatten(self._static_flat, spec)
            self._graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(self._graph):
                self._static_result = self.module(*static_args, **static_kwargs)
        else:
            if spec != self._spec:
                raise ValueError("CudaGraphModule: the inputs' structure differs from the captured call's.")
            for i, (static, value) in enumerate(zip(self._static_flat, flat)):
                if isinstance(static, torch.Tensor):
                    if value.shape != static.shape or value.dtype != static.dtype:
                        raise ValueError(
                            f"CudaGraphModule: input leaf {i} is {tuple(value.shape)} {value.dtype}, the graph was captured with "
                            f"{tuple(static.shape)} {static.dtype}."
                        )
                    static.copy_(value)
        self._graph.replay()
        return tree_map(
            lambda x: x.clone() if isinstance(x, torch.Tensor) or is_tensor_collection(x) else x, self._static_result
        )
