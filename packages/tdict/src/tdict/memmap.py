"""Memory-mapped tensors: a ``torch.Tensor`` whose storage lives in a file (or shared memory).

``MemoryMappedTensor`` follows tensordict 0.14's class of the same name. Its storage is a file
mapped with ``torch.from_file(..., shared=True)`` so that writes go straight to the page cache and
every process that maps the same file sees them; without a filename the storage is anonymous
shared memory (``torch.UntypedStorage._new_shared``).

Behaviour under torch operations (``__torch_function__``):

* View and indexing ops (``t[...]``, ``view``, ``reshape``, ``permute``, ``split``, ``unbind``, ...,
  see ``_VIEW_FUNCS``) return a ``MemoryMappedTensor`` *when the result aliases the mapped storage*,
  carrying the same ``filename``; writes through such a view reach the file. Advanced indexing or a
  ``reshape`` that has to copy returns a plain tensor: the result no longer lives in the file.
* Every other op returns plain ``torch.Tensor`` results (``t + 1``, ``t.clone()``, ``torch.cat``,
  ...): the data lives in RAM and has nothing to do with the file. In-place ops (``t.add_(1)``,
  ``t.copy_(x)``) return ``t`` itself, as torch does.

The handler runs the op once with subclass dispatch disabled, so the cost per op is one Python
call plus a set lookup; there is no type conversion of outputs for non-view ops.

Pickling (``__reduce_ex__``):

* With a filename, only ``(filename, dtype, shape, stride, offset)`` is pickled and the receiver
  maps the same file, so a spawn subprocess writing into it is visible to the parent. This also
  applies to ``copy.copy``, and to ``torch.save`` (which then stores a reference to the file, not
  the data, and cannot be read back with ``weights_only=True``: save ``t.clone()`` for values).
* Anonymous tensors pickle their plain-tensor alias: ``multiprocessing`` (whose ``ForkingPickler``
  has torch's reducers) passes the shared-memory segment by handle, so writes are shared too; plain
  ``pickle`` copies the values, and the receiver moves them into a fresh shared-memory segment.

``copy.deepcopy`` returns a plain in-RAM tensor, like ``clone``.

Durability: data is written through the mapping; nothing is fsynced per op. Call
:meth:`MemoryMappedTensor.flush` to force the file's dirty pages to disk. Crash safety of a whole
memmapped container (metadata written last) is the container's job, not this module's.

Examples:
    >>> import tempfile, os, torch
    >>> from tdict.memmap import MemoryMappedTensor
    >>> path = os.path.join(tempfile.mkdtemp(), "x.memmap")
    >>> t = MemoryMappedTensor.from_tensor(torch.arange(6).view(2, 3), filename=path)
    >>> t[1, 0] = 10  # writes through to the file
    >>> MemoryMappedTensor.from_filename(path, dtype=torch.int64, shape=(2, 3))[1].tolist()
    [10, 4, 5]
"""

from __future__ import annotations

import ctypes
import errno
import operator
import os
from collections.abc import Sequence
from typing import Any, overload

import torch

from .errors import SymlinkError

__all__ = ["MemoryMappedTensor"]

PathLike = str | os.PathLike
DeviceLike = str | int | torch.device | None

_DisableSubclass = torch._C.DisableTorchFunctionSubclass


def _view_funcs() -> frozenset:
    """Ops whose result may alias their first argument (checked on the storage at run time)."""
    names = (
        "__getitem__",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "permute",
        "transpose",
        "swapaxes",
        "swapdims",
        "t",
        "movedim",
        "moveaxis",
        "narrow",
        "select",
        "expand",
        "expand_as",
        "as_strided",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "tensor_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "diagonal",
        "unfold",
        "detach",
        "view_as_real",
        "view_as_complex",
        "squeeze_",
        "unsqueeze_",
        "transpose_",
        "t_",
        "detach_",
        "as_strided_",
    )
    funcs = set()
    for name in names:
        for owner in (torch.Tensor, torch):
            f = getattr(owner, name, None)
            if f is not None:
                funcs.add(f)
    for prop in ("T", "mT", "H", "mH", "real", "imag", "data"):
        funcs.add(getattr(torch.Tensor, prop).__get__)
    return frozenset(funcs)


