"""Triton kernels of :mod:`rl_kernels.trees`: batched leaf writes with ancestor refresh, and batched descent.

Layout (shared with the torch path and rl-replay's trees): one flat tensor ``[root, level 1, ...,
leaves]``; the root has ``top <= arity`` children, level ``l`` holds ``top * arity**(l - 1)`` nodes
and every internal node is the reduction of its ``arity`` children (level 1 those of the root).

Writes (:func:`write_`):

- up to ``_FUSED_MAX`` indices: one single-program kernel does everything: stamp the last
  occurrence of each index (``atomic_max`` of ``base + position`` into a per-tree int64 scratch, so
  the scratch never needs clearing), barrier, write the winning values to the leaves, barrier, and
  then, level by level up to the root, recompute every touched parent from its children (a barrier
  after each level; a level with no more nodes than indices is recomputed whole).
- many indices: the same steps as separate multi-program launches (stamp, leaves, one per level),
  the kernel boundary being the barrier.

Search (:func:`search`): each program takes ``BLOCK`` queries and descends all levels: load the
children of each query's node, cumulative-sum them, count the children whose running sum stays at
or below (``right``) / below (left) the remaining mass, and subtract the running sum before the
chosen child. In sampling mode the choice skips zero children (a rounding slip never lands on a
zero-priority leaf).

Loops over runtime bounds are ``while`` loops: Triton 3.6's interpreter cannot take a runtime
tensor as a ``range`` bound under NumPy 2.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["OPS", "search", "write_"]

OPS = {"sum": 0, "min": 1, "max": 2}
_NEUTRAL = {"sum": 0.0, "min": float("inf"), "max": float("-inf")}
# at most this many indices are written by the single-program kernel (one launch); more go to the
# multi-program launches (one per level)
_FUSED_MAX = 2048
# tile sizes in elements (queries or parents times the arity rounded up to a power of two)
_WRITE_TILE = 4096
_SEARCH_TILE = 1024


@triton.jit
def _reduce_rows(x, OP: tl.constexpr):
    if OP == 0:
        out = tl.sum(x, axis=1)
    elif OP == 1:
        out = tl.min(x, axis=1)
    else:
        out = tl.max(x, axis=1)
    return out


@triton.jit
def _stamp_block(index_ptr, stamp_ptr, start, n, base, capacity, BLOCK: tl.constexpr):
    """stamp[index[p]] = max(stamp[index[p]], base + p) for the positions p of one block."""
    pos = start + tl.arange(0, BLOCK)
    inside = pos < n
    idx = tl.load(index_ptr + pos, mask=inside, other=0)
    ok = inside & (idx >= 0) & (idx < capacity)
    tl.atomic_max(stamp_ptr + idx, base + pos.to(tl.int64), mask=ok)


@triton.jit
def _leaves_block(
    nodes_ptr,
    index_ptr,
    values_ptr,
    stamp_ptr,
    start,
    n,
    base,
    capacity,
    leaf_off,
    STAMPED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """nodes[leaf_off + index[p]] = the value of the last occurrence of index[p], for one block of p."""
    pos = start + tl.arange(0, BLOCK)
    inside = pos < n
    idx = tl.load(index_ptr + pos, mask=inside, other=0)
    ok = inside & (idx >= 0) & (idx < capacity)
    if STAMPED:
        win = tl.load(stamp_ptr + idx, mask=ok, other=0, cache_modifier=".cg") - base
        value = tl.load(values_ptr + win, mask=ok)
    else:
        value = tl.load(values_ptr + pos, mask=ok)
    tl.store(nodes_ptr + leaf_off + idx, value, mask=ok)


@triton.jit
def _parents_block(
    nodes_ptr,
    index_ptr,
    start,
    count,
    whole,
    div,
    n,
    capacity,
    child_off,
    parent_off,
    nchild,
    OP: tl.constexpr,
    NEUTRAL: tl.constexpr,
    ARITY: tl.constexpr,
    ARITY_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Recomputes one block of parents from their children.

    ``whole``: the parents are ``start .. start + BLOCK`` (the whole level); otherwise they are
    ``index[p] // div``, the ancestors of the written leaves.
    """
    j = start + tl.arange(0, BLOCK)
    inside = j < count
    lanes = tl.arange(0, ARITY_P2)
    if whole:
        parent = j.to(tl.int64)
        ok = inside
    else:
        idx = tl.load(index_ptr + j, mask=inside & (j < n), other=0)
        ok = inside & (idx >= 0) & (idx < capacity)
        parent = idx // div
    ptrs = nodes_ptr + child_off + parent[:, None] * ARITY + lanes[None, :]
    kids = tl.load(ptrs, mask=ok[:, None] & (lanes < nchild)[None, :], other=NEUTRAL, cache_modifier=".cg")
    tl.store(nodes_ptr + parent_off + parent, _reduce_rows(kids, OP), mask=ok)


