"""SumTree and MinTree: array-backed segment trees in torch tensors, updated and searched in batches.

Why not a binary tree walked one level at a time? At a million leaves that is 20 levels, and
every level costs a handful of tensor ops whose fixed per-call overhead (microseconds each on
CPU) dominates. These trees have a configurable ``arity`` (32 children per node by default, so a
million leaves need 4 levels); ``arity=2`` gives the classic binary segment tree. The prefix-sum
search starts with one flat cumulative sum over the deepest level that holds at most a couple
of thousand nodes, then descends the remaining levels for every query at once (gather the
children of each query's node, cumulative-sum them, ``searchsorted``).

Layout: all nodes live in one flat tensor ``[root, level 1, ..., leaves]`` (one call shares it
across processes, one entry saves it). The root has ``r <= arity`` children and level ``l``
holds ``r * arity**(l - 1)`` nodes, so the leaf level is at most twice the capacity; leaves past
the capacity hold the neutral value (0 for sums, +inf for minimums) and are never written.
Internal nodes are always the exact reduction (``sum``/``amin``) of their children.

On a CUDA device, when rl-kernels and Triton are installed (``rl-replay[kernels]``), batched writes
and the prefix search run as rl-kernels' Triton kernels on the same node tensor (same layout, same
checkpoints); everything else, and every other device, takes the torch path below.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tdict.validation import check_positive_int

__all__ = ["SumTree", "MinTree"]

# parent levels whose children fit in this many nodes are recomputed whole (one reduction) rather
# than by gathering the touched children (shift, gather, reduce, scatter); at 256 updates one
# reduction over ~32k cached nodes (~5 us) is cheaper than those four ops
_FULL_RECOMPUTE_LIMIT = 32768
# the prefix search starts with one flat cumsum over the deepest level at most this large
_FLAT_SEARCH_LIMIT = 2048
# "no scratch tensor": every out= gets None (a new tensor)
_NO_BUFS: dict = {key: None for key in ("flat", "node", "val", "rows", "cs", "mask", "cnt", "gather")}

# tests set this to take the kernel path on CPU too (under Triton's interpreter)
_FORCE_KERNELS = False
_KERNELS: list = []  # [rl_kernels.trees or None], filled on first use


def _kernels(device: torch.device) -> Any:
    """rl_kernels.trees when writes and searches on ``device`` go to its Triton kernels, else None."""
    if device.type != "cuda" and not _FORCE_KERNELS:
        return None
    if not _KERNELS:
        try:
            from rl_kernels import trees as kernel_trees, triton_available
        except ImportError:
            kernel_trees, triton_available = None, None
        _KERNELS.append(kernel_trees if triton_available is not None and triton_available() else None)
    return _KERNELS[0]


class _SegmentTree:
    """Shared machinery of :class:`SumTree` and :class:`MinTree` (``_row_op``, ``_reduce_all`` and ``_neutral`` differ)."""

    _neutral: float = 0.0
    _row_op: Any = None  # the reduction (torch.sum, torch.amin, ...) with a dim argument
    _reduce_name = "sum"  # the same, by name, for rl-kernels

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype = torch.float64,
        device: Any = None,
        *,
        arity: int = 32,
    ) -> None:
        check_positive_int(type(self).__name__, "capacity", capacity)
        if not isinstance(arity, int) or isinstance(arity, bool) or arity < 2:
            raise ValueError(f"{type(self).__name__}: arity must be an int >= 2, got {arity!r}.")
        if not dtype.is_floating_point:
            raise TypeError(f"{type(self).__name__}: dtype must be a floating point dtype, got {dtype}.")
        self.capacity = capacity
        self.arity = arity
        self.dtype = dtype
        depth = 1
        while arity**depth < capacity:
            depth += 1
        top = -(-capacity // arity ** (depth - 1))  # children of the root (<= arity)
        self._sizes = [top * arity**i for i in range(depth)]  # level 1 .. leaves
        offsets, total = [], 1
        for size in self._sizes:
            offsets.append(total)
            total += size
        self._offsets = offsets
        self._nodes = torch.full((total,), self._neutral, dtype=dtype, device=device)
        # a power-of-two arity finds parents with a shift (cheaper than a floor division)
        self._shift = arity.bit_length() - 1 if arity & (arity - 1) == 0 else 0
        self._scratch: torch.Tensor | None = None
        self._order: torch.Tensor | None = None
        self._make_views()

    # ------------------------------------------------------------------ layout
    def _make_views(self) -> None:
        nodes = self._nodes
        self._root = nodes[0:1]
        self._levels = [nodes[o : o + s] for o, s in zip(self._offsets, self._sizes)]
        self._leaves = self._levels[-1]
        self._rows = [level.view(-1, self.arity) for level in self._levels[1:]]  # children grouped by parent
        # parent level p (index into _levels) is recomputed whole when its children are few
        self._full_from = len(self._levels) - 1
        while self._full_from > 0 and self._sizes[self._full_from] > _FULL_RECOMPUTE_LIMIT:
            self._full_from -= 1
        # (children rows, parent level) pairs recomputed whole by _write, deepest first
        self._full = [(self._rows[lv - 1], self._levels[lv - 1]) for lv in range(self._full_from, 0, -1)]
        # deepest level with at most _FLAT_SEARCH_LIMIT nodes (level 0 always qualifies: <= arity)
        flat = 0
        while flat + 1 < len(self._sizes) and self._sizes[flat + 1] <= _FLAT_SEARCH_LIMIT:
            flat += 1
        self._flat = flat

    @property
    def device(self) -> torch.device:
        """The device of the tree's nodes."""
        return self._nodes.device

    def __len__(self) -> int:
        return self.capacity

    # ------------------------------------------------------------------ hooks
    @staticmethod
    def _reduce_all(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ writes
    def _check_index(self, index: Any) -> torch.Tensor:
        index = torch.as_tensor(index, device=self.device)
        if index.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"{type(self).__name__}: index must be an integer tensor, got dtype {index.dtype}.")
        if index.dim() != 1:
            index = index.reshape(-1)
        if index.dtype != torch.int64:
            index = index.long()
        if index.shape[0]:
            lo, hi = torch.aminmax(index)
            lo, hi = lo.item(), hi.item()
            if lo < 0 or hi >= self.capacity:
                raise IndexError(
                    f"{type(self).__name__}: index must lie in [0, {self.capacity}), got values in [{lo}, {hi}]."
                )
        return index

    def _check_values(self, index: torch.Tensor, values: Any) -> torch.Tensor:
        values = torch.as_tensor(values, dtype=self.dtype, device=self.device)
        if values.numel() == 1:
            return values.reshape(1).expand(index.shape[0])
        if values.numel() != index.shape[0]:
            raise ValueError(
                f"{type(self).__name__}.update: values must be a scalar or hold one value per index "
                f"({index.shape[0]}), got shape {list(values.shape)}."
            )
        return values.reshape(-1)

    def _last_wins(self, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Values such that every duplicate of an index carries the value of its last occurrence."""
        # scatter kernels leave the winner among duplicates unspecified (parallel kernels), so every
        # duplicate is given the value of the last occurrence first: then any winner is right. The
        # position of the last occurrence of each index is the largest position scattered to it.
        if self._scratch is None:
            self._scratch = torch.zeros(self.capacity, dtype=torch.int64, device=self.device)
        n = index.shape[0]
        order = self._order
        if order is None or order.shape[0] < n:
            order = self._order = torch.arange(max(n, 256), device=self.device)
        if order.shape[0] != n:
            order = order[:n]
        self._scratch.scatter_reduce_(0, index, order, reduce="amax", include_self=False)
        return values.index_select(0, self._scratch.index_select(0, index))

    def _plan(self, index: torch.Tensor) -> list:
        """Parent indices of ``index`` at every level updated by gathering (shared by trees of one shape)."""
        plan = []
        if _kernels(self._nodes.device) is not None:
            return plan  # the kernel path finds the parents itself
        p = index
        shift = self._shift
        for _ in range(len(self._levels) - 1, self._full_from, -1):
            p = torch.bitwise_right_shift(p, shift) if shift else torch.floor_divide(p, self.arity)
            plan.append(p)
        return plan

    def _write(self, index: torch.Tensor, values: torch.Tensor, plan: list | None = None) -> None:
        """Writes checked leaves (duplicates already carry equal values) and refreshes their ancestors."""
        kernels = _kernels(self._nodes.device)
        if kernels is not None:
            kernels.tree_write_(
                self._nodes,
                index,
                values,
                capacity=self.capacity,
                arity=self.arity,
                reduce=self._reduce_name,
                backend="triton",
            )
            return
        # scatter_ with duplicated indices is fine here: duplicates carry equal values at every level
        # (leaves: after _last_wins; parents: reductions of the same, already written, children)
        self._leaves.scatter_(0, index, values)
        if plan is None:
            plan = self._plan(index)
        op = self._row_op  # torch.sum / torch.amin / torch.amax (called directly: this is the hot path)
        levels, rows = self._levels, self._rows
        level = len(levels) - 1
        for parents in plan:
            level -= 1
            levels[level].scatter_(0, parents, op(rows[level].index_select(0, parents), 1))
        for children, parent in self._full:
            op(children, 1, out=parent)
        op(levels[0], 0, keepdim=True, out=self._root)

    def update(self, index: Any, values: Any) -> None:
        """Sets the leaves at ``index`` to ``values`` (a scalar or one value per index).

        Duplicated indices take the value of their last occurrence. Bad indices raise before
        anything is written.
        """
        index = self._check_index(index)
        values = self._check_values(index, values)
        if index.numel():
            self._write(index, self._last_wins(index, values))

    def __setitem__(self, index: Any, values: Any) -> None:
        self.update(index, values)

    def __getitem__(self, index: Any) -> torch.Tensor:
        """The leaf values at ``index`` (an int, a slice or an index tensor)."""
        return self._leaves[: self.capacity][index]

    # ------------------------------------------------------------------ reads
    def query(self, start: int, end: int) -> torch.Tensor:
        """The reduction of the leaves in ``[start, end)`` (a 0-d tensor), in O(arity * depth)."""
        start, end = int(start), int(end)
        if not 0 <= start <= end <= self.capacity:
            raise IndexError(
                f"{type(self).__name__}.query: need 0 <= start <= end <= {self.capacity}, got [{start}, {end})."
            )
        parts = []
        level = len(self._levels) - 1
        k = self.arity
        while start < end:
            if end - start <= 2 * k or level == 0:
                parts.append(self._levels[level][start:end])
                break
            up, down = -(-start // k) * k, (end // k) * k
            parts.append(self._levels[level][start:up])
            parts.append(self._levels[level][down:end])
            start, end, level = up // k, down // k, level - 1
        if not parts:
            return torch.full((), self._neutral, dtype=self.dtype, device=self.device)
        return self._reduce_all(torch.cat(parts))

    # ------------------------------------------------------------------ state
    def share_memory_(self) -> "_SegmentTree":
        """Moves the nodes to shared memory (other processes see every update)."""
        self._nodes.share_memory_()
        self._make_views()
        return self

    def is_shared(self) -> bool:
        """Whether the nodes are in shared memory."""
        return self._nodes.is_shared()

    def state_dict(self) -> dict:
        """``{"capacity", "arity", "nodes"}``: every node, so a restored tree is bitwise identical."""
        return {"capacity": self.capacity, "arity": self.arity, "nodes": self._nodes.clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` in place (a shared tree stays shared)."""
        nodes = state["nodes"]
        if int(state["capacity"]) != self.capacity or int(state["arity"]) != self.arity:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: state is for capacity={state['capacity']}, arity={state['arity']}; "
                f"this tree has capacity={self.capacity}, arity={self.arity}."
            )
        if not isinstance(nodes, torch.Tensor) or nodes.shape != self._nodes.shape:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: 'nodes' must be a tensor of shape {list(self._nodes.shape)}, "
                f"got {getattr(nodes, 'shape', type(nodes).__name__)}."
            )
        self._nodes.copy_(nodes)

    def _reset(self) -> None:
        self._nodes.fill_(self._neutral)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, arity={self.arity}, dtype={self.dtype}, device={self.device})"