_VIEW_FUNCS = _view_funcs()


# --------------------------------------------------------------------------------------------- #
# argument checking
# --------------------------------------------------------------------------------------------- #


def _as_shape(args: tuple, name: str = "shape") -> torch.Size:
    """Accept ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])``, ``f(torch.Size([2, 3]))`` and ``f(())``."""
    if len(args) == 1 and not isinstance(args[0], int):
        args = args[0]
    if isinstance(args, int):
        args = (args,)
    if not isinstance(args, Sequence):
        raise TypeError(f"{name} must be ints or a sequence of ints, got {type(args).__name__}: {args!r}")
    dims = []
    for d in args:
        if isinstance(d, bool):
            raise TypeError(f"{name} must contain ints, got bool in {tuple(args)!r}")
        try:
            d = operator.index(d)
        except TypeError:
            raise TypeError(f"{name} must contain ints, got {type(d).__name__} in {tuple(args)!r}") from None
        if d < 0:
            raise ValueError(f"{name} must contain non-negative ints, got {tuple(args)!r}")
        dims.append(d)
    return torch.Size(dims)


_NO_SHAPE = object()


def _factory_shape(name: str, size: tuple, shape: Any) -> torch.Size:
    """The shape of a factory call: ``f(2, 3)``, ``f((2, 3))`` or ``f(shape=(2, 3))``, exactly one of them."""
    if shape is not _NO_SHAPE and shape is not None:
        if size:
            raise TypeError(
                f"{name}() got the shape twice: positionally {size!r} and as shape={shape!r}; pass one of them"
            )
        return _as_shape((shape,))
    if not size:
        raise TypeError(
            f"{name}() needs a shape: {name}(2, 3), {name}((2, 3)) or {name}(shape=(2, 3)); use () for a 0-dim tensor"
        )
    return _as_shape(size)


class _DeviceError(RuntimeError, ValueError):
    """A device other than the CPU (tensordict raises RuntimeError from the factories, ValueError from the class)."""


def _check_device(device: Any) -> None:
    """Memory-mapped tensors live in host memory: ``device`` may only be ``None`` or a CPU device."""
    if device is None:
        return
    if not isinstance(device, (str, int, torch.device)) or isinstance(device, bool):
        raise TypeError(
            f"device must be None, a str, an int or a torch.device, got {type(device).__name__}: {device!r}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise _DeviceError(f"device must be None or 'cpu', got {device!r}, which is not a device ({err})") from None
    if parsed.type != "cpu":
        raise _DeviceError(
            f"device must be None or 'cpu', got {device!r}: memory-mapped tensors live in host memory only; "
            "map on the CPU and move a copy with .to(device)"
        )


def _as_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__}: {dtype!r}")
    return dtype


