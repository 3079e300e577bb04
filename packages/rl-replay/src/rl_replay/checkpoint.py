"""Crash-safe replay-buffer checkpoints: JSON metadata plus raw tensor files, never pickles.

Layout of ``buffer.dumps(path)``::

    path/
        checkpoint.json     # format, version, token, class names, buffer settings: written last
        storage/            # one *part* directory per component
            part.json       # the part's state as tagged JSON (tensors replaced by references)
            tensors/        # the referenced tensors / TensorDicts, saved with tdict's save()
        sampler/  writer/  buffer/   (same layout; buffer/ holds the RNG state and transform states)

A *state* is a tree of dicts, lists, tuples, JSON scalars, tensors and TensorDicts (what
``state_dict()`` of samplers and writers returns). :func:`dump_state` writes one, :func:`load_state`
reads it back; tensors come back as ordinary in-memory tensors (copies, never mappings of the
checkpoint files).

Crash safety: everything is written into ``.<name>.tmp-<token>`` next to ``path``; the marker
file (``checkpoint.json`` / ``part.json``) is written last. Then the old checkpoint is renamed to
``.<name>.old-<token>``, the new one renamed to ``path``, and the old one deleted. A ``kill -9``
at any moment leaves ``path`` holding the old or the new checkpoint, or (killed between the two
renames) no ``path`` but a complete leftover, which :func:`load_buffer` reads and the next dump
renames back into place. Interrupted, incomplete temp dirs are deleted by the next dump.
Several processes may dump to and load from one ``path`` at once: a load sees the old or the new
complete checkpoint, and no dump deletes another's temp dir (``flock`` on ``.<name>.lock``, kept
next to ``path``; see :mod:`tdict.folders`).

Storages are saved by these rules, in order: a storage with ``_checkpoint_state()`` /
``_load_checkpoint_state(state)`` methods (a hook for storages with their own layout); a
:class:`~rl_replay.TensorStorage` (its valid rows, restored into a fresh lazy storage by allocating
it from the checkpoint; a subclass whose internal layout differs from what ``get`` returns, such as
``CompactTensorStorage``, is saved as the items ``get`` returns and rebuilt with ``set``); a
:class:`~rl_replay.ListStorage` (tensors, TensorDicts, bytes and JSON-able objects: the compressed
blobs of ``CompressedListStorage`` are packed into one file); otherwise ``state_dict()``. Samplers and writers use the same hook names, else their
``state_dict()`` / ``load_state_dict()``.

Examples:
    >>> import tempfile, torch
    >>> from rl_replay import LazyTensorStorage, ReplayBuffer
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator().manual_seed(0))
    >>> _ = rb.extend(torch.arange(6.0))
    >>> path = tempfile.mkdtemp() + "/ckpt"
    >>> rb.dumps(path)
    >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator())
    >>> rb2.loads(path)
    >>> len(rb2), torch.equal(rb.sample(4), rb2.sample(4))
    (6, True)
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import torch
from tdict import TensorDict, is_tensor_collection
from tdict.folders import atomic_dir, committed_dir, reading_dir
from tdict.persistence import load_memmap, save
from torch.utils._pytree import treespec_dumps

from ._checkpoint_io import (
    _BYTES,
    _CKPT_MARKER,
    _PART_FORMAT,
    _PART_MARKER,
    FORMAT,
    VERSION,
    CheckpointError,
    _check_format,
    _decode,
    _encode,
    _read_json,
    _write_json,
)
from ._checkpoint_staging import stage_buffer_state, stage_part, structure

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "dump_buffer",
    "dump_part",
    "dump_state",
    "load_buffer",
    "load_part",
    "load_state",
]


# ============================================================================================ #
# the checkpoint folder (swapped in and found by tdict.folders, with checkpoint wording)
# ============================================================================================ #
def _swap(path: Any, marker: str, write: Any, fsync: bool) -> None:
    try:
        atomic_dir(path, write, marker=marker, fsync=fsync)
    except (FileExistsError, NotADirectoryError) as err:
        raise type(err)(f"{os.fspath(path)!r} exists and is not a checkpoint; refusing to replace it.") from err


def _committed(path: Any, marker: str) -> str:
    try:
        return committed_dir(path, marker)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise CheckpointError(f"no checkpoint at {os.fspath(path)!r}: {err}") from err


# ============================================================================================ #
# states and parts
# ============================================================================================ #
def _write_state(directory: str, state: Any, meta: dict, marker: str, fsync: bool, where: str) -> None:
    tensors: dict = {}
    encoded = _encode(state, tensors, where)  # raises on non-checkpointable objects before writing
    blobs = tensors.pop(_BYTES, None)
    if blobs:
        sizes = torch.tensor([0] + [len(b) for b in blobs], dtype=torch.int64)
        tensors["_bytes_offsets"] = sizes.cumsum(0)
        tensors["_bytes_blob"] = (
            torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8)
            if sizes.sum()
            else torch.zeros(0, dtype=torch.uint8)
        )
    if tensors:
        save(TensorDict(tensors, batch_size=[]), os.path.join(directory, "tensors"), copy_existing=True, fsync=fsync)
    _write_json(os.path.join(directory, marker), {**meta, "tensors": bool(tensors), "state": encoded}, fsync)


def _read_state(directory: str, marker: str, fmt: str, where: str) -> tuple[dict, Any]:
    meta = _read_json(os.path.join(directory, marker), where)
    _check_format(meta, fmt, os.path.join(directory, marker))
    tensors = None
    if meta.get("tensors"):
        try:
            tensors = load_memmap(os.path.join(directory, "tensors"))
        except Exception as err:  # noqa: BLE001 - MemmapLoadError, or whatever else a damaged file makes tdict raise
            raise CheckpointError(
                f"{where}: the tensor files under {directory!r} are missing or corrupt: {err}"
            ) from err
    if "state" not in meta:
        raise CheckpointError(f"{where}: {marker} has no 'state' entry; the checkpoint is corrupt.")
    if tensors is None:
        tensors = TensorDict({}, batch_size=[])
    return meta, _decode(meta["state"], tensors, where)


def dump_state(state: Any, path: Any, *, fsync: bool = False) -> None:
    """Writes a state tree (dicts, lists, tuples, JSON scalars, tensors, TensorDicts) to the
    directory ``path``, crash-safely. Read it back with :func:`load_state`."""
    _swap(path, _PART_MARKER, lambda d: _write_state(d, state, _part_meta(None), _PART_MARKER, fsync, "state"), fsync)


def load_state(path: Any) -> Any:
    """Reads a state tree written by :func:`dump_state` or :func:`dump_part` (no unpickling)."""
    with reading_dir(path):  # a concurrent dump cannot swap the directory while it is read
        return _read_state(_committed(path, _PART_MARKER), _PART_MARKER, _PART_FORMAT, f"state at {os.fspath(path)!r}")[
            1
        ]


def _part_meta(part: Any, token: str | None = None) -> dict:
    meta = {"format": _PART_FORMAT, "version": VERSION, "class": None if part is None else type(part).__name__}
    if token is not None:
        meta["token"] = token
    return meta


# ------------------------------------------------------------------------------- storages
def _storage_state(storage: Any) -> dict:
    """The storage's checkpoint state, its items passed through the storage's save hooks."""
    state = _raw_storage_state(storage)
    hooks = getattr(storage, "_save_hooks", None)
    if hooks and state["kind"] in ("tensor", "items") and state.get("items") is not None:
        state = {**state, "items": _save_hooked(storage, state["items"])}
    return state


def _save_hooked(storage: Any, items: Any) -> Any:
    """``items`` passed through the storage's save hooks (told the write position and fullness first)."""
    last = storage._last_cursor_index
    shift, is_full = (0 if last is None else last + 1), len(storage) >= storage.max_size
    for hook in getattr(storage, "_save_hooks", ()):
        if hasattr(hook, "shift"):
            hook.shift = shift
        if hasattr(hook, "is_full"):
            hook.is_full = is_full
        items = hook(items)
    return items


