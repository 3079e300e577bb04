"""TensorStorage and LazyTensorStorage: items kept in preallocated tensors (or a TensorDict of them)."""

from __future__ import annotations

import math
from typing import Any

import torch
from tdict import is_tensor_collection

from ._write_checks import check_write, stored_leaves, write_shape
from .base import Storage

__all__ = ["TensorStorage", "LazyTensorStorage"]


def _leading(data: Any) -> torch.Size:
    return data.batch_size if is_tensor_collection(data) else data.shape


class TensorStorage(Storage):
    """Items stored along the first dim(s) of a tensor or TensorDict (given, or built on first write).

    Args:
        storage: the preallocated tensor/TensorDict (its first ``ndim`` dims index the items), or
            ``None`` to allocate on the first write (see :class:`LazyTensorStorage`).
        max_size: the capacity (default: the given storage's item count).
        device: where the items live (written data is moved there).
        ndim: how many leading dims index items (2 for ``[time, env]`` storages of batched envs).
        compilable: keep the item count in a Python int, for ``torch.compile``: reading it needs no
            ``Tensor.item()`` graph break, but the storage cannot be shared between processes
            (default ``False``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> s = TensorStorage(TensorDict(obs=torch.zeros(4, 2), batch_size=[4]))
        >>> s.set(torch.tensor([0, 1]), TensorDict(obs=torch.ones(2, 2), batch_size=[2]))
        >>> len(s), s.get(torch.tensor([1, 2]))["obs"].tolist()
        (2, [[1.0, 1.0], [0.0, 0.0]])
    """

    def __init__(
        self,
        storage: Any = None,
        max_size: int | None = None,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        if storage is not None:
            leading = _leading(storage)
            if len(leading) < ndim:
                raise ValueError(
                    f"{type(self).__name__}: storage has {len(leading)} leading dims, ndim={ndim} needs more."
                )
            max_size = math.prod(leading[:ndim]) if max_size is None else max_size
        if max_size is None:
            raise ValueError(f"{type(self).__name__}: give max_size or a storage.")
        super().__init__(max_size, compilable=compilable)
        if ndim < 1:
            raise ValueError(f"{type(self).__name__}: ndim must be >= 1, got {ndim}.")
        self.ndim = ndim
        self.device = torch.device(device) if device is not None and device != "auto" else None
        # the tensor or tensor collection (a TensorDict, a tensorclass, ...) holding the items; None until allocated
        self._storage: Any = storage
        if storage is not None:
            self._adopt_layout(storage)

    @property
    def initialized(self) -> bool:
        """Whether the tensor (or TensorDict) holding the items exists yet."""
        return self._storage is not None

    @property
    def shape(self) -> torch.Size:
        if self._storage is None:
            return torch.Size([self.max_size])
        return torch.Size(_leading(self._storage)[: self.ndim])

    @property
    def _rows(self) -> int:
        return self.shape[0]

    def _init(self, data: Any) -> None:
        """Allocates zeros shaped like one row of ``data`` times the capacity."""
        leading = _leading(data)
        if len(leading) < self.ndim:
            raise ValueError(
                f"{type(self).__name__}: the first write must have at least {self.ndim} leading dims (ndim), "
                f"got shape {list(leading)}."
            )
        item_dims = torch.Size(leading[1 : self.ndim])
        per_row = math.prod(item_dims)
        if self.max_size % per_row:
            raise ValueError(
                f"{type(self).__name__}: max_size {self.max_size} is not a multiple of the {list(item_dims)} items per row."
            )
        rows = self.max_size // per_row
        device = self.device

        def alloc(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros((rows, *x.shape[1:]), dtype=x.dtype, device=device if device is not None else x.device)

        if is_tensor_collection(data):
            storage = data[:1].apply(alloc, batch_size=[rows, *data.batch_size[1:]])
            _keep_nested_batch_dims(storage, data)
        else:
            storage = alloc(data)
        self._storage = storage
        self._adopt_layout(storage)

    def _adopt_layout(self, storage: Any) -> None:
        """Records what every write is checked against: the item dims and ``{key: feature shape}``."""
        leading = _leading(storage)
        self._item_dims = torch.Size(leading[1 : self.ndim])
        self._lead_dims = len(leading)
        self._leaves = stored_leaves(storage, self._lead_dims)

    def set(self, index: Any, data: Any) -> None:
        if self._storage is None:
            # a single item (add) as the first write: allocate from it as a batch of one
            self._init(data.unsqueeze(0) if isinstance(index, int) else data)
        storage = self._storage
        assert storage is not None  # allocated by _init above
        # missing keys or shapes that would broadcast raise here, before anything is written
        check_write(type(self).__name__, self._leaves, data, write_shape(_leading(storage)[: self._lead_dims], index))
        if self.device is not None and data.device is not None and data.device != self.device:
            data = data.to(self.device)  # (no device on the data: the copy into storage moves each leaf)
        storage[index] = data
        self._grow_len(index, 1)

    def get(self, index: Any) -> Any:
        if self._storage is None:
            raise RuntimeError(f"{type(self).__name__} is empty: nothing was written yet.")
        return self._storage[index]

    def __len__(self) -> int:
        rows = int(self._len_t)
        return rows * math.prod(self._item_dims) if self.ndim > 1 and self._storage is not None else rows

    def _grow_len(self, index: Any, count: int) -> None:
        # the count is kept in rows (first dim); len() multiplies by the items per row
        if isinstance(index, tuple):
            index = index[0]
        rows = self._rows
        if isinstance(index, int):
            top = index + 1
        elif isinstance(index, slice):
            span = range(*index.indices(rows))
            top = (max(span[0], span[-1]) + 1) if len(span) else 0
        elif isinstance(index, torch.Tensor):
            top = int(index.max()) + 1 if index.numel() else 0
        else:
            top = max(int(i) for i in index) + 1 if len(index) else 0
        if top > int(self._len_t):
            self._len_t.fill_(min(top, rows))

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        n = len(self)
        if n == 0:
            raise RuntimeError(f"{type(self).__name__} is empty: nothing to sample.")
        flat = torch.randint(0, n, (batch_size,), generator=generator)
        if self.ndim == 1:
            return flat
        return torch.unravel_index(flat, (int(self._len_t), *self._item_dims))

    def _empty(self) -> None:
        super()._empty()

    def share_memory_(self) -> "TensorStorage":
        super().share_memory_()
        if self._storage is not None:
            self._storage.share_memory_()
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, device={self.device}, ndim={self.ndim})"
        )