class SumTree(_SegmentTree):
    """A segment tree of sums: batched updates, O(1) total and a batched prefix-sum search.

    Args:
        capacity: number of leaves (all start at 0).
        dtype: the node dtype (float64 by default, so long sums do not drift).
        device: where the nodes live.
        arity: children per internal node (32: few levels, few tensor ops; 2: a binary tree).

    Examples:
        >>> import torch
        >>> tree = SumTree(5)
        >>> tree.update(torch.tensor([0, 2, 4, 2]), torch.tensor([1.0, 5.0, 2.0, 3.0]))  # index 2: last wins
        >>> tree.sum().item(), tree.query(1, 4).item(), tree[2].item()
        (6.0, 3.0, 3.0)
        >>> tree.find_prefix(torch.tensor([0.0, 0.99, 1.0, 3.9, 4.0, 6.0])).tolist()
        [0, 0, 2, 2, 4, 5]
    """

    _neutral = 0.0
    _row_op = staticmethod(torch.sum)

    @staticmethod
    def _reduce_all(x: torch.Tensor) -> torch.Tensor:
        return x.sum()

    def sum(self) -> torch.Tensor:
        """The total of all leaves (a 0-d tensor read from the root)."""
        return self._root[0].clone()

    def find_prefix(self, values: Any, side: str = "right") -> torch.Tensor:
        """For each value ``v``, the leaf where the running sum of the leaves crosses ``v``.

        With ``side="right"`` (the default, what proportional sampling wants) it is the smallest
        ``i`` with ``cumsum[i] > v``, so zero leaves are never returned for ``0 <= v < sum()``;
        ``side="left"`` gives the smallest ``i`` with ``cumsum[i] >= v`` (TorchRL's
        ``scan_lower_bound``). Like ``numpy.searchsorted(cumsum, v, side)``, values past the
        total give ``capacity``. All values are searched together, level by level.

        Args:
            values: a tensor of query values (any shape).
            side: ``"right"`` or ``"left"``.

        Returns:
            A LongTensor of leaf indices shaped like ``values``.
        """
        if side not in ("right", "left"):
            raise ValueError(f"SumTree.find_prefix: side must be 'right' or 'left', got {side!r}.")
        values = torch.as_tensor(values, device=self.device)
        return self._descend(values.reshape(-1), side == "right", self.capacity).view(values.shape)

    def _descend(self, values: torch.Tensor, right: bool, limit: int, bufs: dict | None = None) -> torch.Tensor:
        """:meth:`find_prefix` of the 1-D ``values``, clamped to at most ``limit`` (a new 1-D LongTensor).

        ``bufs``: optional scratch tensors (from :meth:`_descend_buffers`) that the intermediate
        results are written into instead of new tensors; the caller must not share them between
        threads. The returned tensor is always new.
        """
        kernels = _kernels(self._nodes.device)
        if kernels is not None:
            return kernels.tree_search(
                self._nodes,
                values.reshape(-1),
                capacity=self.capacity,
                arity=self.arity,
                right=right,
                limit=limit,
                backend="triton",
            )
        val = values.view(-1, 1)
        if val.dtype != self.dtype:
            val = val.to(self.dtype)
        elif not val.is_contiguous():
            val = val.contiguous()
        b = bufs if bufs is not None and bufs["n"] == val.shape[0] else _NO_BUFS
        last = len(self._levels) - 1
        flat = self._levels[self._flat]
        cs = torch.cumsum(flat, 0, out=b["flat"])
        if self._flat < last:
            # searching all but the last entry is the search clamped to the last node (one op less)
            node = torch.searchsorted(cs[:-1], val, right=right, out=b["node"])
            val = torch.sub(val, cs.sub_(flat).take(node), out=b["val"])  # minus the mass left of the node
        else:
            node = torch.searchsorted(cs, val, right=right)
        k = self.arity
        for level in range(self._flat + 1, last + 1):
            rows = torch.index_select(self._rows[level - 1], 0, node.view(-1), out=b["rows"])
            cs = torch.cumsum(rows, 1, out=b["cs"])
            # within a row, counting beats a binary search (no mispredicted branches); cs is sorted
            # (a cumulative sum of non-negative values), so the count is what searchsorted returns
            mask = torch.le(cs, val, out=b["mask"]) if right else torch.lt(cs, val, out=b["mask"])
            cnt = torch.sum(mask, 1, keepdim=True, out=b["cnt"])
            if level < last:
                cnt.clamp_(max=k - 1)
                val = torch.sub(val, torch.gather(cs.sub_(rows), 1, cnt, out=b["gather"]), out=b["val"])
                node = torch.add(cnt, node, alpha=k, out=b["node"])
            else:
                node = torch.add(cnt, node, alpha=k)  # the result: a new tensor
        return node.view(-1).clamp_(max=limit)

    def _descend_buffers(self, n: int) -> dict:
        """Scratch tensors for :meth:`_descend` of ``n`` values at a time."""
        dev, dt, k = self.device, self.dtype, self.arity
        return {
            "n": n,
            "flat": torch.empty(self._sizes[self._flat], dtype=dt, device=dev),
            "node": torch.empty(n, 1, dtype=torch.int64, device=dev),
            "val": torch.empty(n, 1, dtype=dt, device=dev),
            "rows": torch.empty(n, k, dtype=dt, device=dev),
            "cs": torch.empty(n, k, dtype=dt, device=dev),
            "mask": torch.empty(n, k, dtype=torch.bool, device=dev),
            "cnt": torch.empty(n, 1, dtype=torch.int64, device=dev),
            "gather": torch.empty(n, 1, dtype=dt, device=dev),
        }

    def scan_lower_bound(self, values: Any) -> torch.Tensor:
        """TorchRL's name for ``find_prefix(values, side="left")``."""
        return self.find_prefix(values, side="left")