def _raw_storage_state(storage: Any) -> dict:
    from .storages.list import ListStorage
    from .storages.tensor import TensorStorage

    hook = getattr(storage, "_checkpoint_state", None)
    if hook is not None:
        return {"kind": "hook", "max_size": storage.max_size, "data": hook()}
    if isinstance(storage, TensorStorage):
        rows = int(storage._len_t)
        data = storage._storage
        if data is None or rows == 0:
            return {"kind": "tensor", "max_size": storage.max_size, "ndim": storage.ndim, "rows": 0, "items": None}
        if storage._tree_spec is None and structure(storage.get(torch.arange(1))) != structure(data):
            # the storage keeps another layout than the items it returns (e.g. CompactTensorStorage):
            # save the items themselves and write them back with set() on load
            items = storage.get(torch.arange(rows))
            return {"kind": "items", "max_size": storage.max_size, "ndim": storage.ndim, "rows": rows, "items": items}
        return {
            "kind": "tensor",
            "max_size": storage.max_size,
            "ndim": storage.ndim,
            "rows": rows,
            "items": data[:rows],
            # pytree items: their structure, as torch's JSON tree spec (stored leaves are entries "0", "1", ...)
            "tree": None if storage._tree_spec is None else treespec_dumps(storage._tree_spec),
        }
    if isinstance(storage, ListStorage):
        items = _save_hooked(storage, list(storage._items))
        if not isinstance(items, list) or len(items) != len(storage):
            raise TypeError(
                f"ListStorage save hooks must return a list of {len(storage)} items, got {type(items).__name__}."
            )
        return {"kind": "list", "max_size": storage.max_size, "len": len(storage), "items": _list_items(items)}
    return {"kind": "state_dict", "max_size": storage.max_size, "data": storage.state_dict()}


