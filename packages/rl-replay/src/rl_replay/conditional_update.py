"""Conditional updates: patch stored records only if their slot still holds what was sampled.

A learner that computes something from a sample (new priorities, value targets, a refreshed
recurrent state) writes it back later; by then a round-robin writer may have reused the slot.
With a writer built with ``track_generations=True``, every sample carries the slots' generation
stamps; :func:`update_if_present` writes a patch only to the records whose stamp is unchanged,
optionally only when an incoming version is newer than the stored one (several asynchronous
writers, the newest wins whatever the arrival order).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from tdict import TensorDictBase, is_tensor_collection

__all__ = ["ConditionalUpdateResult", "update_if_present"]


@dataclasses.dataclass(frozen=True)
class ConditionalUpdateResult:
    """What :meth:`ReplayBuffer.update_if_present` did, one entry per record, in input order.

    Attributes:
        updated: the records that received the patch.
        version_rejected: the live records that lost the version comparison (``None`` when no
            version was given). Every record is exactly one of updated, version-rejected or stale.
    """

    updated: torch.Tensor
    version_rejected: torch.Tensor | None = None

    @property
    def updated_count(self) -> int:
        """The number of records patched."""
        return int(self.updated.sum())

    @property
    def version_rejected_count(self) -> int:
        """The number of live records refused by the version comparison."""
        return 0 if self.version_rejected is None else int(self.version_rejected.sum())

    @property
    def stale_count(self) -> int:
        """The number of records whose slot was rewritten or emptied since the handle was taken."""
        return self.updated.numel() - self.updated_count - self.version_rejected_count


def _key(key: Any) -> Any:
    """A nested key in one spelling: ``("a",)`` is ``"a"``."""
    if isinstance(key, tuple) and len(key) == 1:
        return key[0]
    return key


def _leaf(stored: Any, key: Any) -> torch.Tensor:
    value = stored.get(key, None)
    if not isinstance(value, torch.Tensor):
        keys = sorted(map(str, stored.keys(include_nested=True, leaves_only=True)))
        raise KeyError(f"update_if_present: {key!r} is not a stored entry (stored: {keys}).")
    return value


def update_if_present(
    buffer: Any,
    *,
    index: Any,
    generation: Any,
    patch: Any,
    version_key: Any = None,
    version: Any = None,
    require_newer: bool = False,
) -> ConditionalUpdateResult:
    """Writes ``patch`` into the records at ``index`` whose generation still is ``generation``.

    See :meth:`ReplayBuffer.update_if_present` (which calls this under the buffer's lock).
    """
    from .storages.tensor import TensorStorage

    storage, writer = buffer._storage, buffer._writer
    stored = getattr(storage, "_storage", None)
    if not (isinstance(storage, TensorStorage) and is_tensor_collection(stored) and storage._tree_spec is None):
        raise RuntimeError(
            f"Conditional updates need a tensor storage of TensorDicts (LazyTensorStorage, LazyMemmapStorage) to "
            f"patch records in place, got {type(storage).__name__}."
        )
    if not writer.tracks_generations:
        raise RuntimeError(
            f"Conditional updates need a writer that tracks slot generations, e.g. "
            f"{type(writer).__name__}(track_generations=True); {type(writer).__name__} does not."
        )
    if (version_key is None) != (version is None):
        raise ValueError("update_if_present: give version_key and version together (or neither).")
    ndim = storage.ndim
    index = torch.as_tensor(index, dtype=torch.int64).cpu()
    generation = torch.as_tensor(generation, dtype=torch.int64).reshape(-1).cpu()
    if ndim > 1 and index.ndim == 2 and index.shape[-1] == ndim:  # item coordinates
        coords, per_record = index, 1
    else:  # dim-0 slots: on a multi-dim storage, every item of each row
        rows = index.reshape(-1)
        item_dims = tuple(storage.shape[1:ndim])
        per_record = math.prod(item_dims)
        grid = (
            torch.cartesian_prod(*(torch.arange(d) for d in item_dims)).reshape(per_record, -1) if item_dims else None
        )
        coords = (
            rows.unsqueeze(1)
            if grid is None
            else torch.cat([rows.repeat_interleave(per_record).unsqueeze(1), grid.repeat(rows.numel(), 1)], 1)
        )
    n_handles = coords.shape[0] // per_record
    if generation.numel() != n_handles:
        raise ValueError(
            f"update_if_present: {n_handles} indices but {generation.numel()} generations (one per index expected)."
        )
    n = coords.shape[0]
    where = tuple(coords.unbind(1))

    items = patch.items(include_nested=True, leaves_only=True) if isinstance(patch, TensorDictBase) else patch.items()
    values = {_key(k): torch.as_tensor(v) for k, v in items}
    if version_key is not None:
        if isinstance(version_key, str) and "." in version_key:
            raise ValueError(
                f"update_if_present: Dotted-string version keys are not supported, got {version_key!r}; pass the "
                f"nested key as a tuple, e.g. {tuple(version_key.split('.'))!r}."
            )
        version_key = _key(tuple(version_key) if isinstance(version_key, list) else version_key)
        if version_key in values:
            raise ValueError(f"update_if_present: version_key {version_key!r} may not appear in patch.")
        leaf = _leaf(stored, version_key)
        feature = leaf.shape[ndim:]
        if any(d != 1 for d in feature):
            raise ValueError(
                f"update_if_present: version_key {version_key!r} must hold one scalar per record, the storage holds "
                f"feature shape {list(feature)}."
            )
        incoming = torch.as_tensor(version).cpu()
        while incoming.ndim > 1 and incoming.shape[-1] == 1:
            incoming = incoming.squeeze(-1)
        if incoming.ndim == 0:
            incoming = incoming.expand(n_handles)
        elif incoming.numel() != n_handles:
            raise ValueError(
                f"update_if_present: version must be a scalar or hold one entry per index ({n_handles}), got shape "
                f"{list(torch.as_tensor(version).shape)}."
            )
        values[version_key] = (
            incoming.reshape(n_handles).repeat_interleave(per_record).to(leaf.dtype).reshape(n, *feature)
        )

    # every entry is checked before anything is written
    checked = {}
    for key, value in values.items():
        leaf = _leaf(stored, key)
        feature = leaf.shape[ndim:]
        if per_record > 1 and key != version_key:
            rows_layout = (n_handles, *storage.shape[1:ndim])
            dim = getattr(buffer, "_dim_extend", 0)
            if dim and value.ndim >= ndim and value.shape[:ndim] != rows_layout:
                swapped = value.transpose(dim, 0)  # given in the layout the items were written in
                value = swapped if swapped.shape[:ndim] == rows_layout else value
            if value.shape[:ndim] == rows_layout:
                value = value.reshape(n, *value.shape[ndim:])
        if value.shape != (n, *feature) or value.dtype != leaf.dtype:
            raise ValueError(
                f"update_if_present: patch entry {key!r} is a {value.dtype} tensor of shape {list(value.shape)}, "
                f"expected {leaf.dtype} of shape {[n, *feature]} (one row per record)."
            )
        checked[key] = value

    with buffer._lock:
        current = writer.generations_of(where[0]).cpu()
        captured = generation.repeat_interleave(per_record)
        live = (current >= 0) & (captured >= 0) & (current == captured)
        rejected = None
        if version_key is not None:
            rejected = torch.zeros_like(live)
            leaf = _leaf(stored, version_key)
            new = checked[version_key].reshape(-1)
            old = leaf[where].reshape(-1).to(new.device)
            accepted = new > old if require_newer else new >= old
            # a record addressed several times: only its row with the highest version (the last on ties)
            _, record = torch.unique(coords, dim=0, return_inverse=True)
            low = torch.iinfo(new.dtype).min if not new.is_floating_point() else -torch.inf
            top = torch.full((n,), low, dtype=new.dtype).scatter_reduce(0, record, torch.where(live, new, low), "amax")
            row = torch.arange(n)
            best = torch.full((n,), -1).scatter_reduce(
                0, record, torch.where(live & (new == top[record]), row, -1), "amax"
            )
            accepted &= row == best[record]
            rejected = live & ~accepted
            live = live & accepted
        if bool(live.any()):
            target = tuple(c[live] for c in where)
            for key, value in checked.items():
                leaf = _leaf(stored, key)
                leaf[target] = value[live].to(leaf.device)
            storage._bump_mutation_revision()
    return ConditionalUpdateResult(updated=live, version_rejected=rejected)
