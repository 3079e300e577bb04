"""Sum and min segment trees for prioritized replay: batched updates and prefix-sum search, on CPU or GPU.

:class:`SumTree` holds one non-negative priority per slot and finds, for a batch of masses, the slot
where the running sum of the priorities reaches each mass (:meth:`SumTree.scan_lower_bound`), which
is how proportional sampling picks slots (:meth:`SumTree.sample`). :class:`MinTree` holds the
smallest priority (for importance weights). :func:`tree_write_` and :func:`tree_search` are the same
operations on a bare node tensor; rl-replay's trees, which share the layout, call them for CUDA
storages.

Layout: all nodes live in one flat tensor ``[root, level 1, ..., leaves]``. With ``arity`` children
per node and ``depth`` levels below the root (the fewest with ``arity**depth >= capacity``), the root
has ``top = ceil(capacity / arity**(depth - 1))`` children and level ``l`` holds
``top * arity**(l - 1)`` nodes; leaves past ``capacity`` keep the neutral value (0 for sums, +inf
for minimums). Every internal node is the reduction of its children. Priorities are float64 by
default (as rl-replay's trees: long sums do not drift); float32 works too.

Two paths (``backend=``, see :mod:`rl_kernels._backend`), with the same results up to the order in
which floating sums are added:

- ``"torch"``: the reference, a few torch ops per level;
- ``"triton"``: an update is one kernel launch for up to ~1k indices (it stamps the last occurrence
  of each index, writes the leaves and refreshes every level inside one program) and one launch per
  level beyond that; a search is one launch whose programs each descend all levels for a block of
  masses.

Examples:
    >>> import torch
    >>> from rl_kernels.trees import SumTree
    >>> tree = SumTree(6, backend="torch")
    >>> tree.update(torch.tensor([0, 2, 5]), torch.tensor([1.0, 3.0, 2.0]))
    >>> tree.total().item()
    6.0
    >>> tree.scan_lower_bound(torch.tensor([0.5, 1.0, 1.5, 4.0, 5.0, 7.0])).tolist()
    [0, 0, 2, 2, 5, 6]
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from ._backend import BACKENDS, resolve_backend

__all__ = ["MinTree", "SumTree", "tree_layout", "tree_search", "tree_write_"]

_REDUCES = ("sum", "min", "max")
_NEUTRAL = {"sum": 0.0, "min": math.inf, "max": -math.inf}
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
# stamps (base + position) restart from 0 once they pass this
_STAMP_LIMIT = 1 << 62


# ---------------------------------------------------------------------------- layout
@functools.lru_cache(maxsize=64)
def tree_layout(capacity: int, arity: int) -> tuple[int, int, int]:
    """``(top, depth, num_nodes)`` of a tree of ``capacity`` leaves and ``arity`` children per node.

    ``depth`` levels lie below the root (the leaves are level ``depth``), the root has ``top``
    children and the flat node tensor holds ``num_nodes`` entries.

    Examples:
        >>> tree_layout(1_000_000, 32)  # 31 + 992 + 31744 + 1015808 nodes under the root
        (31, 4, 1048576)
        >>> tree_layout(5, 2)
        (2, 3, 15)
    """
    _check_int("tree_layout", "capacity", capacity, 1)
    _check_int("tree_layout", "arity", arity, 2)
    depth = 1
    while arity**depth < capacity:
        depth += 1
    top = -(-capacity // arity ** (depth - 1))
    num_nodes = 1 + top * (arity**depth - 1) // (arity - 1)
    return top, depth, num_nodes


def _level_offsets(top: int, depth: int, arity: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of levels 1 .. depth in the flat node tensor."""
    out, off, size = [], 1, top
    for _ in range(depth):
        out.append((off, size))
        off += size
        size *= arity
    return out


# ---------------------------------------------------------------------------- checks
def _check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}.")
    return value