def _list_items(items: list) -> Any:
    """ListStorage items; one stacked tensor / TensorDict when they all share a structure (few files)."""
    if items and all(type(x) is torch.Tensor for x in items):
        first = items[0]
        if all(x.shape == first.shape and x.dtype == first.dtype and x.device == first.device for x in items):
            return {"stacked": "tensor", "data": torch.stack(items)}
    if items and all(is_tensor_collection(x) and type(x) is TensorDict for x in items):
        try:
            return {"stacked": "tensordict", "data": torch.stack(items)}
        except (RuntimeError, ValueError, TypeError):
            pass
    for i, item in enumerate(items):  # check each item here for an error that names its index
        try:
            _encode(item, {}, f"ListStorage item {i}")
        except TypeError as err:
            raise TypeError(f"ListStorage item {i} cannot be checkpointed: {err}") from None
    return {"stacked": None, "data": list(items)}


# ------------------------------------------------------------------------------- samplers, writers
def _component_state(part: Any) -> Any:
    hook = getattr(part, "_checkpoint_state", None)
    return {"kind": "hook", "data": hook()} if hook is not None else {"kind": "state_dict", "data": part.state_dict()}


def _part_state(part: Any, role: str) -> dict:
    return _storage_state(part) if role == "storage" else _component_state(part)


def _role(part: Any) -> str:
    from .samplers.base import Sampler
    from .storages.base import Storage
    from .writers import Writer

    for cls, role in ((Storage, "storage"), (Sampler, "sampler"), (Writer, "writer")):
        if isinstance(part, cls):
            return role
    raise TypeError(f"dump_part/load_part take a Storage, Sampler or Writer, got {type(part).__name__}.")


def dump_part(part: Any, path: Any, *, fsync: bool = False) -> None:
    """Writes one storage, sampler or writer to the directory ``path`` (crash-safe).

    The ``dumps(path)`` of storages, samplers and writers: the part's items / ``state_dict()``
    become JSON plus raw tensor files.
    """
    role = _role(part)
    state = _part_state(part, role)
    meta = {**_part_meta(part), "role": role}
    _swap(
        path,
        _PART_MARKER,
        lambda d: _write_state(d, state, meta, _PART_MARKER, fsync, f"{role} {type(part).__name__}"),
        fsync,
    )


def load_part(part: Any, path: Any) -> None:
    """Restores a storage, sampler or writer from a directory written by :func:`dump_part`
    (or the matching part of a buffer checkpoint). Validates everything before changing ``part``."""
    role = _role(part)
    with reading_dir(path):  # a concurrent dump cannot swap the directory while it is read
        directory = _committed(path, _PART_MARKER)
        where = f"{role} checkpoint {directory!r}"
        meta, state = _read_state(directory, _PART_MARKER, _PART_FORMAT, where)
    _check_class(meta, part, where)
    stage_part(part, role, state, where)()


def _check_class(meta: dict, part: Any, where: str) -> None:
    if meta.get("class") != type(part).__name__:
        raise CheckpointError(
            f"{where}: written by a {meta.get('class')}, cannot be loaded into a {type(part).__name__}."
        )


# ============================================================================================ #
# whole buffers
# ============================================================================================ #
_ROLES = ("storage", "sampler", "writer")


def _transforms_state(buffer: Any) -> list:
    out = []
    for t in getattr(buffer, "_transforms", []):
        sd = getattr(t, "state_dict", None)
        out.append(None if sd is None or not callable(getattr(t, "load_state_dict", None)) else dict(sd()))
    return out


