"""Sum-tree update and sampling at a million leaves: rl-kernels' Triton path vs its torch path vs rl-replay's SumTree.

Cases (issue): update of 256 / 4096 indices (with duplicates) and sampling of 256 / 4096 leaves, at
capacity 1e6, float64 priorities, arity 32 (rl-replay's default). Implementations:

- ``rl_kernels triton``: :class:`rl_kernels.SumTree` with ``backend="triton"`` (update: validation
  sync + one fused launch up to 1024 indices, per-level launches above; sample: total read + one
  search launch);
- ``rl_kernels triton per-level`` / ``fused``: the two update schemes forced, to compare them;
- ``rl_kernels triton validate=False``: the update without its one-sync argument check;
- ``rl_kernels torch``: the same class on its torch path;
- ``rl_replay torch`` (the baseline): rl-replay's own SumTree on the GPU with the kernel dispatch off
  (update = ``tree.update``; sample = what PrioritizedSampler.sample does: uniform masses times the
  root, then ``_descend`` with its scratch buffers);
- ``rl_replay dispatched``: the same calls with the dispatch on (rl-replay's tree, rl-kernels' kernels).

Every implementation's output is checked first: updates against leaves written by a plain
last-wins reference (max abs error over the leaves and the total), sampling against
``searchsorted(cumsum(leaves), masses, right=True)`` for the same masses (count of mismatching
indices). Priorities are multiples of 1/4, so every sum is exact and a correct path has 0 error.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from _timing import median_ms, peak_mb

CAPACITY = 1_000_000
ARITY = 32


def _timer(
    device: torch.device, warmup: int, repeats: int
) -> Callable[[Callable[[], Any]], tuple[float, float | None]]:
    cuda = device.type == "cuda"
    return lambda fn: (median_ms(fn, cuda, warmup, repeats), peak_mb(fn, cuda))


def _last_wins_reference(leaves: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    last = torch.full(leaves.shape, -1, dtype=torch.int64, device=leaves.device)
    last.scatter_reduce_(0, index, torch.arange(index.shape[0], device=index.device), reduce="amax")
    out = leaves.clone()
    hit = last >= 0
    out[hit] = values[last[hit]]
    return out


def run(dry_run: bool) -> list[dict]:
    """Rows for each (op, case, impl); see the module docstring."""
    import rl_replay.trees as replay_trees
    from rl_kernels import _backend
    from rl_kernels.trees import SumTree

    device = torch.device("cpu" if dry_run else "cuda")
    capacity = 3000 if dry_run else CAPACITY
    sizes = (16, 64) if dry_run else (256, 4096)
    measure = _timer(device, 1 if dry_run else 3, 2 if dry_run else 25)
    gen = torch.Generator(device=device).manual_seed(0)
    start_leaves = torch.randint(0, 32, (capacity,), device=device, generator=gen).double() / 4
    start_leaves[torch.rand(capacity, device=device, generator=gen) < 0.2] = 0.0
    rows: list[dict] = []
    saved_force, saved_cache = replay_trees._FORCE_KERNELS, list(replay_trees._KERNELS)

    def set_dispatch(on: bool) -> None:
        replay_trees._KERNELS.clear()
        replay_trees._FORCE_KERNELS = on and dry_run
        if not on:
            replay_trees._KERNELS.append(None)

    def kernel_tree(backend: str) -> Any:
        tree = SumTree(capacity, device, arity=ARITY, backend=backend)
        tree.update(torch.arange(capacity, device=device), start_leaves)
        return tree

    def replay_tree() -> Any:
        tree = replay_trees.SumTree(capacity, device=device, arity=ARITY)
        tree.update(torch.arange(capacity, device=device), start_leaves)
        return tree

    def kernels_usable() -> bool:
        return _backend.triton_available() and (device.type == "cuda" or _backend.interpreting())

    try:
        from rl_kernels import _trees_triton
    except Exception:  # no Triton: the Triton rows record why
        _trees_triton = None
    fused_max = _trees_triton._FUSED_MAX if _trees_triton is not None else 0

    # ------------------------------------------------------------------ update
    for n in sizes:
        case = f"capacity={capacity}, n={n}, float64, arity={ARITY}"
        index = torch.randint(0, capacity, (n,), device=device, generator=gen)
        index[n // 2 :: 7] = index[: len(range(n // 2, n, 7))]  # duplicates, the later ones win
        values = torch.randint(0, 32, (n,), device=device, generator=gen).double() / 4
        expected = _last_wins_reference(start_leaves, index, values)

        def update_rows(impl: str, make: Callable[[], Any], call: Callable[[Any], None], leaves_of, note=None):
            try:
                tree = make()
                call(tree)
                leaves = leaves_of(tree)
                err = max(
                    (leaves[:capacity] - expected).abs().max().item(),
                    abs(float(tree_total(tree)) - expected.sum().item()),
                )
                ms, peak = measure(lambda: call(tree))
                rows.append(
                    {
                        "op": "update",
                        "case": case,
                        "impl": impl,
                        "median_ms": ms,
                        "peak_mem_mb": peak,
                        "max_abs_err": err,
                        "note": note,
                    }
                )
            except Exception as exc:  # keep going: one broken path must not hide the others
                rows.append({"op": "update", "case": case, "impl": impl, "note": f"{type(exc).__name__}: {exc}"[:300]})

        def tree_total(tree: Any) -> Any:
            return tree.total() if hasattr(tree, "total") else tree.sum()

        set_dispatch(False)
        update_rows("rl_replay torch (baseline)", replay_tree, lambda t: t.update(index, values), lambda t: t[:])
        update_rows(
            "rl_kernels torch", lambda: kernel_tree("torch"), lambda t: t.update(index, values), lambda t: t.leaves
        )
        if kernels_usable() and _trees_triton is not None:
            update_rows(
                "rl_kernels triton",
                lambda: kernel_tree("triton"),
                lambda t: t.update(index, values),
                lambda t: t.leaves,
                note=f"{'fused' if n <= fused_max else 'per-level'} scheme",
            )
            update_rows(
                "rl_kernels triton validate=False",
                lambda: kernel_tree("triton"),
                lambda t: t.update(index, values, validate=False),
                lambda t: t.leaves,
            )
            for scheme, limit in (("fused", 1 << 30), ("per-level", 0)):
                _trees_triton._FUSED_MAX = limit
                try:
                    update_rows(
                        f"rl_kernels triton {scheme} validate=False",
                        lambda: kernel_tree("triton"),
                        lambda t: t.update(index, values, validate=False),
                        lambda t: t.leaves,
                    )
                finally:
                    _trees_triton._FUSED_MAX = fused_max
            set_dispatch(True)
            update_rows("rl_replay dispatched", replay_tree, lambda t: t.update(index, values), lambda t: t[:])
            set_dispatch(False)
        else:
            rows.append({"op": "update", "case": case, "impl": "rl_kernels triton", "note": "Triton unavailable"})

    # ------------------------------------------------------------------ sample
    cumsum = start_leaves.cumsum(0)
    for n in sizes:
        case = f"capacity={capacity}, n={n}, float64, arity={ARITY}"
        seed = 1234 + n

        def masses() -> torch.Tensor:
            g = torch.Generator(device=device).manual_seed(seed)
            return torch.rand(n, dtype=torch.float64, device=device, generator=g) * cumsum[-1]

        expected = torch.searchsorted(cumsum, masses(), right=True)

        def sample_rows(impl: str, make: Callable[[], Any], call: Callable[[Any, torch.Generator], torch.Tensor]):
            try:
                tree = make()
                got = call(tree, torch.Generator(device=device).manual_seed(seed))
                mismatches = float((got != expected).sum().item())
                g = torch.Generator(device=device).manual_seed(seed)
                ms, peak = measure(lambda: call(tree, g))
                rows.append(
                    {
                        "op": "sample",
                        "case": case,
                        "impl": impl,
                        "median_ms": ms,
                        "peak_mem_mb": peak,
                        "max_abs_err": mismatches,
                    }
                )
            except Exception as exc:
                rows.append({"op": "sample", "case": case, "impl": impl, "note": f"{type(exc).__name__}: {exc}"[:300]})

        def replay_sample(tree: Any, g: torch.Generator, bufs: dict = {}) -> torch.Tensor:  # noqa: B006 (cache)
            if bufs.get("n") != n or bufs.get("tree") is not tree:
                bufs.clear()
                bufs.update(tree._descend_buffers(n), tree=tree)
            mass = torch.rand(n, dtype=torch.float64, generator=g, device=device).mul_(tree._root)
            return tree._descend(mass, True, capacity - 1, bufs)

        set_dispatch(False)
        sample_rows("rl_replay torch (baseline)", replay_tree, replay_sample)
        sample_rows("rl_kernels torch", lambda: kernel_tree("torch"), lambda t, g: t.sample(n, generator=g))
        if kernels_usable():
            sample_rows("rl_kernels triton", lambda: kernel_tree("triton"), lambda t, g: t.sample(n, generator=g))
            set_dispatch(True)
            sample_rows("rl_replay dispatched", replay_tree, replay_sample)
            set_dispatch(False)
        else:
            rows.append({"op": "sample", "case": case, "impl": "rl_kernels triton", "note": "Triton unavailable"})

    replay_trees._FORCE_KERNELS = saved_force
    replay_trees._KERNELS[:] = saved_cache
    # ratios against the baseline of the same op and case
    base = {(r["op"], r["case"]): r.get("median_ms") for r in rows if r["impl"].endswith("(baseline)")}
    for row in rows:
        ref = base.get((row["op"], row["case"]))
        ms = row.get("median_ms")
        baseline = row["impl"].endswith("(baseline)")
        row["ratio"] = ref / ms if ref and ms and not baseline else None
        if baseline:
            row["max_abs_err"] = None if row.get("max_abs_err") == 0 else row.get("max_abs_err")
        row.setdefault("target", None)
        row.setdefault("met", None)
        row.setdefault("peak_mem_mb", None)
        row.setdefault("median_ms", None)
        row.setdefault("max_abs_err", None)
    return rows


if __name__ == "__main__":
    import os
    import sys

    dry = "--dry-run" in sys.argv
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for r in run(dry):
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
