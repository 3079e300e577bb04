"""``TensorDictFuture``: the pending result of ``consolidate(return_early=True)``."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable


class TensorDictFuture:
    """A collection being built on a worker thread; :meth:`result` waits for it and returns it.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> future = TensorDict(a=torch.arange(3), batch_size=[3]).consolidate(return_early=True)
        >>> future.result()["a"].tolist()
        [0, 1, 2]
    """

    __slots__ = ("_future",)

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    @classmethod
    def submit(cls, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "TensorDictFuture":
        """Run ``fn(*args, **kwargs)`` on a new worker thread."""
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            return cls(executor.submit(fn, *args, **kwargs))
        finally:
            executor.shutdown(wait=False)  # the thread ends once ``fn`` returns

    def done(self) -> bool:
        """Whether the result is ready."""
        return self._future.done()

    def result(self, timeout: float | None = None) -> Any:
        """Wait (at most ``timeout`` seconds) and return the collection; re-raises the worker's error."""
        return self._future.result(timeout)
