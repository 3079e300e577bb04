"""HDF5 plumbing of :class:`tdict.PersistentTensorDict`: views over datasets, dtype and value codecs.

Private to :mod:`tdict.persistent`. Three pieces:

- :func:`require_h5py`: the one import of h5py (an optional dependency, ``rl-tdict[h5]``).
- :class:`Selection`: which elements of a dataset's leading (batch) dims a view covers. Basic
  indices (ints, positive-step slices) compose into another basic index, which h5py reads and
  writes directly. Anything else (index tensors, masks, lists, ``None``, negative steps) becomes
  the flat positions of the selected elements; reading one then reads the bounding box of those
  positions and gathers in memory, writing reads the box, scatters and writes the box back.
- codecs: tensors <-> numpy arrays (``bfloat16``, which numpy lacks, is stored as ``int16`` with
  a ``tdict_dtype`` attribute), and the non-tensor payloads h5py can hold (strings, numbers and
  numeric arrays, JSON-serialisable Python values).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

__all__ = [
    "INSTALL_HINT",
    "Selection",
    "decode",
    "encode",
    "encode_non_tensor",
    "is_non_tensor_dataset",
    "read_non_tensor",
    "require_h5py",
    "torch_dtype",
]

INSTALL_HINT = "PersistentTensorDict needs h5py: install it with `pip install rl-tdict[h5]`."
_DTYPE_ATTR = "tdict_dtype"  # set on datasets whose torch dtype numpy cannot represent
_JSON_ATTR = "tdict_json"  # set on string datasets that hold a JSON-encoded Python value


def require_h5py() -> Any:
    """The h5py module; ``ImportError`` naming the extra to install when it is missing."""
    try:
        import h5py
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return h5py


# --------------------------------------------------------------------------------------------- #
# dtype codecs
# --------------------------------------------------------------------------------------------- #


def torch_dtype(ds: Any) -> torch.dtype:
    """The torch dtype of the tensors read from dataset ``ds``."""
    if ds.attrs.get(_DTYPE_ATTR) == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.empty(0, dtype=ds.dtype)).dtype


def decode(array: Any, ds: Any) -> torch.Tensor:
    """A CPU tensor of what ``ds[...]`` returned (a numpy array or scalar)."""
    array = np.asarray(array)
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = array.copy()
    tensor = torch.from_numpy(array)
    if ds.attrs.get(_DTYPE_ATTR) == "bfloat16":
        tensor = tensor.view(torch.bfloat16)
    return tensor


def encode(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[np.ndarray, str | None]:
    """``(array, dtype tag)`` to store ``tensor`` (cast to ``dtype`` first when given)."""
    tensor = tensor.detach()
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    tensor = tensor.cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy(), "bfloat16"
    try:
        return tensor.numpy(), None
    except TypeError as err:  # float8 and friends
        raise TypeError(f"HDF5 datasets cannot hold tensors of dtype {tensor.dtype}.") from err


def tag_dataset(ds: Any, tag: str | None) -> None:
    if tag is not None:
        ds.attrs[_DTYPE_ATTR] = tag


# --------------------------------------------------------------------------------------------- #
# non-tensor payloads
# --------------------------------------------------------------------------------------------- #


def is_non_tensor_dataset(ds: Any) -> bool:
    """True for datasets holding a Python payload (strings, opaque numbers, JSON), not a tensor."""
    h5py = require_h5py()
    dt = ds.dtype
    return bool(
        dt.kind in "OSUV"
        or h5py.check_string_dtype(dt)
        or h5py.check_vlen_dtype(dt)
        or h5py.check_opaque_dtype(dt)
        or h5py.check_enum_dtype(dt)
    )


def encode_non_tensor(value: Any) -> tuple[Any, dict]:
    """``(data, create_dataset keywords)`` storing the Python value ``value``; ``TypeError`` if none fits.

    Strings are HDF5 strings (read back as ``bytes``, as h5py returns them); numbers and numeric
    numpy arrays are opaque numpy data (read back as numpy); other JSON-serialisable values are
    stored as JSON text (read back as the decoded value). Nothing is pickled.
    """
    h5py = require_h5py()
    if isinstance(value, str):
        return value, {"dtype": h5py.string_dtype()}
    if isinstance(value, bytes):
        return np.bytes_(value), {}
    if isinstance(value, (bool, int, float, complex, np.generic, np.ndarray)):
        array = np.asarray(value)
        if array.dtype.kind in "biufc":
            return array.astype(h5py.opaque_dtype(array.dtype)), {}
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"cannot store a {type(value).__name__} in an HDF5 file (strings, numbers, numeric arrays and "
            "JSON-serialisable values can be stored)."
        ) from err
    return text, {"dtype": h5py.string_dtype(), "json": True}


def read_non_tensor(ds: Any) -> Any:
    """The Python payload of a non-tensor dataset."""
    if ds.attrs.get(_JSON_ATTR):
        return json.loads(ds.asstr()[()])
    return ds[()]


def create_non_tensor(group: Any, name: str, value: Any) -> None:
    data, kwargs = encode_non_tensor(value)
    is_json = kwargs.pop("json", False)
    ds = group.create_dataset(name, data=data, **kwargs)
    if is_json:
        ds.attrs[_JSON_ATTR] = True


# --------------------------------------------------------------------------------------------- #
# selections
# --------------------------------------------------------------------------------------------- #


def _strides(shape: torch.Size) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


class Selection:
    """The elements of a batch of shape ``base`` that a view covers, with the view's shape.

    Either ``parts`` (one int or positive-step slice per base dim, an index h5py takes as it is)
    or ``pos`` (a long tensor, of the view's shape, of flat positions into ``base``).
    """

    __slots__ = ("base", "parts", "pos", "shape")

    def __init__(self, base: torch.Size, parts: tuple | None = None, pos: torch.Tensor | None = None) -> None:
        self.base = base
        self.parts = parts
        self.pos = pos
        if parts is not None:
            self.shape = torch.Size(len(range(p.start, p.stop, p.step)) for p in parts if isinstance(p, slice))
        else:
            assert pos is not None
            self.shape = pos.shape

    @classmethod
    def full(cls, base: torch.Size) -> "Selection":
        return cls(base, tuple(slice(0, n, 1) for n in base))

    def is_full(self) -> bool:
        return self.parts is not None and all(
            isinstance(p, slice) and p.start == 0 and p.stop == n and p.step == 1 for p, n in zip(self.parts, self.base)
        )

    # ---------------------------------------------------------------- composition
    def index(self, index: Any) -> "Selection":
        """The selection of ``view[index]`` (``index`` normalised over the view's dims)."""
        if self.parts is not None:
            composed = self._compose_basic(index)
            if composed is not None:
                return composed
        parts = index if isinstance(index, tuple) else (index,)
        parts = tuple(p.cpu() if isinstance(p, torch.Tensor) else p for p in parts)
        return Selection(self.base, pos=self.positions()[parts])

    def _compose_basic(self, index: Any) -> "Selection | None":
        """``view[index]`` as basic parts, or None when ``index`` is not a tuple of ints and slices."""
        assert self.parts is not None
        parts_in = index if isinstance(index, tuple) else (index,)
        if not all(type(p) is int or (isinstance(p, slice) and (p.step is None or p.step > 0)) for p in parts_in):
            return None
        view_dims = [d for d, p in enumerate(self.parts) if isinstance(p, slice)]
        if len(parts_in) > len(view_dims):
            raise IndexError(f"too many indices for a view of batch size {list(self.shape)}: {index!r}.")
        new = list(self.parts)
        for i, (p, d) in enumerate(zip(parts_in, view_dims)):
            s = self.parts[d]
            n = len(range(s.start, s.stop, s.step))
            if type(p) is int:
                if not -n <= p < n:
                    raise IndexError(f"index {p} is out of range for batch dim {i} of size {n}.")
                new[d] = s.start + (p % n) * s.step
            else:
                start, stop, step = p.indices(n)
                length = len(range(start, stop, step))
                first = s.start + start * s.step
                new_step = s.step * step
                new[d] = slice(first, first + (length - 1) * new_step + 1 if length else first, new_step)
        return Selection(self.base, tuple(new))

    def extend(self, extra: torch.Size) -> "Selection":
        """This selection over ``base + extra`` (the extra dims taken whole): a nested group's view."""
        if not extra:
            return self
        if self.parts is not None:
            return Selection(self.base + extra, self.parts + tuple(slice(0, n, 1) for n in extra))
        assert self.pos is not None
        inner = torch.arange(extra.numel()).view(extra)
        pos = self.pos.reshape(self.pos.shape + (1,) * len(extra)) * extra.numel() + inner
        return Selection(self.base + extra, pos=pos)

    def positions(self) -> torch.Tensor:
        """The flat positions into ``base`` of the selected elements, shaped like the view."""
        if self.pos is not None:
            return self.pos
        assert self.parts is not None
        pos = torch.zeros((), dtype=torch.long)
        for p, stride in zip(self.parts, _strides(self.base)):
            if isinstance(p, slice):
                pos = pos.unsqueeze(-1) + torch.arange(p.start, p.stop, p.step) * stride
            else:
                pos = pos + p * stride
        return pos

    # ---------------------------------------------------------------- I/O
    def _box(self) -> tuple[tuple, tuple]:
        """(block index, coordinates of the selected elements inside the block).

        The block is the bounding box of the selection, except along the first dim when the
        selected rows are sparse (a sampled batch): there it lists the rows, which h5py reads
        as one fancy index (it takes a sorted list of unique positions on one axis).
        """
        assert self.pos is not None
        coords, rest = [], self.pos
        for n in reversed(self.base):
            coords.append(rest % n)
            rest = rest // n
        coords.reverse()
        box, local = [], []
        for d, c in enumerate(coords):
            lo, hi = int(c.min()), int(c.max()) + 1
            if d == 0 and hi - lo > 2:
                rows, inverse = torch.unique(c, return_inverse=True)
                if 2 * rows.numel() < hi - lo:
                    box.append(rows.numpy())
                    local.append(inverse)
                    continue
            box.append(slice(lo, hi))
            local.append(c - lo)
        return tuple(box), tuple(local)

    def read(self, ds: Any) -> torch.Tensor:
        """The selected part of dataset ``ds``: a CPU tensor of shape ``self.shape + feature dims``."""
        if self.parts is not None:
            return decode(ds[()] if self.is_full() else ds[self.parts], ds)
        feature = tuple(ds.shape[len(self.base) :])
        if self.shape.numel() == 0:
            return torch.empty(tuple(self.shape) + feature, dtype=torch_dtype(ds))
        if not self.base:  # a 0-dim batch: every position is 0
            whole = decode(ds[()], ds)
            return whole.expand(self.shape + whole.shape).clone()
        box, coords = self._box()
        return decode(ds[box], ds)[coords]

    def write(self, ds: Any, value: torch.Tensor) -> None:
        """Write ``value`` (already broadcastable to the selected part) into dataset ``ds``."""
        feature = tuple(ds.shape[len(self.base) :])
        target = self.shape + feature
        if target.numel() == 0:
            return
        dtype = torch_dtype(ds)
        if value.shape != target:
            value = value.expand(target)
        if self.parts is not None:
            array, _ = encode(value, dtype)
            if self.is_full():
                ds[()] = array
            else:
                ds[self.parts] = array
            return
        if not self.base:
            array, _ = encode(value.reshape((-1,) + feature)[-1], dtype)
            ds[()] = array
            return
        box, coords = self._box()
        block = decode(ds[box], ds)
        block[coords] = value.to(device="cpu", dtype=block.dtype)
        ds[box] = encode(block)[0]
