"""RemoteTensorDictReplayBuffer: a TensorDictReplayBuffer whose methods can be called through an RPC RRef."""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

from .tensordict_buffer import TensorDictReplayBuffer

__all__ = ["RemoteTensorDictReplayBuffer"]


def _rref_type() -> type | None:
    """``torch.distributed.rpc.RRef``'s class, or ``None`` where torch has no RPC support."""
    try:
        from torch.distributed import rpc
    except ImportError:  # pragma: no cover - torch built without distributed
        return None
    return getattr(rpc, "PyRRef", None) if rpc.is_available() else None


def _accept_rref(method: Callable) -> Callable:
    """Wraps ``method`` so that it may be called with an RRef to the buffer in place of ``self``
    (what ``rpc.rpc_sync(owner, Class.method, args=(rref, ...))`` passes on the owner)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        rref = _RREF
        if rref is not None and isinstance(self, rref):
            self = self.local_value()
        return method(self, *args, **kwargs)

    return call


_RREF = _rref_type()


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` that other RPC workers can drive.

    Used locally it is a :class:`TensorDictReplayBuffer`. Its public methods also accept an
    ``RRef`` to the buffer as ``self``, so a worker holding the RRef of a buffer created on the
    owner (``rpc.remote(owner, RemoteTensorDictReplayBuffer, kwargs=...)``) can call
    ``rpc.rpc_sync(owner, RemoteTensorDictReplayBuffer.extend, args=(rref, data))`` and the call
    runs on the owner's buffer. Set up ``torch.distributed.rpc`` as usual (addresses default to
    loopback in this project's examples and tests).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        >>> _ = rb.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
        >>> rb.sample()["obs"].shape
        torch.Size([2])
    """


for _name in dir(RemoteTensorDictReplayBuffer):
    _value = inspect.getattr_static(RemoteTensorDictReplayBuffer, _name)
    # plain public methods only (properties, static and class methods stay as they are)
    if not _name.startswith("_") and isinstance(_value, types.FunctionType):
        _method = _accept_rref(_value)
        # RPC pickles the method by its name: it must name this class's attribute, not the base's
        _method.__qualname__ = f"RemoteTensorDictReplayBuffer.{_name}"
        _method.__module__ = __name__
        setattr(RemoteTensorDictReplayBuffer, _name, _method)
del _name, _value, _method