class MinTree(_SegmentTree):
    """A segment tree of minimums: batched updates, O(1) global minimum, range minimums.

    Leaves start at ``+inf`` (the neutral value), so never-written slots do not affect the
    minimum.

    Args:
        capacity: number of leaves.
        dtype: the node dtype (float64 by default).
        device: where the nodes live.
        arity: children per internal node.

    Examples:
        >>> import torch
        >>> tree = MinTree(4)
        >>> tree.update(torch.tensor([0, 1, 3]), torch.tensor([4.0, 2.0, 3.0]))
        >>> tree.min().item(), tree.query(2, 4).item(), tree[2].item()
        (2.0, 3.0, inf)
    """

    _neutral = math.inf
    _row_op = staticmethod(torch.amin)
    _reduce_name = "min"

    @staticmethod
    def _reduce_all(x: torch.Tensor) -> torch.Tensor:
        return x.amin()

    def min(self) -> torch.Tensor:
        """The smallest leaf (a 0-d tensor read from the root; ``inf`` when nothing was written)."""
        return self._root[0].clone()


class _MaxTree(_SegmentTree):
    """Maximums (leaves start at ``-inf``); used to track the largest priority still stored."""

    _neutral = -math.inf
    _row_op = staticmethod(torch.amax)
    _reduce_name = "max"

    @staticmethod
    def _reduce_all(x: torch.Tensor) -> torch.Tensor:
        return x.amax()

    def max(self) -> torch.Tensor:
        return self._root[0].clone()
