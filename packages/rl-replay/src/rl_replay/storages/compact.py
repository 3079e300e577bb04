"""CompactTensorStorage: transitions stored without a second copy of the next observation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tdict import is_tensor_collection

from ._write_checks import check_write, stored_leaves
from .tensor import TensorStorage

__all__ = ["CompactTensorStorage"]


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per item (dim 0) bitwise equality of ``a`` and ``b`` (same shape and dtype).

    Bitwise, not ``==``: NaNs and -0.0 count as "the same" exactly when rebuilding from the other
    copy gives back the same bits. Rows are compared through the widest integer view that fits.
    """
    n = a.shape[0]
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.dtype == torch.bool:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    m = math.prod(a.shape[1:])
    a, b = a.reshape(n, m), b.reshape(n, m)
    row_bytes = m * a.element_size()
    for dtype, width in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2), (torch.uint8, 1)):
        if row_bytes % width == 0:
            break
    if a.element_size() != width:
        a, b = a.view(torch.uint8).view(dtype), b.view(torch.uint8).view(dtype)
    elif a.dtype != dtype:
        a, b = a.view(dtype), b.view(dtype)
    return (a == b).all(1)


def _as_key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class CompactTensorStorage(TensorStorage):
    """Transitions with each observation stored once: ``("next", obs)`` is rebuilt on read.

    Built for transitions written in time order by one env stream (or ``[time, env]`` rows with
    ``ndim=2``, one stream per env): the next observation of item ``t`` is usually the root
    observation of item ``t + 1``, so only root observations are stored. Whenever that does not
    hold exactly — the last step of an episode (its final observation), the newest item (its
    successor is not written yet), any out-of-order write — the next observation goes to a small
    side table. The decision is a bitwise comparison made at write time, so ``get`` always gives
    back exactly what was written, whatever the write order.

    Wrap-around: when the writer overwrites the successor slot of an item that is kept, that item's
    next observation is first copied to the side table (and it stays sampleable); when it
    is itself overwritten, its side entry is freed. The side table grows as needed (by doubling)
    and holds about one entry per stored episode end plus one per write call.

    The side table reallocates when it grows, so this storage cannot be shared across processes
    (:meth:`share_memory_` raises). ``ReplayBuffer.dumps``/``loads`` save and restore it whole
    (rows, links and side table), through the checkpoint hooks below.

    Args:
        max_size: the capacity in items.
        device: where the items live.
        ndim: how many leading dims index items (2: ``[time, env]`` rows of a batched env).
        obs_keys: the root keys whose ``("next", key)`` copy is not stored. Default: every leaf
            present both at the root and under ``"next"`` with the same shape and dtype.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> obs = torch.arange(6.0).view(6, 1)  # one episode: s0..s5
        >>> steps = TensorDict({"observation": obs[:5], "next": {"observation": obs[1:], "reward": torch.ones(5)}}, batch_size=[5])
        >>> s = CompactTensorStorage(10)
        >>> s.set(torch.arange(5), steps)
        >>> s.get(torch.tensor([0, 4]))["next", "observation"].tolist()
        [[1.0], [5.0]]
        >>> s.side_table_size  # only the newest item's next observation is kept apart
        1
    """

    def __init__(self, max_size: int, *, device: Any = "cpu", ndim: int = 1, obs_keys: Sequence | None = None) -> None:
        super().__init__(None, max_size, device=device, ndim=ndim)
        self._obs_keys_arg = None if obs_keys is None else [_as_key(k) for k in obs_keys]
        self.obs_keys: list[tuple] = []
        self._leaves: dict = {}

    # ------------------------------------------------------------------ allocation
    def _find_obs_keys(self, data: Any) -> list[tuple]:
        if not is_tensor_collection(data):
            raise TypeError(f"CompactTensorStorage stores TensorDicts of transitions, got {type(data).__name__}.")
        nxt = data.get("next", None)
        if self._obs_keys_arg is None:
            if nxt is None or not is_tensor_collection(nxt):
                return []
            keys = []
            for key, value in nxt.items(include_nested=True, leaves_only=True):
                root = data.get(key, None)
                if isinstance(root, torch.Tensor) and root.shape == value.shape and root.dtype == value.dtype:
                    keys.append(_as_key(key))
            return keys
        for key in self._obs_keys_arg:
            root, nk = data.get(key, None), data.get(("next", *key), None)
            if not isinstance(root, torch.Tensor) or not isinstance(nk, torch.Tensor):
                raise KeyError(
                    f"CompactTensorStorage: obs_keys entry {key!r} needs tensors at {key!r} and {('next', *key)!r} in the data."
                )
            if root.shape != nk.shape or root.dtype != nk.dtype:
                raise ValueError(
                    f"CompactTensorStorage: obs_keys entry {key!r} has shape {list(root.shape)}/{root.dtype} at the root but "
                    f"{list(nk.shape)}/{nk.dtype} under 'next'."
                )
        return list(self._obs_keys_arg)

    def _allocate(self, data: Any) -> None:
        obs_keys = self._find_obs_keys(data)
        super()._allocate(data.exclude(*[("next", *k) for k in obs_keys]))
        dev = self._storage.device if self._storage.device is not None else self.device
        self.obs_keys = obs_keys
        self._leaves = stored_leaves(data, data.batch_dims)
        self._per_row = math.prod(self._item_dims)
        shape = self.shape
        self._linked = torch.zeros(shape, dtype=torch.bool, device=dev)
        self._side_slot = torch.full(shape, -1, dtype=torch.int64, device=dev)
        self._rest = {k: self._storage.get(k).shape[self.ndim :] for k in obs_keys}
        self._side = {
            k: torch.empty((0, *self._rest[k]), dtype=self._storage.get(k).dtype, device=dev) for k in obs_keys
        }
        self._free = torch.empty(0, dtype=torch.int64, device=dev)
        self._nfree = 0

    @property
    def side_table_size(self) -> int:
        """How many next observations are kept in the side table now."""
        return 0 if self._storage is None else self._side_capacity - self._nfree

    @property
    def _side_capacity(self) -> int:
        return self._free.shape[0]

    def _flat(self, key: tuple) -> torch.Tensor:
        """The stored root observation ``key``, one row per item: [rows * items per row, *features]."""
        t = self._storage.get(key)
        return t.view(-1, *self._rest[key])

    # ------------------------------------------------------------------ side table slots
    def _release(self, slots: torch.Tensor) -> None:
        m = slots.shape[0]
        if m:
            self._free[self._nfree : self._nfree + m] = slots
            self._nfree += m

    def _reserve(self, count: int) -> None:
        """Grows the side table so that ``count`` slots are free (allocation before any write)."""
        if count <= self._nfree:
            return
        old = self._side_capacity
        new = max(2 * old, old + count - self._nfree, 16)
        for k, t in self._side.items():
            grown = torch.empty((new, *t.shape[1:]), dtype=t.dtype, device=t.device)
            grown[:old] = t
            self._side[k] = grown
        free = torch.empty(new, dtype=torch.int64, device=self._free.device)
        free[: self._nfree] = self._free[: self._nfree]
        added = torch.arange(old, new, device=free.device)
        free[self._nfree : self._nfree + added.shape[0]] = added
        self._free = free
        self._nfree += added.shape[0]

    def _take(self, count: int) -> torch.Tensor:
        self._nfree -= count
        return self._free[self._nfree : self._nfree + count].clone()

    # ------------------------------------------------------------------ writes
    def _rows_index(self, index: Any) -> torch.Tensor:
        rows = self._rows
        if isinstance(index, int):
            return torch.tensor([index % rows], device=self._linked.device)
        if isinstance(index, slice):
            return torch.arange(rows, device=self._linked.device)[index]
        if isinstance(index, torch.Tensor):
            if index.dtype == torch.bool:
                index = index.nonzero().squeeze(-1)
            return (index.reshape(-1).to(self._linked.device, torch.int64)) % rows
        if isinstance(index, (list, range)):
            return torch.as_tensor(list(index), dtype=torch.int64, device=self._linked.device) % rows
        raise TypeError(
            f"CompactTensorStorage.set: index must be an int, a slice or a 1-D tensor of rows, got {type(index).__name__}."
        )

    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        if self._storage is None:
            if not is_tensor_collection(data):
                raise TypeError(f"CompactTensorStorage stores TensorDicts of transitions, got {type(data).__name__}.")
            self._allocate(data if not isinstance(index, int) else data[None])
        rows_idx = self._rows_index(index)
        if isinstance(index, int) and is_tensor_collection(data):
            data = data[None]
        n = rows_idx.shape[0]
        assert self._storage is not None  # allocated by _allocate above
        check_write("CompactTensorStorage.set", self._leaves, data, torch.Size([n, *self._storage.batch_size[1:]]))
        if n > 1 and torch.unique(rows_idx).shape[0] != n:
            raise ValueError(
                "CompactTensorStorage.set: the index holds repeated rows; each row can be written once per call."
            )
        if n == 0:
            return
        if self.device is not None and data.device != self.device:
            data = data.to(self.device)
        self._write(rows_idx, data)
        self._grow_len(rows_idx, n)
        self._mutation_revision += 1

    def _write(self, rows_idx: torch.Tensor, data: Any) -> None:
        R, P, n = self._rows, self._per_row, rows_idx.shape[0]
        dev = rows_idx.device
        cols = torch.arange(P, device=dev)
        items = (rows_idx[:, None] * P + cols).reshape(-1)  # flat ids of the written items, in data order
        succ_rows = (rows_idx + 1) % R
        linked_flat, slot_flat = self._linked.view(-1), self._side_slot.view(-1)
        keys = self.obs_keys
        new_root = {k: data.get(k).reshape(n * P, *self._rest[k]) for k in keys}
        new_next = {k: data.get(("next", *k)).reshape(n * P, *self._rest[k]) for k in keys}
        stored = {k: self._flat(k) for k in keys}

        # 1. each written item: is its next observation the root observation its successor slot
        #    will hold after this write (written now, or already there)?
        linked_new = torch.ones(n * P, dtype=torch.bool, device=dev)
        consecutive = n == 1 or bool((rows_idx[1:] == succ_rows[:-1]).all())
        if consecutive:
            # the usual case (round-robin writes): item j's successor is item j + 1 of the data; the
            # last item's successor is in the data only when the write covers every row
            tail = (succ_rows[-1:][:, None] * P + cols).reshape(-1)
            wraps = n == R
            body = (n - 1) * P
            for k in keys:
                nn, nr = new_next[k], new_root[k]
                if body:
                    linked_new[:body] &= _same(nn[:body], nr[P:])
                linked_new[body:] &= _same(nn[body:], nr[:P] if wraps else stored[k].index_select(0, tail))
        else:
            sorted_rows, order = rows_idx.sort()
            at = torch.searchsorted(sorted_rows, succ_rows).clamp_(max=n - 1)
            in_batch = sorted_rows[at] == succ_rows
            succ_pos = order[at]  # where the successor is in the data (valid where in_batch)
            in_items = in_batch.repeat_interleave(P)
            src_new = (succ_pos[:, None] * P + cols).reshape(-1)
            src_old = (succ_rows[:, None] * P + cols).reshape(-1)
            for k in keys:
                mask = in_items.view(-1, *([1] * len(self._rest[k])))
                succ_root = torch.where(mask, new_root[k].index_select(0, src_new), stored[k].index_select(0, src_old))
                linked_new &= _same(new_next[k], succ_root)

        # 2. predecessors not written now whose successor is: re-check their link against the new root
        pred_rows = (rows_idx - 1) % R
        if consecutive:  # only the first row's predecessor can be outside the write
            j = torch.zeros(0 if n == R else 1, dtype=torch.int64, device=dev)
        else:
            j = (~torch.isin(pred_rows, rows_idx)).nonzero().squeeze(-1)
        p_items = (pred_rows[j][:, None] * P + cols).reshape(-1)
        s_items = (rows_idx[j][:, None] * P + cols).reshape(-1)  # their successors (being overwritten)
        d_items = (j[:, None] * P + cols).reshape(-1)  # the same, as positions in the data
        p_linked, p_slot = linked_flat[p_items], slot_flat[p_items]
        p_valid = p_linked | (p_slot >= 0)
        p_same = torch.ones_like(p_valid)
        for k in keys:
            true_next = (
                torch.where(
                    p_linked.view(-1, *([1] * len(self._rest[k]))),
                    stored[k][s_items],
                    self._side[k][p_slot.clamp(min=0)],
                )
                if self._side_capacity
                else stored[k][s_items]
            )
            p_same &= _same(true_next, new_root[k][d_items])
        p_link = p_valid & p_same  # becomes (or stays) linked
        p_free = p_link & (p_slot >= 0)  # its side entry is not needed any more
        p_move = p_valid & ~p_same & p_linked  # loses its link: copy its next observation aside

        # 3. side table: free the entries of overwritten items and of relinked predecessors, then
        #    reserve the new ones (the only allocation) before anything is written
        old_slots = slot_flat[items]
        freed = torch.cat([old_slots[old_slots >= 0], p_slot[p_free]])
        need_new = ~linked_new
        count_new, count_move = int(need_new.sum()), int(p_move.sum())
        self._reserve(count_new + count_move - freed.shape[0])
        moved = {k: stored[k][s_items[p_move]] for k in keys}  # read before the roots are overwritten
        self._release(freed)
        slots_new = self._take(count_new)
        slots_move = self._take(count_move)

        # 4. writes
        for k in keys:
            side = self._side[k]
            side[slots_new] = new_next[k][need_new]
            side[slots_move] = moved[k]
        self._storage[rows_idx] = data.exclude(*[("next", *k) for k in keys])
        new_slot = torch.full((n * P,), -1, dtype=torch.int64, device=dev)
        new_slot[need_new] = slots_new
        linked_flat[items] = linked_new
        slot_flat[items] = new_slot
        p_new_slot = torch.where(p_link, torch.full_like(p_slot, -1), p_slot)
        p_new_slot[p_move] = slots_move
        linked_flat[p_items] = torch.where(p_valid, p_link, p_linked)
        slot_flat[p_items] = p_new_slot

    # ------------------------------------------------------------------ reads
    def get(self, index: Any) -> Any:
        if self._storage is None:
            raise RuntimeError("CompactTensorStorage is empty: nothing was written yet.")
        out = self._storage[index]
        if not self.obs_keys:
            return out
        R, P = self._rows, self._per_row
        shape = self.shape
        dev = self._linked.device
        row_of = torch.arange(R, device=dev).view(R, *([1] * (len(shape) - 1))).expand(shape)[index]
        col_of = torch.arange(P, device=dev).view(1, *shape[1:]).expand(shape)[index] if P > 1 or len(shape) > 1 else 0
        lead = row_of.shape
        f = (row_of * P + col_of).reshape(-1)
        succ = ((row_of + 1) % R * P + col_of).reshape(-1)
        aside = ~self._linked.view(-1)[f]
        has_aside = bool(aside.any())
        if has_aside:
            slots = self._side_slot.view(-1)[f][aside]
            keep = slots >= 0
            rows_all = aside.nonzero().squeeze(-1)
            rows_aside, slots = rows_all[keep], slots[keep]
            rows_blank = rows_all[~keep]  # never-written items read as zeros, as in LazyTensorStorage
        for k in self.obs_keys:
            nxt = self._flat(k).index_select(0, succ)  # index_select: much faster than [] on big rows
            if has_aside:
                nxt[rows_aside] = self._side[k].index_select(0, slots)
                nxt[rows_blank] = 0
            out.set(("next", *k), nxt.view((*lead, *self._rest[k])))
        return out

    def _empty(self) -> None:
        super()._empty()
        if self._storage is not None:
            self._linked.zero_()
            self._side_slot.fill_(-1)
            cap = self._side_capacity
            self._free = torch.arange(cap, device=self._free.device)
            self._nfree = cap

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """``{"len": rows, "compact": ...}``: the stored rows, links and side table (copies)."""
        state = self._checkpoint_state()
        return {
            "len": int(self._len_t),
            "compact": {k: v.clone() if hasattr(v, "clone") else v for k, v in state.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        if isinstance(state, dict) and "compact" in state:
            self._load_checkpoint_state(state["compact"])
        else:
            super().load_state_dict(state)

    def _checkpoint_state(self) -> dict:
        """The stored rows, the links and the side table (for ``ReplayBuffer.dumps``)."""
        if self._storage is None:
            return {"rows": 0}
        rows = int(self._len_t)
        used = self._side_capacity
        return {
            "rows": rows,
            "obs_keys": [list(k) for k in self.obs_keys],
            "storage": self._storage[:rows],
            "linked": self._linked[:rows],
            "side_slot": self._side_slot[:rows],
            "side": [self._side[k] for k in self.obs_keys] if used else [],  # in obs_keys order
            "side_capacity": used,
            "free": self._free[: self._nfree],
        }

    def _load_checkpoint_state(self, state: dict) -> None:
        """Restores what :meth:`_checkpoint_state` saved into this (empty or same-layout) storage."""
        rows = int(state["rows"])
        if rows == 0:
            self._empty()
            return
        keys = [tuple(k) for k in state["obs_keys"]]
        stored, cap = state["storage"], int(state["side_capacity"])
        side = dict(zip(keys, state["side"])) if cap else {}
        if self._storage is None:
            # a template with the full structure (the next observations shaped like the roots)
            template = stored[:1].clone()
            for k in keys:
                template.set(("next", *k), template.get(k).clone())
            self._obs_keys_arg = keys
            self._allocate(template)
        if keys != self.obs_keys or rows > self._rows:
            raise ValueError(
                f"CompactTensorStorage checkpoint: obs_keys {keys} / {rows} rows do not fit this storage "
                f"(obs_keys {self.obs_keys}, {self._rows} rows)."
            )
        assert self._storage is not None  # allocated by _allocate above
        self._storage[:rows] = stored
        self._linked.zero_()
        self._side_slot.fill_(-1)
        self._linked[:rows] = state["linked"]
        self._side_slot[:rows] = state["side_slot"]
        dev = self._linked.device
        self._side = {
            k: (
                side[k].to(dev)
                if cap
                else torch.empty((0, *self._rest[k]), dtype=self._storage.get(k).dtype, device=dev)
            )
            for k in keys
        }
        free = torch.empty(cap, dtype=torch.int64, device=dev)
        nfree = state["free"].shape[0]
        free[:nfree] = state["free"]
        self._free, self._nfree = free, nfree
        self._len_t.fill_(rows)

    def share_memory_(self) -> CompactTensorStorage:
        raise NotImplementedError(
            "CompactTensorStorage cannot be shared across processes (its side table reallocates as it grows); "
            "use LazyTensorStorage or LazyMemmapStorage for multi-process buffers."
        )

    def __repr__(self) -> str:
        return (
            f"CompactTensorStorage(max_size={self.max_size}, len={len(self)}, device={self.device}, ndim={self.ndim}, "
            f"obs_keys={self.obs_keys}, side_table_size={self.side_table_size})"
        )