def dump_buffer(buffer: Any, path: Any, *, fsync: bool = False) -> None:
    """Writes a crash-safe checkpoint of ``buffer`` (items, sampler, writer, RNG, batch size,
    transform states) to the directory ``path``. Called by ``ReplayBuffer.dumps`` under its lock.

    The buffer's ``torch.Generator`` state is saved (restoring it gives the exact same next
    samples); a buffer without a generator samples from torch's global RNG, which is neither
    saved nor restored (restoring a process-wide RNG behind the caller's back would be a surprise).

    Args:
        buffer: the replay buffer.
        path: the checkpoint directory (replaced atomically if it exists).
        fsync: also survive an OS crash / power loss (a killed process is covered either way).
    """
    token = secrets.token_hex(8)
    parts = {
        "storage": _part_state(buffer._storage, "storage"),
        "sampler": _part_state(buffer._sampler, "sampler"),
        "writer": _part_state(buffer._writer, "writer"),
    }
    rng = getattr(buffer, "_rng", None)
    extra = {
        "rng": None if rng is None else {"state": rng.get_state(), "device": str(rng.device)},
        "transforms": _transforms_state(buffer),
        "dict_items": bool(getattr(buffer, "_dict_items", False)),
    }
    objs = {"storage": buffer._storage, "sampler": buffer._sampler, "writer": buffer._writer}
    # encode every part first so that a non-checkpointable object raises before anything is written
    for role, state in (*parts.items(), ("buffer", extra)):
        _encode(state, {}, f"{role} state")
    head = {
        "format": FORMAT,
        "version": VERSION,
        "token": token,
        "buffer": type(buffer).__name__,
        "batch_size": getattr(buffer, "_batch_size", None),
        "parts": {r: type(o).__name__ for r, o in objs.items()},
        "length": len(buffer._storage),
    }

    def write(directory: str) -> None:
        for role in _ROLES:
            d = os.path.join(directory, role)
            os.mkdir(d)
            meta = {**_part_meta(objs[role], token), "role": role}
            _write_state(d, parts[role], meta, _PART_MARKER, fsync, f"{role} {type(objs[role]).__name__}")
        d = os.path.join(directory, "buffer")
        os.mkdir(d)
        _write_state(d, extra, {**_part_meta(buffer, token), "role": "buffer"}, _PART_MARKER, fsync, "buffer state")
        _write_json(os.path.join(directory, _CKPT_MARKER), head, fsync)  # the checkpoint is complete

    _swap(path, _CKPT_MARKER, write, fsync)


def _read_buffer(directory: str) -> tuple[dict, dict, dict]:
    head = _read_json(os.path.join(directory, _CKPT_MARKER), "checkpoint")
    _check_format(head, FORMAT, os.path.join(directory, _CKPT_MARKER))
    token = head.get("token")
    states, metas = {}, {}
    for role in (*_ROLES, "buffer"):
        where = f"checkpoint {directory!r}, {role}"
        meta, state = _read_state(os.path.join(directory, role), _PART_MARKER, _PART_FORMAT, where)
        if meta.get("token") != token:
            raise CheckpointError(
                f"{where}: belongs to another checkpoint (token {meta.get('token')!r}, expected {token!r})."
            )
        states[role], metas[role] = state, meta
    return head, metas, states


def load_buffer(buffer: Any, path: Any) -> None:
    """Restores ``buffer`` from a checkpoint written by :func:`dump_buffer` (called by
    ``ReplayBuffer.loads`` under its lock). Reads and validates every part before changing the
    buffer; a buffer built with the same configuration (its lazy storage not yet allocated) is
    allocated from the checkpoint. The checkpoint's ``batch_size`` and generator state are restored
    (a buffer without a generator gets one, as in TorchRL). Never unpickles.

    Raises:
        CheckpointError: no checkpoint at ``path``, a missing/truncated/corrupt file, another
            format or version, or parts (classes, capacity, item structure) that do not fit ``buffer``;
            the buffer is unchanged then.
    """
    with reading_dir(path):  # a concurrent dump cannot swap the directory while it is read
        directory = _committed(path, _CKPT_MARKER)
        head, metas, states = _read_buffer(directory)
    objs = {"storage": buffer._storage, "sampler": buffer._sampler, "writer": buffer._writer}
    appliers = []
    for role in _ROLES:
        where = f"checkpoint {directory!r}, {role}"
        _check_class(metas[role], objs[role], where)
        appliers.append(stage_part(objs[role], role, states[role], where))
    appliers.append(stage_buffer_state(buffer, states["buffer"], head, f"checkpoint {directory!r}, buffer"))
    for apply in appliers:  # every part was checked: from here on nothing is corrupt
        apply()