class LazyTensorStorage(TensorStorage):
    """A :class:`TensorStorage` allocated on the first write from the data's structure.

    Args:
        max_size: the capacity in items.
        device: where the items live (``"cpu"`` by default).
        ndim: how many leading dims of the written data index items.
        compilable: as :class:`TensorStorage`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> s = LazyTensorStorage(100)
        >>> s.set(torch.arange(3), TensorDict(obs=torch.ones(3, 5), batch_size=[3]))
        >>> len(s), s.get(torch.tensor([2]))["obs"].shape
        (3, torch.Size([1, 5]))
    """

    def __init__(self, max_size: int, *, device: Any = "cpu", ndim: int = 1, compilable: bool = False) -> None:
        super().__init__(None, max_size, device=device, ndim=ndim, compilable=compilable)


def _keep_nested_batch_dims(storage: Any, data: Any) -> None:
    """Give each sub-TensorDict of ``storage`` the extra batch dims it has in ``data``.

    ``apply(..., batch_size=...)`` sets every level to the root's batch size; a group such as
    ``"agents"`` (batch ``[B, n_agents]`` under a ``[B]`` root) keeps its own dims in the storage,
    so samples come back with per-agent batch dims.
    """
    rows = storage.batch_size[0]
    keys = sorted(data.keys(include_nested=True), key=lambda k: -len(k) if isinstance(k, tuple) else -1)
    for key in keys:  # deepest first: a parent's batch dims must stay a prefix of its children's
        sub = data.get(key)
        if is_tensor_collection(sub) and not sub._is_non_tensor and sub.batch_dims > storage.batch_dims:
            storage.get(key).batch_size = torch.Size([rows, *sub.batch_size[1:]])