def _check_nodes(owner: str, nodes: Any, capacity: int, arity: int) -> tuple[int, int]:
    top, depth, num_nodes = tree_layout(capacity, arity)
    if not isinstance(nodes, torch.Tensor) or nodes.dim() != 1 or not nodes.is_floating_point():
        got = f"a {nodes.dtype} tensor of shape {list(nodes.shape)}" if isinstance(nodes, torch.Tensor) else nodes
        raise ValueError(f"{owner}: nodes must be a 1-D floating tensor, got {got!r}.")
    if nodes.shape[0] != num_nodes or not nodes.is_contiguous():
        raise ValueError(
            f"{owner}: nodes must be a contiguous tensor of {num_nodes} entries (capacity={capacity}, "
            f"arity={arity}), got {nodes.shape[0]} entries{'' if nodes.is_contiguous() else ' (not contiguous)'}."
        )
    return top, depth


def _as_index(owner: str, index: Any, device: torch.device) -> torch.Tensor:
    index = torch.as_tensor(index, device=device)
    if index.dtype not in _INT_DTYPES:
        raise TypeError(f"{owner}: indices must be an integer tensor, got dtype {index.dtype}.")
    return index.reshape(-1).to(torch.int64).contiguous()


def _as_values(owner: str, name: str, values: Any, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    values = torch.as_tensor(values, device=device)
    if not (values.is_floating_point() or values.dtype in _INT_DTYPES):
        raise TypeError(f"{owner}: {name} must be real numbers, got dtype {values.dtype}.")
    if values.numel() == 1:
        return values.reshape(1).to(dtype).expand(n).contiguous()
    if values.numel() != n:
        raise ValueError(
            f"{owner}: {name} must be a scalar or hold one value per index ({n} indices), "
            f"got shape {list(values.shape)}."
        )
    return values.reshape(-1).to(dtype).contiguous()


# ---------------------------------------------------------------------------- torch path
def _reduce_rows(x: torch.Tensor, reduce: str) -> torch.Tensor:
    if reduce == "sum":
        return x.sum(1)
    return x.amin(1) if reduce == "min" else x.amax(1)


def _write_torch(
    nodes: torch.Tensor, index: torch.Tensor, values: torch.Tensor, top: int, depth: int, arity: int, reduce: str
) -> None:
    """Leaves ``index`` get ``values`` (duplicates carry equal values), then every ancestor is recomputed."""
    levels = [nodes[off : off + size] for off, size in _level_offsets(top, depth, arity)]
    levels[-1].index_copy_(0, index, values)
    parents = index
    for level in range(depth - 1, 0, -1):  # parent levels, deepest first
        parents = torch.div(parents, arity, rounding_mode="floor")
        rows = levels[level].view(-1, arity).index_select(0, parents)
        levels[level - 1].index_copy_(0, parents, _reduce_rows(rows, reduce))
    nodes[0:1] = _reduce_rows(levels[0].view(1, -1), reduce)


def _last_wins_torch(index: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct indices and, for each, the value at its last occurrence."""
    unique, inverse = torch.unique(index, return_inverse=True)
    positions = torch.arange(index.shape[0], device=index.device)
    last = torch.full_like(unique, -1).scatter_reduce_(0, inverse, positions, reduce="amax")
    return unique, values.index_select(0, last)


def _search_torch(
    nodes: torch.Tensor,
    mass: torch.Tensor,
    top: int,
    depth: int,
    arity: int,
    capacity: int,
    right: bool,
    sample: bool,
    limit: int,
) -> torch.Tensor:
    """The reference descent: one gather, cumulative sum and count per level (the kernel's algorithm)."""
    n = mass.shape[0]
    val = mass.reshape(n, 1)
    node = torch.zeros(n, dtype=torch.int64, device=mass.device)
    over = torch.zeros(n, dtype=torch.bool, device=mass.device)
    for level, (off, size) in enumerate(_level_offsets(top, depth, arity)):
        width = top if level == 0 else arity
        if level == 0:
            kids = nodes[off : off + size].expand(n, width)
        else:
            kids = nodes[off : off + size].view(-1, arity).index_select(0, node)
        run = kids.cumsum(1)
        cnt = (run <= val).sum(1) if right else (run < val).sum(1)
        lanes = torch.arange(width, device=mass.device)
        if sample:  # the first positive child at or after the count, else the last positive one
            positive = kids > 0
            nxt = torch.where(positive & (lanes >= cnt[:, None]), lanes, width).amin(1)
            last = torch.where(positive, lanes, -1).amax(1).clamp_(min=0)
            pick = torch.where(nxt < width, nxt, last)
        else:
            if level == 0:
                over = cnt >= width
            pick = cnt.clamp(max=width - 1)
        before = torch.where(lanes == (pick - 1)[:, None], run, torch.zeros((), dtype=run.dtype, device=run.device))
        val = val - before.sum(1, keepdim=True)
        node = node * arity + pick
    if not sample:
        node = torch.where(over, torch.full_like(node, capacity), node)
    return node.clamp_(max=limit)


# ---------------------------------------------------------------------------- functional API
def tree_write_(
    nodes: torch.Tensor,
    index: torch.Tensor,
    values: torch.Tensor,
    *,
    capacity: int,
    arity: int,
    reduce: str = "sum",
    backend: str = "auto",
) -> None:
    """Writes ``values`` at leaves ``index`` of the flat tree ``nodes`` and recomputes their ancestors, in place.

    ``nodes`` has the layout of :func:`tree_layout` (the module docstring). Duplicated indices must
    carry equal values (resolve last-wins first; :meth:`SumTree.update` does). The indices are not
    range-checked here (no device sync): indices outside ``[0, capacity)`` raise on the torch path
    and are skipped by the kernel.

    Args:
        nodes: the 1-D node tensor (contiguous).
        index: 1-D int64 leaf indices, on the nodes' device.
        values: one value per index (converted to the nodes' dtype).
        capacity: number of leaves.
        arity: children per node.
        reduce: ``"sum"``, ``"min"`` or ``"max"``: what internal nodes hold.
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.

    Examples:
        >>> import torch
        >>> nodes = torch.zeros(tree_layout(5, 2)[2], dtype=torch.float64)
        >>> tree_write_(nodes, torch.tensor([1, 4]), torch.tensor([2.0, 3.0]), capacity=5, arity=2, backend="torch")
        >>> nodes[0].item()
        5.0
    """
    owner = "tree_write_"
    if reduce not in _REDUCES:
        raise ValueError(f"{owner}: reduce must be one of {_REDUCES}, got {reduce!r}.")
    top, depth = _check_nodes(owner, nodes, capacity, arity)
    path = resolve_backend(owner, backend, nodes.device)
    index = _as_index(owner, index, nodes.device)
    values = _as_values(owner, "values", values, index.shape[0], nodes.dtype, nodes.device)
    if index.shape[0] == 0:
        return
    if path == "torch":
        _write_torch(nodes, index, values, top, depth, arity, reduce)
    else:
        from . import _trees_triton

        _trees_triton.write_(nodes, index, values, capacity=capacity, arity=arity, top=top, depth=depth, op=reduce)


def tree_search(
    nodes: torch.Tensor,
    mass: torch.Tensor,
    *,
    capacity: int,
    arity: int,
    right: bool = False,
    limit: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """For each mass, the first leaf whose inclusive prefix sum is ``>= mass`` (``> mass`` with ``right``).

    That is ``searchsorted(cumsum(leaves), mass, right=right)``: masses past the total give
    ``capacity``; the result is then clamped to at most ``limit`` (default ``capacity``). The
    descent subtracts partial sums level by level, so a mass within rounding of a boundary may land
    on either side of it (exact for sums that are exact in the dtype).

    Args:
        nodes: the 1-D node tensor of a sum tree (:func:`tree_layout`).
        mass: the masses (any shape; converted to the nodes' dtype).
        capacity: number of leaves.
        arity: children per node.
        right: strict ``>`` (what proportional sampling wants: zero leaves are never returned
            for masses in ``[0, total)``) instead of ``>=``.
        limit: the largest index returned.
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.

    Returns:
        An int64 tensor shaped like ``mass``.

    Examples:
        >>> import torch
        >>> nodes = torch.zeros(tree_layout(4, 2)[2], dtype=torch.float64)
        >>> tree_write_(nodes, torch.arange(4), torch.tensor([1.0, 0.0, 2.0, 1.0]), capacity=4, arity=2, backend="torch")
        >>> m = torch.tensor([0.0, 1.0, 2.5, 4.0])
        >>> tree_search(nodes, m, capacity=4, arity=2, backend="torch").tolist()
        [0, 0, 2, 3]
        >>> tree_search(nodes, m, capacity=4, arity=2, right=True, backend="torch").tolist()
        [0, 2, 2, 4]
    """
    owner = "tree_search"
    top, depth = _check_nodes(owner, nodes, capacity, arity)
    path = resolve_backend(owner, backend, nodes.device)
    limit = capacity if limit is None else _check_int(owner, "limit", limit, 0)
    mass = torch.as_tensor(mass, device=nodes.device)
    if not (mass.is_floating_point() or mass.dtype in _INT_DTYPES):
        raise TypeError(f"{owner}: mass must be real numbers, got dtype {mass.dtype}.")
    flat = mass.reshape(-1).to(nodes.dtype).contiguous()
    out = _search(nodes, flat, path, top, depth, arity, capacity, right, False, limit)
    return out.view(mass.shape)


def _search(
    nodes: torch.Tensor,
    mass: torch.Tensor,
    path: str,
    top: int,
    depth: int,
    arity: int,
    capacity: int,
    right: bool,
    sample: bool,
    limit: int,
) -> torch.Tensor:
    if path == "torch":
        return _search_torch(nodes, mass, top, depth, arity, capacity, right, sample, limit)
    from . import _trees_triton

    return _trees_triton.search(
        nodes, mass, capacity=capacity, arity=arity, top=top, depth=depth, right=right, sample=sample, limit=limit
    )


# ---------------------------------------------------------------------------- classes
class _Tree:
    """What :class:`SumTree` and :class:`MinTree` share (``_reduce`` differs)."""

    _reduce = "sum"

    def __init__(
        self,
        capacity: int,
        device: Any = None,
        *,
        dtype: torch.dtype = torch.float64,
        arity: int = 32,
        backend: str = "auto",
    ) -> None:
        owner = type(self).__name__
        _check_int(owner, "capacity", capacity, 1)
        _check_int(owner, "arity", arity, 2)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"{owner}: dtype must be a floating torch.dtype, got {dtype!r}.")
        if backend not in BACKENDS:
            raise ValueError(f"{owner}: backend must be one of {BACKENDS}, got {backend!r}.")
        device = torch.device(device) if device is not None else torch.empty(0).device
        self._backend = resolve_backend(owner, backend, device)
        self._capacity = capacity
        self._arity = arity
        self._top, self._depth, num_nodes = tree_layout(capacity, arity)
        self._leaf_off = _level_offsets(self._top, self._depth, arity)[-1][0]
        self._nodes = torch.full((num_nodes,), _NEUTRAL[self._reduce], dtype=dtype, device=device)
        self._stamps: torch.Tensor | None = None  # int64 per leaf: the Triton path's last-wins scratch
        self._next_stamp = 0

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._capacity

    @property
    def arity(self) -> int:
        """Children per internal node."""
        return self._arity

    @property
    def dtype(self) -> torch.dtype:
        """The priorities' dtype."""
        return self._nodes.dtype

    @property
    def device(self) -> torch.device:
        """Where the nodes live."""
        return self._nodes.device

    @property
    def backend(self) -> str:
        """``"torch"`` or ``"triton"``: the path this tree's operations take."""
        return self._backend

    @property
    def nodes(self) -> torch.Tensor:
        """The flat node tensor ``[root, level 1, ..., leaves]`` (the tree's own storage: do not write to it)."""
        return self._nodes

    @property
    def leaves(self) -> torch.Tensor:
        """The ``capacity`` leaf priorities (a view of :attr:`nodes`)."""
        return self._nodes[self._leaf_off : self._leaf_off + self._capacity]

    def __len__(self) -> int:
        return self._capacity

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self._capacity}, arity={self._arity}, dtype={self.dtype}, "
            f"device={self.device}, backend={self._backend!r})"
        )

    def _bad(self, values: torch.Tensor) -> torch.Tensor:
        """Where ``values`` holds priorities this tree does not accept."""
        return torch.isnan(values)

    def _allowed(self) -> str:
        return "not NaN"

    def update(self, indices: Any, priorities: Any, *, validate: bool = True) -> None:
        """Sets the leaves at ``indices`` to ``priorities`` (a scalar or one per index); a repeated index keeps its last value.

        With ``validate`` (the default) the indices must lie in ``[0, capacity)`` and the priorities
        be allowed (sum trees: finite and ``>= 0``; min trees: not NaN), checked with one device
        sync before anything is written; ``validate=False`` skips that check (bad indices are then
        the caller's problem: the kernel skips them, the torch path raises).

        Examples:
            >>> import torch
            >>> tree = MinTree(4, backend="torch")
            >>> tree.update(torch.tensor([1, 3, 1]), torch.tensor([5.0, 2.0, 7.0]))
            >>> tree.leaves.tolist(), tree.min().item()
            ([inf, 7.0, inf, 2.0], 2.0)
        """
        owner = f"{type(self).__name__}.update"
        index = _as_index(owner, indices, self.device)
        values = _as_values(owner, "priorities", priorities, index.shape[0], self.dtype, self.device)
        n = index.shape[0]
        if n == 0:
            return
        if validate:
            lo, hi, bad = torch.stack([index.min(), index.max(), self._bad(values).any().long()]).tolist()
            if lo < 0 or hi >= self._capacity:
                raise IndexError(f"{owner}: indices must lie in [0, {self._capacity}), got values in [{lo}, {hi}].")
            if bad:
                shown = values[self._bad(values)][:4].tolist()
                raise ValueError(f"{owner}: priorities must be {self._allowed()}, got {shown} among them.")
        if self._backend == "torch":
            unique, last = _last_wins_torch(index, values)
            _write_torch(self._nodes, unique, last, self._top, self._depth, self._arity, self._reduce)
            return
        from . import _trees_triton

        if self._stamps is None or self._next_stamp + n >= _STAMP_LIMIT:
            self._stamps = torch.zeros(self._capacity, dtype=torch.int64, device=self.device)
            self._next_stamp = 0
        base = self._next_stamp
        self._next_stamp += n
        _trees_triton.write_(
            self._nodes,
            index,
            values,
            capacity=self._capacity,
            arity=self._arity,
            top=self._top,
            depth=self._depth,
            op=self._reduce,
            stamp=self._stamps,
            base=base,
        )


class SumTree(_Tree):
    """Non-negative priorities in a sum tree: batched updates, the total, prefix-sum search and sampling.

    Args:
        capacity: number of leaves (all start at 0).
        device: where the nodes live (default: torch's default device).
        dtype: the priorities' dtype (float64 by default; float32 works too).
        arity: children per internal node (32: a million leaves in 4 levels).
        backend: ``"auto"`` (Triton for CUDA tensors when installed), ``"torch"`` or ``"triton"``.

    Examples:
        >>> import torch
        >>> tree = SumTree(4, backend="torch")
        >>> tree.update(torch.tensor([0, 2, 3, 2]), torch.tensor([1.0, 9.0, 2.0, 3.0]))  # index 2: last wins
        >>> tree.total().item(), tree.leaves.tolist()
        (6.0, [1.0, 0.0, 3.0, 2.0])
        >>> sorted(set(tree.sample(100, generator=torch.Generator().manual_seed(0)).tolist()))  # leaf 1 is zero
        [0, 2, 3]
    """

    _reduce = "sum"

    def _bad(self, values: torch.Tensor) -> torch.Tensor:
        return ~torch.isfinite(values) | (values < 0)

    def _allowed(self) -> str:
        return "finite and >= 0"

    def total(self) -> torch.Tensor:
        """The sum of all priorities (a 0-d tensor on the tree's device; read from the root, no sync).

        Examples:
            >>> import torch
            >>> tree = SumTree(3, backend="torch")
            >>> tree.update(torch.tensor([0, 1]), torch.tensor([0.5, 2.0]))
            >>> tree.total().item()
            2.5
        """
        return self._nodes[0].clone()

    def scan_lower_bound(self, mass: Any) -> torch.Tensor:
        """For each mass, the first leaf whose inclusive prefix sum is ``>= mass`` (``capacity`` if none).

        ``searchsorted(cumsum(leaves), mass)``, computed by descending the tree; a mass within
        rounding of a boundary may land on either side of it.

        Args:
            mass: the masses (any shape).

        Returns:
            An int64 tensor of leaf indices shaped like ``mass``.

        Examples:
            >>> import torch
            >>> tree = SumTree(3, backend="torch")
            >>> tree.update(torch.arange(3), torch.tensor([1.0, 0.0, 1.0]))
            >>> tree.scan_lower_bound(torch.tensor([0.0, 1.0, 1.5, 2.0, 2.5])).tolist()
            [0, 0, 2, 2, 3]
        """
        owner = "SumTree.scan_lower_bound"
        mass = torch.as_tensor(mass, device=self.device)
        if not (mass.is_floating_point() or mass.dtype in _INT_DTYPES):
            raise TypeError(f"{owner}: mass must be real numbers, got dtype {mass.dtype}.")
        flat = mass.reshape(-1).to(self.dtype).contiguous()
        out = _search(
            self._nodes,
            flat,
            self._backend,
            self._top,
            self._depth,
            self._arity,
            self._capacity,
            False,
            False,
            self._capacity,
        )
        return out.view(mass.shape)

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` leaf indices drawn with replacement, each with probability ``priority / total()``.

        Draws ``n`` masses uniformly in ``[0, total())`` (from ``generator``, which must be on the
        tree's device, when given) and returns the first leaf whose inclusive prefix sum exceeds
        each mass, so zero-priority leaves are never drawn (the descent also steps over zero
        children when rounding would land on one). Reads the total once (a device sync).

        Raises:
            RuntimeError: ``total()`` is 0 (every priority is zero; nothing can be drawn) or not finite.

        Examples:
            >>> import torch
            >>> tree = SumTree(3, backend="torch")
            >>> tree.update(torch.tensor([2]), torch.tensor([4.0]))
            >>> tree.sample(3).tolist()
            [2, 2, 2]
        """
        owner = "SumTree.sample"
        _check_int(owner, "n", n, 0)
        if generator is not None:
            if not isinstance(generator, torch.Generator):
                raise TypeError(
                    f"{owner}: generator must be a torch.Generator or None, got {type(generator).__name__}."
                )
            if generator.device.type != self.device.type:
                raise ValueError(
                    f"{owner}: generator must be on the tree's device ({self.device}), got one on {generator.device}."
                )
        total = float(self._nodes[0])
        if not (total > 0 and math.isfinite(total)):
            raise RuntimeError(
                f"{owner}: total() is {total}: every priority is zero (or the sum overflowed), so nothing can be "
                "sampled; update some priorities first."
            )
        mass = torch.rand(n, dtype=self.dtype, device=self.device, generator=generator).mul_(self._nodes[0])
        return _search(
            self._nodes,
            mass,
            self._backend,
            self._top,
            self._depth,
            self._arity,
            self._capacity,
            True,
            True,
            self._capacity - 1,
        )


class MinTree(_Tree):
    """Priorities in a min tree: batched updates and the smallest priority.

    Leaves start at ``+inf``, so slots never written do not count.

    Args:
        capacity: number of leaves.
        device: where the nodes live.
        dtype: the priorities' dtype (float64 by default).
        arity: children per internal node.
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.

    Examples:
        >>> import torch
        >>> tree = MinTree(5, backend="torch")
        >>> tree.update(torch.tensor([4, 1]), torch.tensor([3.0, 0.5]))
        >>> tree.min().item()
        0.5
    """

    _reduce = "min"

    def min(self) -> torch.Tensor:
        """The smallest priority (a 0-d tensor, ``inf`` before any update; read from the root, no sync).

        Examples:
            >>> MinTree(2, backend="torch").min().item()
            inf
        """
        return self._nodes[0].clone()