@triton.jit
def _write_fused_kernel(
    nodes_ptr,
    index_ptr,
    values_ptr,
    stamp_ptr,
    n,
    base,
    capacity,
    leaf_off,
    leaf_size,
    OP: tl.constexpr,
    NEUTRAL: tl.constexpr,
    ARITY: tl.constexpr,
    ARITY_P2: tl.constexpr,
    TOP: tl.constexpr,
    DEPTH: tl.constexpr,
    STAMPED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One program: stamps, leaves, then every level up to the root, with a barrier between steps."""
    if STAMPED:
        start = 0
        while start < n:
            _stamp_block(index_ptr, stamp_ptr, start, n, base, capacity, BLOCK)
            start += BLOCK
        tl.debug_barrier()
    start = 0
    while start < n:
        _leaves_block(nodes_ptr, index_ptr, values_ptr, stamp_ptr, start, n, base, capacity, leaf_off, STAMPED, BLOCK)
        start += BLOCK
    tl.debug_barrier()
    child_off = leaf_off
    size = leaf_size
    div = 1
    for _ in tl.static_range(DEPTH - 1):  # pyright: ignore[reportGeneralTypeIssues]  # parents at levels DEPTH - 1 .. 1
        size = size // ARITY
        div = div * ARITY
        parent_off = child_off - size
        whole = n >= size
        count = tl.minimum(n, size) if not whole else size
        start = 0
        while start < count:
            _parents_block(
                nodes_ptr,
                index_ptr,
                start,
                count,
                whole,
                div,
                n,
                capacity,
                child_off,
                parent_off,
                ARITY,
                OP,
                NEUTRAL,
                ARITY,
                ARITY_P2,
                BLOCK,
            )
            start += BLOCK
        tl.debug_barrier()
        child_off = parent_off
    lanes = tl.arange(0, ARITY_P2)
    kids = tl.load(nodes_ptr + 1 + lanes, mask=lanes < TOP, other=NEUTRAL, cache_modifier=".cg")
    if OP == 0:
        root = tl.sum(kids, axis=0)
    elif OP == 1:
        root = tl.min(kids, axis=0)
    else:
        root = tl.max(kids, axis=0)
    tl.store(nodes_ptr, root)


@triton.jit
def _stamp_kernel(index_ptr, stamp_ptr, n, base, capacity, BLOCK: tl.constexpr):
    _stamp_block(index_ptr, stamp_ptr, tl.program_id(0) * BLOCK, n, base, capacity, BLOCK)


@triton.jit
def _leaves_kernel(
    nodes_ptr,
    index_ptr,
    values_ptr,
    stamp_ptr,
    n,
    base,
    capacity,
    leaf_off,
    STAMPED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    _leaves_block(
        nodes_ptr,
        index_ptr,
        values_ptr,
        stamp_ptr,
        tl.program_id(0) * BLOCK,
        n,
        base,
        capacity,
        leaf_off,
        STAMPED,
        BLOCK,
    )


@triton.jit
def _parents_kernel(
    nodes_ptr,
    index_ptr,
    count,
    div,
    n,
    capacity,
    child_off,
    parent_off,
    nchild,
    WHOLE: tl.constexpr,
    OP: tl.constexpr,
    NEUTRAL: tl.constexpr,
    ARITY: tl.constexpr,
    ARITY_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    _parents_block(
        nodes_ptr,
        index_ptr,
        tl.program_id(0) * BLOCK,
        count,
        WHOLE,
        div,
        n,
        capacity,
        child_off,
        parent_off,
        nchild,
        OP,
        NEUTRAL,
        ARITY,
        ARITY_P2,
        BLOCK,
    )


@triton.jit
def _search_kernel(
    nodes_ptr,
    mass_ptr,
    out_ptr,
    n,
    capacity,
    limit,
    ARITY: tl.constexpr,
    ARITY_P2: tl.constexpr,
    TOP: tl.constexpr,
    DEPTH: tl.constexpr,
    RIGHT: tl.constexpr,
    SAMPLE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    q = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = q < n
    val = tl.load(mass_ptr + q, mask=inside, other=0.0)
    lanes = tl.arange(0, ARITY_P2)
    node = tl.zeros([BLOCK], dtype=tl.int64)
    over = q < 0  # all False: set at the top level when the mass is past the total (search mode)
    off = 1
    size = TOP
    for level in tl.static_range(DEPTH):
        nchild = TOP if level == 0 else ARITY
        real = lanes < nchild
        ptrs = nodes_ptr + off + node[:, None] * ARITY + lanes[None, :]
        kids = tl.load(ptrs, mask=inside[:, None] & real[None, :], other=0.0)
        run = tl.cumsum(kids, axis=1)
        if RIGHT:
            below = run <= val[:, None]
        else:
            below = run < val[:, None]
        cnt = tl.sum((below & real[None, :]).to(tl.int32), axis=1)
        if SAMPLE:
            positive = (kids > 0) & real[None, :]
            nxt = tl.min(tl.where(positive & (lanes[None, :] >= cnt[:, None]), lanes[None, :], ARITY_P2), axis=1)
            last = tl.max(tl.where(positive, lanes[None, :], -1), axis=1)
            pick = tl.where(nxt < ARITY_P2, nxt, tl.maximum(last, 0))
        else:
            if level == 0:
                over = cnt >= nchild
            pick = tl.minimum(cnt, nchild - 1)
        before = tl.sum(tl.where(lanes[None, :] == (pick - 1)[:, None], run, 0.0), axis=1)
        val = val - before
        node = node * ARITY + pick
        off = off + size
        size = size * ARITY
    if not SAMPLE:
        node = tl.where(over, capacity, node)
    node = tl.minimum(node, limit)
    tl.store(out_ptr + q, node, mask=inside)


def _launch(kernel: Any, grid: tuple[Any, ...]) -> Any:
    """``kernel[grid]``, untyped (triton types neither constexpr arguments nor launch options)."""
    return kernel[grid]


def _shape_args(capacity: int, arity: int, top: int, depth: int) -> tuple[int, int, int]:
    """(leaf level offset, leaf level size, arity rounded up to a power of two)."""
    leaf_size = top * arity ** (depth - 1)
    leaf_off = 1 + top * (arity ** (depth - 1) - 1) // (arity - 1)
    return leaf_off, leaf_size, int(triton.next_power_of_2(arity))


def write_(
    nodes: torch.Tensor,
    index: torch.Tensor,
    values: torch.Tensor,
    *,
    capacity: int,
    arity: int,
    top: int,
    depth: int,
    op: str,
    stamp: torch.Tensor | None = None,
    base: int = 0,
) -> None:
    """Writes ``values`` at leaves ``index`` and refreshes their ancestors (checked, contiguous inputs).

    With ``stamp`` (an int64 scratch of ``capacity`` entries whose values are all below ``base``),
    the last occurrence of a duplicated index wins; without it duplicates must carry equal values.
    Indices outside ``[0, capacity)`` are skipped.
    """
    n = index.shape[0]
    if n == 0:
        return
    leaf_off, leaf_size, arity_p2 = _shape_args(capacity, arity, top, depth)
    stamped = stamp is not None
    stamp_arg = stamp if stamp is not None else index  # never read when not stamped
    code, neutral = OPS[op], _NEUTRAL[op]
    block = max(16, min(128, _WRITE_TILE // arity_p2))
    if n <= _FUSED_MAX:
        _launch(_write_fused_kernel, (1,))(
            nodes,
            index,
            values,
            stamp_arg,
            n,
            base,
            capacity,
            leaf_off,
            leaf_size,
            OP=code,
            NEUTRAL=neutral,
            ARITY=arity,
            ARITY_P2=arity_p2,
            TOP=top,
            DEPTH=depth,
            STAMPED=stamped,
            BLOCK=block,
            num_warps=8,
        )
        return
    grid = (triton.cdiv(n, 1024),)
    if stamped:
        _launch(_stamp_kernel, grid)(index, stamp_arg, n, base, capacity, BLOCK=1024)
    _launch(_leaves_kernel, grid)(
        nodes, index, values, stamp_arg, n, base, capacity, leaf_off, STAMPED=stamped, BLOCK=1024
    )
    child_off, size, div = leaf_off, leaf_size, 1
    for _ in range(depth - 1):
        size //= arity
        div *= arity
        parent_off = child_off - size
        whole = n >= size
        count = size if whole else n
        _launch(_parents_kernel, (triton.cdiv(count, block),))(
            nodes,
            index,
            count,
            div,
            n,
            capacity,
            child_off,
            parent_off,
            arity,
            WHOLE=whole,
            OP=code,
            NEUTRAL=neutral,
            ARITY=arity,
            ARITY_P2=arity_p2,
            BLOCK=block,
        )
        child_off = parent_off
    _launch(_parents_kernel, (1,))(
        nodes,
        index,
        1,
        1,
        n,
        capacity,
        1,
        0,
        top,
        WHOLE=True,
        OP=code,
        NEUTRAL=neutral,
        ARITY=arity,
        ARITY_P2=arity_p2,
        BLOCK=16,
    )


def search(
    nodes: torch.Tensor,
    mass: torch.Tensor,
    *,
    capacity: int,
    arity: int,
    top: int,
    depth: int,
    right: bool,
    sample: bool,
    limit: int,
) -> torch.Tensor:
    """Leaf of each mass (1-D, the nodes' dtype, contiguous): a new int64 tensor; see the module docstring."""
    n = mass.shape[0]
    out = torch.empty(n, dtype=torch.int64, device=mass.device)
    if n == 0:
        return out
    arity_p2 = int(triton.next_power_of_2(arity))
    block = max(16, min(256, _SEARCH_TILE // arity_p2))
    _launch(_search_kernel, (triton.cdiv(n, block),))(
        nodes,
        mass,
        out,
        n,
        capacity,
        limit,
        ARITY=arity,
        ARITY_P2=arity_p2,
        TOP=top,
        DEPTH=depth,
        RIGHT=right,
        SAMPLE=sample,
        BLOCK=block,
        num_warps=4,
    )
    return out