def _as_path(filename: Any) -> str:
    try:
        path = os.fspath(filename)
    except TypeError:
        raise TypeError(f"filename must be a str or os.PathLike, got {type(filename).__name__}: {filename!r}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    # absolute so that a pickled tensor reopens the same file whatever the receiver's cwd is
    return os.path.abspath(path)


def _nbytes(shape: torch.Size, dtype: torch.dtype) -> int:
    return shape.numel() * dtype.itemsize


# --------------------------------------------------------------------------------------------- #
# storage helpers
# --------------------------------------------------------------------------------------------- #


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw row-major bytes of a CPU tensor (copied only if it is not contiguous, or without numpy)."""
    flat = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
    try:
        return memoryview(flat.numpy())  # pyright: ignore[reportArgumentType]  (numpy's stubs declare the buffer protocol for 3.12+ only)
    except (ImportError, RuntimeError):  # numpy is optional: copy the memory out instead
        return memoryview(ctypes.string_at(flat.data_ptr(), flat.numel()) if flat.numel() else b"")


def _map_file(path: str, nbytes: int, shared: bool = True) -> torch.UntypedStorage:
    """Map the first ``nbytes`` of ``path`` shared (MAP_SHARED; MAP_PRIVATE if not ``shared``);
    the file must be that large."""
    # torch.from_file cannot map 0 bytes; callers handle the empty case without a mapping.
    return torch.from_file(path, shared=shared, size=nbytes, dtype=torch.uint8).untyped_storage()


def _on_storage(storage: torch.UntypedStorage, dtype, shape, stride=None, offset=0) -> torch.Tensor:
    t = torch.empty(0, dtype=dtype)
    if stride is None:
        t.set_(storage, offset, shape)  # pyright: ignore[reportCallIssue]  (torch's stubs require a stride here)
    else:
        t.set_(storage, offset, shape, stride)
    return t


_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class _FileExistsError(FileExistsError, RuntimeError):
    """The target file exists (tensordict raises RuntimeError here, hence both bases)."""


def _symlink_error(path: str) -> FileExistsError:
    return SymlinkError(
        f"filename {path!r} is a symbolic link (to {os.readlink(path)!r}); refusing to write a memory-mapped "
        "tensor through symlink: remove it or pass another filename"
    )


def _prepare_file(path: str, nbytes: int, existsok: bool, data: memoryview | None = None) -> bool:
    """Create (or resize) ``path`` to ``nbytes`` and write ``data`` into it (plain writes are
    several times faster than page-faulting through a fresh mapping); return True when the
    content is all zeros."""
    # O_NOFOLLOW: a symlink at ``path`` is refused, never written through (its target may be any file)
    flags = os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | (0 if existsok else os.O_EXCL)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    if not _O_NOFOLLOW and os.path.islink(path):  # pragma: no cover - platforms without O_NOFOLLOW
        raise _symlink_error(path)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise _FileExistsError(
            f"filename {path!r} already exists; pass existsok=True to reuse (overwrite) it"
        ) from None
    except OSError as err:
        if err.errno == errno.ELOOP and os.path.islink(path):
            raise _symlink_error(path) from None
        raise
    try:
        size = os.fstat(fd).st_size
        if size != nbytes:
            # Shrinking a file somebody else maps would make their accesses fault, but a reused
            # file of the wrong size cannot hold this tensor either; torch.from_file only grows.
            os.ftruncate(fd, nbytes)
        if data is not None:
            written = 0
            while written < nbytes:
                written += os.pwrite(fd, data[written:], written)
        return size == 0 and data is None
    finally:
        os.close(fd)


def _new_storage_tensor(
    shape: torch.Size, dtype: torch.dtype, filename, existsok: bool, data: memoryview | None = None
):
    """Allocate (a file gets ``data`` written if given); return ``(plain tensor, path or None, content_is_zero)``."""
    nbytes = _nbytes(shape, dtype)
    if filename is None:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype).share_memory_(), None, True
        return _on_storage(torch.UntypedStorage._new_shared(nbytes), dtype, shape), None, False
    path = _as_path(filename)
    zero = _prepare_file(path, nbytes, existsok, data)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype), path, True
    return _on_storage(_map_file(path, nbytes), dtype, shape), path, zero


# --------------------------------------------------------------------------------------------- #
# pickling
# --------------------------------------------------------------------------------------------- #


def _rebuild_from_file(path, dtype, nbytes, shape, stride, offset) -> MemoryMappedTensor:
    try:
        found = os.path.getsize(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"cannot unpickle MemoryMappedTensor: its file {path!r} does not exist any more"
        ) from None
    if found < nbytes:
        raise ValueError(
            f"cannot unpickle MemoryMappedTensor from {path!r}: expected at least {nbytes} bytes, found {found}"
        )
    storage = _map_file(path, nbytes) if nbytes else torch.UntypedStorage(0)
    return MemoryMappedTensor._wrap(_on_storage(storage, dtype, shape, stride, offset), path)


def _rebuild_anonymous(tensor: torch.Tensor) -> MemoryMappedTensor:
    if not tensor.is_shared():  # arrived by value through plain pickle
        tensor.share_memory_()
    return MemoryMappedTensor._wrap(tensor, None)


# --------------------------------------------------------------------------------------------- #
# the class
# --------------------------------------------------------------------------------------------- #


class MemoryMappedTensor(torch.Tensor):
    """A CPU tensor whose storage is a memory-mapped file, or anonymous shared memory.

    Build one with the classmethods (:meth:`from_tensor`, :meth:`empty`, :meth:`zeros`,
    :meth:`ones`, :meth:`full`, the ``*_like`` variants, :meth:`from_filename`,
    :meth:`from_storage`); calling the class dispatches to them: ``MemoryMappedTensor(tensor,
    filename=...)``, ``MemoryMappedTensor(path, dtype=..., shape=...)`` or
    ``MemoryMappedTensor(storage, dtype=..., shape=...)``.

    Views (indexing, ``view``, ``permute``, ...) stay ``MemoryMappedTensor`` and write through to
    the file; every other op returns a plain ``torch.Tensor``. Pickling a file-backed tensor
    pickles the filename, not the data.

    Examples:
        >>> import tempfile, os, torch
        >>> path = os.path.join(tempfile.mkdtemp(), "obs.memmap")
        >>> t = MemoryMappedTensor.zeros(4, 3, dtype=torch.float32, filename=path)
        >>> t[0] = 1.0
        >>> type(t[0]).__name__, type(t + 1).__name__
        ('MemoryMappedTensor', 'Tensor')
        >>> t.filename == path
        True
    """

    _filename: str | None = None

    @overload
    def __new__(
        cls,
        source: Any,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor: ...

    @overload
    def __new__(
        cls,
        source: Any,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: Any,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> torch.Tensor: ...

    def __new__(
        cls,
        source: Any,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: Any = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> torch.Tensor:  # a MemoryMappedTensor, unless ``index`` copies (advanced indexing)
        _check_device(device)  # the CPU only; anything else raises (a ValueError, as in tensordict)
        if isinstance(source, (str, os.PathLike)):
            if filename is not None:
                raise TypeError(f"MemoryMappedTensor(filename, ...) got a second filename={filename!r}")
            if dtype is None or shape is None:
                raise TypeError(
                    f"MemoryMappedTensor(filename, ...) needs dtype= and shape=, got dtype={dtype!r}, shape={shape!r}"
                )
            return cls.from_filename(source, dtype, shape, index)
        if isinstance(source, (torch.UntypedStorage, torch.TypedStorage)):
            return cls.from_storage(source, dtype=dtype, shape=shape, index=index, filename=filename)
        if isinstance(source, (list, tuple)):  # data, as torch.Tensor([...]) reads it: default dtype
            source = torch.tensor(source, dtype=dtype or torch.get_default_dtype())
        elif isinstance(source, torch.Tensor) and dtype is not None and dtype != source.dtype:
            raise TypeError(
                f"MemoryMappedTensor(tensor, dtype=...) does not convert: got dtype={dtype} for a {source.dtype} "
                "tensor; pass tensor.to(dtype)"
            )
        out = cls.from_tensor(source, filename=filename, existsok=existsok, shape=shape)
        return out if index is None else out[index]

    def __init__(self, source: Any, **kwargs: Any) -> None:
        """Nothing to do: ``__new__`` built the tensor (torch.Tensor's own ``__init__`` takes no keywords)."""

    @classmethod
    def _wrap(cls, tensor: torch.Tensor, filename: str | None) -> MemoryMappedTensor:
        out = tensor.as_subclass(cls)
        out._filename = filename
        return out

    # ------------------------------------------------------------------ properties / helpers

    @property
    def filename(self) -> str | None:
        """Absolute path of the backing file, or ``None`` for anonymous shared memory."""
        return self._filename

    def flush(self) -> None:
        """Write the file's dirty pages to disk (``fsync``); a no-op for anonymous tensors."""
        path = self._filename
        if path is None:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def as_tensor(self) -> torch.Tensor:
        """A plain ``torch.Tensor`` viewing the same memory (writes through it still reach the file).

        Examples:
            >>> t = MemoryMappedTensor.zeros(3)
            >>> type(t.as_tensor()).__name__, t.as_tensor().data_ptr() == t.data_ptr()
            ('Tensor', True)
        """
        return self.as_subclass(torch.Tensor)

    # ------------------------------------------------------------------ torch integration

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        with _DisableSubclass():
            out = func(*args, **kwargs)
            if func in _VIEW_FUNCS:
                src = args[0] if args else kwargs.get("input", kwargs.get("self"))
                if isinstance(src, MemoryMappedTensor):
                    out = _rewrap_aliases(out, src)
        return out

    def __reduce_ex__(self, protocol):
        with _DisableSubclass():
            if self._filename is not None:
                return _rebuild_from_file, (
                    self._filename,
                    self.dtype,
                    self.untyped_storage().nbytes(),
                    tuple(self.shape),
                    self.stride(),
                    self.storage_offset(),
                )
            plain = self.as_subclass(torch.Tensor)
        return _rebuild_anonymous, (plain,)

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __deepcopy__(self, memo):
        out = self.clone()  # plain tensor in RAM, like clone()
        memo[id(self)] = out
        return out

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_tensor(
        cls,
        input: torch.Tensor,
        *,
        filename: PathLike | None = None,
        existsok: bool = False,
        copy_existing: bool = False,
        copy_data: bool = True,
        shape: int | Sequence[int] | None = None,
    ) -> MemoryMappedTensor:
        """Copy ``input`` into a new memory-mapped tensor of the same shape and dtype.

        Args:
            input: the tensor to copy (any device, any strides; a numpy array is accepted too).
            filename: file to create; ``None`` allocates anonymous shared memory.
            existsok: reuse (and overwrite) ``filename`` if it exists instead of raising
                ``FileExistsError``.
            copy_existing: when ``input`` is already a ``MemoryMappedTensor`` backed by another
                file, copy it to ``filename`` (otherwise that raises ``RuntimeError``).
            copy_data: ``False`` only allocates (a new file then reads as zeros).
            shape: the shape of the result, if not ``input``'s; ``input`` is broadcast to it.

        If ``input`` is a ``MemoryMappedTensor`` already at ``filename`` (or anonymous and
        ``filename`` is ``None``) it is returned unchanged.

        Examples:
            >>> t = MemoryMappedTensor.from_tensor(torch.ones(2, 2))
            >>> t.filename is None, t.sum().item()
            (True, 4.0)
        """
        if not isinstance(input, torch.Tensor):
            if type(input).__module__ == "numpy":
                input = torch.as_tensor(input)
            else:
                raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}: {input!r}")
        if shape is not None:
            shape = _as_shape((shape,))
            if copy_data and not _broadcasts_to(input.shape, shape):
                raise ValueError(
                    f"shape={tuple(shape)} cannot hold input of shape {tuple(input.shape)}: input must broadcast to it"
                )
            if shape == input.shape:
                shape = None
        if isinstance(input, MemoryMappedTensor) and shape is None:
            own = input._filename
            target = None if filename is None else _as_path(filename)
            if own == target:
                return input
            if own is not None and target is not None and not copy_existing:
                raise RuntimeError(
                    f"A filename was provided but the tensor already has a file associated: input is memory-mapped "
                    f"at {own!r}, filename={target!r} was given; pass copy_existing=True to copy it there"
                )
        with _DisableSubclass():
            if input.layout != torch.strided:
                raise ValueError(f"input must be a strided (dense) tensor, got {input.layout}")
            if shape is not None and copy_data:
                input = input.expand(shape)
            data = None
            if filename is not None and copy_data and input.device.type == "cpu" and input.numel():
                data = _as_bytes(input)
            out_shape = input.shape if shape is None else shape
            out, path, _ = _new_storage_tensor(out_shape, input.dtype, filename, existsok, data)
            if copy_data and out.numel() and data is None:
                with torch.no_grad():
                    out.copy_(input)
        return cls._wrap(out, path)

    @classmethod
    def _filled(cls, shape: torch.Size, dtype, device, filename, existsok, fill) -> MemoryMappedTensor:
        # every argument is checked before any file is created
        dtype = _as_dtype(dtype)
        _check_device(device)
        if fill is not None and not isinstance(fill, (bool, int, float, complex)):
            if not (isinstance(fill, torch.Tensor) and fill.numel() == 1):
                raise TypeError(
                    f"fill_value must be a number or a one-element tensor, got {type(fill).__name__}: {fill!r}"
                )
        if fill is not None:
            try:  # a value the dtype cannot hold (1.5j in float32, 1e40 in int32) fails here, not mid-write
                torch.empty((), dtype=dtype).fill_(fill)
            except RuntimeError as err:
                raise ValueError(f"fill_value {fill!r} cannot be stored as {dtype}: {err}") from None
        out, path, zero = _new_storage_tensor(shape, dtype, filename, existsok)
        if fill is not None and out.numel() and not (zero and _is_zero(fill)):
            out.fill_(fill)
        return cls._wrap(out, path)

    @classmethod
    def empty(
        cls,
        *size: int | Sequence[int],
        shape: int | Sequence[int] | None = None,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Uninitialised tensor; a new file reads as zeros.

        The shape comes as ints (``empty(2, 3)``), one sequence (``empty((2, 3))``, ``empty(())``
        for 0-dim) or ``shape=``. ``dtype`` defaults to ``torch.get_default_dtype()``; ``device``
        may only be ``None`` or the CPU (anything else raises ``RuntimeError``, as in tensordict).
        ``existsok`` allows reusing (overwriting) an existing ``filename``.

        Examples:
            >>> MemoryMappedTensor.empty(2, 3, dtype=torch.int32).shape
            torch.Size([2, 3])
            >>> MemoryMappedTensor.empty(shape=(4,), device="cpu").dtype
            torch.float32
        """
        return cls._filled(_factory_shape("empty", size, shape), dtype, device, filename, existsok, None)

    @classmethod
    def zeros(
        cls,
        *size: int | Sequence[int],
        shape: int | Sequence[int] | None = None,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Tensor of zeros; arguments as in :meth:`empty`.

        Examples:
            >>> MemoryMappedTensor.zeros((2, 3), dtype=torch.int64).sum().item()
            0
        """
        return cls._filled(_factory_shape("zeros", size, shape), dtype, device, filename, existsok, 0)

    @classmethod
    def ones(
        cls,
        *size: int | Sequence[int],
        shape: int | Sequence[int] | None = None,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Tensor of ones; arguments as in :meth:`empty`.

        Examples:
            >>> MemoryMappedTensor.ones(shape=[3], dtype=torch.bool).tolist()
            [True, True, True]
        """
        return cls._filled(_factory_shape("ones", size, shape), dtype, device, filename, existsok, 1)

    @classmethod
    def full(
        cls,
        *size: Any,
        fill_value: Any = _NO_SHAPE,
        shape: int | Sequence[int] | None = None,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Tensor filled with ``fill_value``; other arguments as in :meth:`empty`.

        tensordict's spellings take ``fill_value`` by keyword (``full(2, 3, fill_value=7)``,
        ``full((2, 3), fill_value=7)``, ``full(shape=(2, 3), fill_value=7)``); ``torch.full``'s
        ``full(shape, fill_value)`` works too. As in tensordict, ``dtype`` defaults to
        ``torch.get_default_dtype()`` whatever the type of ``fill_value``.

        Examples:
            >>> MemoryMappedTensor.full((2,), fill_value=7).tolist()
            [7.0, 7.0]
            >>> MemoryMappedTensor.full((2,), 7, dtype=torch.int64).tolist()
            [7, 7]
        """
        if fill_value is _NO_SHAPE:  # torch.full's order: full(shape, fill_value) or full(fill_value, shape=...)
            if shape is None and len(size) == 2:
                size, fill_value = size[:1], size[1]
            elif shape is not None and len(size) == 1:
                size, fill_value = (), size[0]
            else:
                raise TypeError(
                    f"full() needs fill_value: full(shape, fill_value) or full(*shape, fill_value=...), "
                    f"got positional arguments {size!r} and shape={shape!r}"
                )
        return cls._filled(_factory_shape("full", size, shape), dtype, device, filename, existsok, fill_value)

    @classmethod
    def _like(cls, name, input, dtype, device, filename, existsok, fill) -> MemoryMappedTensor:
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"{name}: input must be a torch.Tensor, got {type(input).__name__}: {input!r}")
        return cls._filled(input.shape, dtype or input.dtype, device, filename, existsok, fill)

    @classmethod
    def empty_like(
        cls,
        input: torch.Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Uninitialised tensor with the shape (and, by default, dtype) of ``input``, on the CPU whatever
        ``input``'s device."""
        return cls._like("empty_like", input, dtype, device, filename, existsok, None)

    @classmethod
    def zeros_like(
        cls,
        input: torch.Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Zeros with the shape (and, by default, dtype) of ``input``."""
        return cls._like("zeros_like", input, dtype, device, filename, existsok, 0)

    @classmethod
    def ones_like(
        cls,
        input: torch.Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Ones with the shape (and, by default, dtype) of ``input``."""
        return cls._like("ones_like", input, dtype, device, filename, existsok, 1)

    @classmethod
    def full_like(
        cls,
        input: torch.Tensor,
        fill_value: Any,
        *,
        dtype: torch.dtype | None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """``fill_value`` with the shape (and, by default, dtype) of ``input``.

        Examples:
            >>> MemoryMappedTensor.full_like(torch.zeros(2, dtype=torch.int16), 5).tolist()
            [5, 5]
        """
        return cls._like("full_like", input, dtype, device, filename, existsok, fill_value)

    @overload
    @classmethod
    def from_filename(
        cls, filename: PathLike, dtype: torch.dtype, shape: int | Sequence[int], index: None = None
    ) -> MemoryMappedTensor: ...

    @overload
    @classmethod
    def from_filename(
        cls, filename: PathLike, dtype: torch.dtype, shape: int | Sequence[int], index: Any
    ) -> torch.Tensor: ...

    @classmethod
    def from_filename(
        cls,
        filename: PathLike,
        dtype: torch.dtype,
        shape: int | Sequence[int],
        index: Any = None,
    ) -> torch.Tensor:
        """Map an existing file holding ``shape`` elements of ``dtype`` (row-major, no header).

        The file must hold exactly ``numel * itemsize`` bytes. ``index``, if given, is applied
        to the result (``t[index]``: a plain tensor when that copies, as advanced indexing does).
        A file this process may not write is mapped copy-on-write: writes do not reach it.

        Examples:
            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "a.memmap")
            >>> _ = MemoryMappedTensor.from_tensor(torch.arange(3.0), filename=path)
            >>> MemoryMappedTensor.from_filename(path, torch.float32, (3,)).tolist()
            [0.0, 1.0, 2.0]
        """
        path = _as_path(filename)
        if dtype is None:
            raise TypeError("dtype must be a torch.dtype, got None")
        dtype = _as_dtype(dtype)
        shape = _as_shape((shape,))
        expected = _nbytes(shape, dtype)
        try:
            found = os.path.getsize(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"filename {path!r} does not exist") from None
        if found != expected:
            raise ValueError(
                f"filename {path!r} has the wrong size for shape={tuple(shape)} and "
                f"dtype={dtype}: expected {expected} bytes, found {found}"
            )
        if expected == 0:
            out = torch.empty(shape, dtype=dtype)
        else:
            # a read-only file is mapped copy-on-write: readable, but writes stay in this process
            out = _on_storage(_map_file(path, expected, shared=os.access(path, os.W_OK)), dtype, shape)
        out = cls._wrap(out, path)
        if index is not None:
            out = out[index]
        return out

    @overload
    @classmethod
    def from_storage(
        cls,
        storage: torch.UntypedStorage | torch.TypedStorage,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: None = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
    ) -> MemoryMappedTensor: ...

    @overload
    @classmethod
    def from_storage(
        cls,
        storage: torch.UntypedStorage | torch.TypedStorage,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: Any,
        device: DeviceLike = None,
        filename: PathLike | None = None,
    ) -> torch.Tensor: ...

    @classmethod
    def from_storage(
        cls,
        storage: torch.UntypedStorage | torch.TypedStorage,
        *,
        dtype: torch.dtype | None = None,
        shape: int | Sequence[int] | None = None,
        index: Any = None,
        device: DeviceLike = None,
        filename: PathLike | None = None,
    ) -> torch.Tensor:
        """Wrap an existing CPU storage (e.g. from ``torch.from_file``) without copying.

        ``dtype`` defaults to the typed storage's dtype (required for an untyped one), ``shape``
        to the whole storage as 1-D. ``filename`` records which file backs the storage, so that
        pickling reopens it; leave it ``None`` for a shared-memory storage. ``index`` is applied to
        the result as in :meth:`from_filename`; ``device`` may only be ``None`` or the CPU.
        """
        _check_device(device)
        if isinstance(storage, torch.TypedStorage):
            dtype = storage.dtype if dtype is None else dtype
            storage = storage.untyped()
        elif not isinstance(storage, torch.UntypedStorage):
            raise TypeError(f"storage must be a torch.UntypedStorage or TypedStorage, got {type(storage).__name__}")
        if dtype is None:
            raise TypeError("dtype must be given for an untyped storage, got None")
        dtype = _as_dtype(dtype)
        if storage.device.type != "cpu":
            raise ValueError(f"storage must be on cpu, got {storage.device}")
        if shape is None:
            shape = (storage.nbytes() // dtype.itemsize,)
        shape = _as_shape((shape,))
        if _nbytes(shape, dtype) > storage.nbytes():
            raise ValueError(
                f"storage is too small for shape={tuple(shape)} and dtype={dtype}: expected at "
                f"least {_nbytes(shape, dtype)} bytes, found {storage.nbytes()}"
            )
        path = None if filename is None else _as_path(filename)
        out = cls._wrap(_on_storage(storage, dtype, shape), path)
        return out if index is None else out[index]


# --------------------------------------------------------------------------------------------- #
# small helpers used above
# --------------------------------------------------------------------------------------------- #


def _rewrap_aliases(out, src: MemoryMappedTensor):
    """Re-wrap outputs of a view op that alias ``src``'s storage (run with subclassing off)."""
    if isinstance(out, torch.Tensor):
        sid = src.untyped_storage()._cdata
        if type(out) is torch.Tensor and out.untyped_storage()._cdata == sid:
            return MemoryMappedTensor._wrap(out, src._filename)
        return out
    if isinstance(out, (tuple, list)):  # split, chunk, unbind, ...
        sid = src.untyped_storage()._cdata
        path = src._filename
        return type(out)(
            MemoryMappedTensor._wrap(o, path) if type(o) is torch.Tensor and o.untyped_storage()._cdata == sid else o
            for o in out
        )
    return out


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def _is_zero(value: Any) -> bool:
    try:
        return bool(value == 0)
    except (RuntimeError, TypeError, ValueError):
        return False
