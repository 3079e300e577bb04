"""CompressedListStorage: a list storage whose tensors are kept compressed (zlib by default)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import torch
from tdict import TensorDict, is_tensor_collection

from .._bytes import tensor_bytes
from .list import ListStorage, _positions

__all__ = ["CompressedListStorage"]

_CPU = torch.device("cpu")

# An item is stored as one of
#   ("t", (dtype, shape), blob)                 a tensor
#   ("d", schema, blobs)                        a TensorDict: blobs[i] is the i-th leaf, compressed
#   ("o", value)                                anything else, kept as it is (never pickled)
# A TensorDict schema is ("td", batch_size, ((key, child), ...)) with child a schema, a tensor
# leaf ("leaf", dtype, shape) or a non-tensor value ("obj", value). Items written by one call
# share one schema object, so a batch read checks "same structure" with an identity test.


def _leaf_rows(x: torch.Tensor, n: int) -> list:
    """The raw bytes of each of the ``n`` items of ``x`` (a [n, ...] tensor)."""
    raw = tensor_bytes(x)
    size = len(raw) // n if n else 0
    return [raw[i * size : (i + 1) * size] for i in range(n)]


def _schema_of(td: Any, leaves: list, item_dims: int) -> tuple:
    """The schema of ``td`` with ``item_dims`` leading (item) dims removed; appends its leaves."""
    children = []
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            children.append((key, ("leaf", value.dtype, tuple(value.shape[item_dims:]))))
            leaves.append(value)
        elif getattr(value, "_is_non_tensor", False):
            children.append((key, ("obj", value.tolist() if item_dims else value.data)))
        else:
            children.append((key, _schema_of(value, leaves, item_dims)))
    return ("td", tuple(td.batch_size[item_dims:]), tuple(children))


def _build(schema: tuple, columns: list, lead: tuple, pos: list) -> Any:
    """Rebuilds a TensorDict of ``schema`` whose leaves come from ``columns`` (in order)."""
    _, batch_size, children = schema
    out = TensorDict({}, batch_size=lead + batch_size)
    for key, child in children:
        kind = child[0]
        if kind == "leaf":
            out.set(key, columns[pos[0]])
            pos[0] += 1
        elif kind == "td":
            out.set(key, _build(child, columns, lead, pos))
        else:
            out.set_non_tensor(key, child[1])
    return out


class CompressedListStorage(ListStorage):
    """Keeps each item compressed in memory and decompresses it on read (names follow TorchRL 0.14).

    Tensors are stored as their raw bytes compressed (zlib from the standard library, at
    ``compression_level``) next to their dtype and shape; TensorDicts leaf by leaf (nested ones
    too), keeping their structure and batch size. Nothing is pickled: other objects are kept as
    they are. Useful for large, redundant observations such as image frames.

    ``ReplayBuffer.dumps`` saves the items still compressed (one uint8 tensor plus JSON schemas).

    Reading several items decompresses straight into stacked tensors when they share one
    structure (what a replay buffer samples), so ``ReplayBuffer(storage=CompressedListStorage(n))``
    returns a stacked batch; items of differing structures come back as a list.

    Args:
        max_size: the capacity in items.
        compression_level: zlib's level, 0 (none) to 9 (smallest); 3 by default.
        device: where read items are returned.
        compression_fn: ``fn(tensor) -> compressed`` (bytes, a uint8 tensor, anything
            ``decompression_fn`` reads), called on each item's tensor (each leaf of a TensorDict).
        decompression_fn: ``fn(compressed, metadata) -> tensor`` where ``metadata`` holds the
            original ``"dtype"`` and ``"shape"``. Give both functions or neither.
        collate_fn: combines a list of read items when several are read; by default items of one
            structure are stacked (decompressed into the stacked tensors), others returned as a list.
        compilable: as :class:`~rl_replay.ListStorage` (default ``False``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import ReplayBuffer
        >>> storage = CompressedListStorage(100)
        >>> rb = ReplayBuffer(storage=storage, batch_size=4)
        >>> _ = rb.extend(TensorDict(pixels=torch.zeros(10, 3, 32, 32, dtype=torch.uint8), batch_size=[10]))
        >>> rb.sample()["pixels"].shape, storage.bytes() < 10 * 3 * 32 * 32
        (torch.Size([4, 3, 32, 32]), True)
    """

    def __init__(
        self,
        max_size: int,
        *,
        compression_level: int = 3,
        device: Any = "cpu",
        compression_fn: Callable | None = None,
        decompression_fn: Callable | None = None,
        collate_fn: Callable | None = None,
        compilable: bool = False,
    ) -> None:
        super().__init__(max_size, compilable=compilable)
        if (compression_fn is None) != (decompression_fn is None):
            raise ValueError("CompressedListStorage: give both compression_fn and decompression_fn, or neither.")
        if compression_fn is None and (
            not isinstance(compression_level, int)
            or isinstance(compression_level, bool)
            or not -1 <= compression_level <= 9
        ):
            raise ValueError(
                f"CompressedListStorage: compression_level must be an int in [-1, 9] (zlib), got {compression_level!r}."
            )
        self.compression_level = compression_level
        self.compression_fn = compression_fn
        self.decompression_fn = decompression_fn
        self.collate_fn = collate_fn
        self.device = torch.device(device)
        self._to_device = None if self.device.type == "cpu" else self.device

    # ------------------------------------------------------------------ encoding
    def _compress_rows(self, x: torch.Tensor, n: int) -> list:
        """Compresses each of the ``n`` items of ``x`` (shape [n, ...])."""
        fn = self.compression_fn
        if fn is None:
            level = self.compression_level
            rows = _leaf_rows(x, n)
            return [zlib.compress(row, level) for row in rows]
        return [fn(x[i]) for i in range(n)]

    def _decompress_many(self, blobs: list, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        """Decompresses items of one dtype and shape into one stacked [len(blobs), *shape] tensor."""
        n = len(blobs)
        fn = self.decompression_fn
        if fn is not None:
            meta = {"dtype": dtype, "shape": torch.Size(shape)}
            parts = [fn(b, meta) for b in blobs]
            return (
                torch.stack([p.to(_CPU).reshape(shape).to(dtype) for p in parts])
                if n
                else torch.empty((0, *shape), dtype=dtype)
            )
        raw = bytearray().join([zlib.decompress(b) for b in blobs])
        if not raw:
            return torch.empty((n, *shape), dtype=dtype)
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(n, *shape)

    def _encode_batch(self, data: Any, n: int) -> list:
        """``n`` stored items from a tensor or TensorDict batched along dim 0."""
        if isinstance(data, torch.Tensor):
            meta = (data.dtype, tuple(data.shape[1:]))
            return [("t", meta, blob) for blob in self._compress_rows(data, n)]
        leaves: list = []
        schema = _schema_of(data, leaves, 1)
        if _has_objects(schema):  # non-tensor entries differ per item: one schema per item
            return [self._encode_one(data[i]) for i in range(n)]
        columns = [self._compress_rows(leaf, n) for leaf in leaves]
        return [("d", schema, tuple(col[i] for col in columns)) for i in range(n)]

    def _encode_one(self, item: Any) -> tuple:
        if isinstance(item, torch.Tensor):
            return self._encode_batch(item.unsqueeze(0), 1)[0]
        if is_tensor_collection(item):
            leaves: list = []
            schema = _schema_of(item, leaves, 0)
            return ("d", schema, tuple(self._compress_rows(leaf.unsqueeze(0), 1)[0] for leaf in leaves))
        return ("o", item)

    # ------------------------------------------------------------------ decoding
    def _decode_same(self, items: list) -> Any:
        """Items sharing one tensor meta or TensorDict schema, decoded and stacked."""
        first = items[0]
        if first[0] == "t":
            dtype, shape = first[1]
            return self._decompress_many([it[2] for it in items], dtype, shape)
        schema = first[1]
        leaf_specs: list = []
        _leaf_specs(schema, leaf_specs)
        columns = [
            self._decompress_many([it[2][j] for it in items], dtype, shape)
            for j, (dtype, shape) in enumerate(leaf_specs)
        ]
        return _build(schema, columns, (len(items),), [0])

    def _decode_one(self, item: tuple) -> Any:
        if item[0] == "o":
            return item[1]
        return self._decode_same([item])[0]

    def _finish(self, out: Any) -> Any:
        if self._to_device is not None and (isinstance(out, torch.Tensor) or is_tensor_collection(out)):
            out = out.to(self._to_device)
        return out

    # ------------------------------------------------------------------ Storage API
    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        pos = _positions(index, self.max_size)
        if isinstance(pos, int):
            encoded: Any = self._encode_one(data)
        else:
            n = len(pos)
            if isinstance(data, torch.Tensor) or is_tensor_collection(data):
                if isinstance(data, torch.Tensor):
                    lead = data.shape[0] if data.ndim else None
                else:  # a tensor collection
                    lead = data.batch_size[0] if data.batch_dims else None
                if lead != n:
                    raise ValueError(
                        f"CompressedListStorage.set: {n} indices for data whose first dim is {lead} "
                        f"(shape {list(data.shape)})."
                    )
                for p in pos:
                    if not 0 <= p < self.max_size:
                        raise IndexError(f"CompressedListStorage.set: index {p} is outside [0, {self.max_size}).")
                encoded = self._encode_batch(data, n)
            else:
                if len(pos) != len(data):
                    raise ValueError(f"CompressedListStorage.set: {len(pos)} indices for {len(data)} items.")
                encoded = [self._encode_one(item) for item in data]
        # everything is compressed before the first slot is written: a failure leaves the storage as it was
        super().set(index if isinstance(pos, int) else pos, encoded)

    def get(self, index: Any) -> Any:
        stored = super().get(index)
        if not isinstance(stored, list):
            return self._finish(self._decode_one(stored))
        if self.collate_fn is not None:
            return self.collate_fn([self._finish(self._decode_one(item)) for item in stored])
        if stored and stored[0][0] != "o":
            first = stored[0]
            kind, meta = first[0], first[1]
            if all(it[0] == kind and (it[1] is meta or it[1] == meta) for it in stored):
                return self._finish(self._decode_same(stored))
        return [self._finish(self._decode_one(item)) for item in stored]

    def bytes(self) -> int:
        """The size of the compressed tensor data held, in bytes."""
        total = 0
        for item in self._items[: len(self)]:
            if item is None or item[0] == "o":
                continue
            for blob in (item[2],) if item[0] == "t" else item[2]:
                total += blob.numel() * blob.element_size() if isinstance(blob, torch.Tensor) else len(blob)
        return total

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict:
        """The compressed items as one uint8 tensor plus their schemas (for ``ReplayBuffer.dumps``).

        Nothing is decompressed: blobs are concatenated, schemas deduplicated; objects that are not
        tensors must be JSON-able (the checkpoint never pickles).
        """
        schemas: list = []
        by_id: dict = {}
        kinds, lengths, parts, objects = [], [], [], {}
        tensor_blobs = None
        for i, item in enumerate(self._items[: len(self)]):
            if item is None:
                kinds.append(-1)
                continue
            if item[0] == "o":
                kinds.append(-2)
                objects[str(i)] = item[1]
                continue
            meta = (item[0], item[1])
            sid = by_id.get(id(item[1]))
            if sid is None:
                sid = next((j for j, known in enumerate(schemas) if known == meta), None)
                if sid is None:
                    sid = len(schemas)
                    schemas.append(meta)
                by_id[id(item[1])] = sid
            kinds.append(sid)
            for blob in (item[2],) if item[0] == "t" else item[2]:
                is_tensor = isinstance(blob, torch.Tensor)
                if tensor_blobs is None:
                    tensor_blobs = is_tensor
                if (
                    is_tensor != tensor_blobs
                    or (is_tensor and blob.dtype != torch.uint8)
                    or not (is_tensor or isinstance(blob, (bytes, bytearray)))
                ):
                    raise TypeError(
                        "CompressedListStorage: only bytes or uint8-tensor outputs of compression_fn (all of one type) "
                        f"can be checkpointed, got {type(blob).__name__}."
                    )
                raw = tensor_bytes(blob) if is_tensor else bytes(blob)
                lengths.append(len(raw))
                parts.append(raw)
        joined = bytearray().join(parts)
        return {
            "len": len(self),
            "schemas": schemas,
            "kinds": torch.tensor(kinds, dtype=torch.int64),
            "lengths": torch.tensor(lengths, dtype=torch.int64),
            "blobs": torch.frombuffer(joined, dtype=torch.uint8).clone()
            if joined
            else torch.zeros(0, dtype=torch.uint8),
            "tensor_blobs": bool(tensor_blobs),
            "objects": objects,
        }

    def _load_checkpoint_state(self, state: dict) -> None:
        """Restores what :meth:`_checkpoint_state` saved (validated before anything changes)."""
        schemas = [tuple(m) for m in state["schemas"]]
        kinds = state["kinds"].tolist()
        lengths = state["lengths"].tolist()
        blob_bytes = tensor_bytes(state["blobs"])
        if len(kinds) != int(state["len"]) or len(kinds) > self.max_size:
            raise ValueError(
                f"CompressedListStorage checkpoint: {len(kinds)} items for a length of {state['len']} (capacity {self.max_size})."
            )
        if sum(lengths) != len(blob_bytes):
            raise ValueError(
                f"CompressedListStorage checkpoint: blob lengths add up to {sum(lengths)}, {len(blob_bytes)} bytes saved."
            )
        leaf_counts = []
        for meta in schemas:
            if meta[0] == "t":
                leaf_counts.append(1)
            else:
                specs: list = []
                _leaf_specs(meta[1], specs)
                leaf_counts.append(len(specs))
        as_tensor = bool(state.get("tensor_blobs", False))
        items: list = []
        offset, b = 0, 0
        for i, sid in enumerate(kinds):
            if sid == -1:
                items.append(None)
                continue
            if sid == -2:
                items.append(("o", state["objects"][str(i)]))
                continue
            if not 0 <= sid < len(schemas) or b + leaf_counts[sid] > len(lengths):
                raise ValueError(f"CompressedListStorage checkpoint: item {i} refers to a missing schema or blob.")
            blobs = []
            for _ in range(leaf_counts[sid]):
                raw = blob_bytes[offset : offset + lengths[b]]
                blobs.append(torch.frombuffer(bytearray(raw), dtype=torch.uint8) if as_tensor and raw else raw)
                offset += lengths[b]
                b += 1
            kind, meta = schemas[sid]
            items.append((kind, meta, blobs[0]) if kind == "t" else (kind, meta, tuple(blobs)))
        self._items = items
        self._len_t.fill_(len(items))

    def __repr__(self) -> str:
        return f"CompressedListStorage(max_size={self.max_size}, len={len(self)}, compression_level={self.compression_level})"


def _leaf_specs(schema: tuple, out: list) -> None:
    for _, child in schema[2]:
        if child[0] == "leaf":
            out.append((child[1], child[2]))
        elif child[0] == "td":
            _leaf_specs(child, out)


def _has_objects(schema: tuple) -> bool:
    return any(child[0] == "obj" or (child[0] == "td" and _has_objects(child)) for _, child in schema[2])
