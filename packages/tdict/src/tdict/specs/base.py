"""TensorSpec: the base of every spec (shape, device, dtype and the shape operations)."""

from __future__ import annotations

import copy
import operator
from typing import TYPE_CHECKING, Any, Sequence

import torch

if TYPE_CHECKING:  # numpy is optional: only to_numpy's callers need it
    import numpy
    from typing_extensions import Self  # typing.Self is new in 3.11

__all__ = ["TensorSpec"]


def _size(shape: Any) -> torch.Size:
    if shape is None:
        return torch.Size(())
    if isinstance(shape, int):
        return torch.Size((shape,))
    return torch.Size(shape)


def _spec_shape(shape: Any, owner: str) -> torch.Size:
    """A constructor's ``shape`` argument as a Size, refusing negative (or non-integer) sizes."""
    try:
        size = _size(shape)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: shape must be a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in size):
        raise ValueError(f"{owner}: shape must hold sizes >= 0, got {tuple(size)}")
    return size


def _count(value: Any, owner: str, name: str) -> int:
    """A constructor's category count (``n``, an ``nvec`` entry) as an int >= 1."""
    integral = not isinstance(value, bool) and hasattr(value, "__index__")
    if isinstance(value, torch.Tensor):  # a one-element integer tensor counts as an int
        integral = value.numel() == 1 and not value.is_floating_point() and value.dtype is not torch.bool
    if not integral:
        raise TypeError(f"{owner}: {name} must be an int >= 1, got {value!r}")
    value = operator.index(value)
    if value < 1:
        raise ValueError(f"{owner}: {name} must be an int >= 1, got {value}")
    return value


def _shape_args(shape: tuple) -> torch.Size:
    if len(shape) == 1 and not isinstance(shape[0], int):
        return _size(shape[0])
    return torch.Size(shape)


def _index_part(part: Any) -> Any:
    """One component of an index, with sequences (lists, tuples, ranges, arrays) as tensors."""
    if isinstance(part, (list, tuple, range)):
        try:
            return torch.as_tensor(list(part) if isinstance(part, range) else part)
        except (TypeError, ValueError, RuntimeError):
            raise IndexError(f"unsupported index component {part!r}") from None
    if type(part).__module__ == "numpy" and hasattr(part, "shape"):  # a numpy array (numpy is optional)
        return torch.as_tensor(part)
    return part


def _batch_index(index: Any, batch: torch.Size) -> tuple:
    """``index`` as a tuple over the dims of ``batch``: sequences become tensors (a list is one tensor
    index, as in TorchRL), an ``Ellipsis`` becomes the full slices over the batch dims it stands for,
    a slice with a negative step becomes the tensor of its indices (torch has no such slices; it may
    not be combined with other tensor indices then), and integer tensor indices are checked against
    their dim (``IndexError``, as torch would raise)."""
    parts = tuple(_index_part(p) for p in index) if isinstance(index, tuple) else (_index_part(index),)
    ellipses = [i for i, p in enumerate(parts) if p is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"an index can only have a single ellipsis, got {index!r}")
    if ellipses:
        used = 0
        for p in parts:
            if p is None or p is Ellipsis:
                continue
            used += p.ndim if isinstance(p, torch.Tensor) and p.dtype is torch.bool else 1
        fill = len(batch) - used
        if fill < 0:
            raise IndexError(f"too many indices ({used}) for the {len(batch)} batch dims, in {index!r}")
        i = ellipses[0]
        parts = parts[:i] + (slice(None),) * fill + parts[i + 1 :]
    backwards = sum(isinstance(p, slice) and p.step is not None and p.step < 0 for p in parts)
    if backwards and backwards + sum(isinstance(p, torch.Tensor) for p in parts) > 1:
        raise IndexError(
            f"a slice with a negative step becomes a tensor index here, so it cannot be combined with other "
            f"tensor indices or negative-step slices, got {index!r}"
        )
    out, pos = [], 0
    for p in parts:
        if p is not None and pos < len(batch):
            size = batch[pos]
            if isinstance(p, slice) and p.step is not None and p.step < 0:
                p = torch.arange(*p.indices(size))
            elif isinstance(p, torch.Tensor) and p.dtype is not torch.bool and p.numel():
                if p.is_floating_point():
                    raise IndexError(f"tensors used as indices must be integer or bool tensors, got {p.dtype}")
                if bool(((p >= size) | (p < -size)).any()):
                    raise IndexError(f"index {p.tolist()} is out of bounds for dimension {pos} with size {size}")
        out.append(p)
        if p is not None:
            pos += p.ndim if isinstance(p, torch.Tensor) and p.dtype is torch.bool else 1
    return tuple(out)


def _device(device: Any) -> torch.device | None:
    """``device`` as a :class:`torch.device` (``None`` stays ``None``); a bare ``"cuda"`` gets the current index."""
    if device is None:
        return None
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:  # TorchRL's ordinal devices: "cuda" means "cuda:<current>"
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _leaf_device(device: Any) -> torch.device:
    """The device of a leaf spec: ``device``, or torch's default device when ``None`` (as in TorchRL)."""
    return torch.get_default_device() if device is None else _device(device)  # pyright: ignore[reportReturnType]


def _dest_device(dest: Any, owner: str) -> torch.device:
    """The device ``dest`` of a ``to`` call, refusing what is neither a device nor a dtype."""
    if isinstance(dest, bool) or not isinstance(dest, (str, int, torch.device)):
        raise TypeError(
            f"{owner}: dest must be a torch.dtype or a device (str, int or torch.device), got {type(dest).__name__} {dest!r}"
        )
    return torch.device(dest)


def _draw_on(device: torch.device | None, generator: torch.Generator | None) -> torch.device | None:
    """Where ``rand`` draws: on the generator's device when one is given (it draws nowhere else)."""
    return device if generator is None else generator.device


def _moved(value: torch.Tensor, device: torch.device | None) -> torch.Tensor:
    """``value`` on ``device`` (unchanged when ``device`` is None or already its device)."""
    return value if device is None or value.device == device else value.to(device)


class TensorSpec:
    """Base class of the leaf specs: a description of one tensor entry (shape, dtype, device, domain).

    Subclasses hold their per-element tensors (bounds, masks) in ``_tensors``; each has the spec's
    shape followed by ``_extra`` trailing dims, so every shape operation below is written once.
    ``_ev`` trailing dims of ``shape`` are event dims (the one-hot dim) that shape ops never touch.

    Examples:
        >>> from tdict.specs import Unbounded
        >>> spec = Unbounded(shape=(3,))
        >>> spec.rand((2,)).shape, spec.ndim
        (torch.Size([2, 3]), 1)
    """

    _is_spec = True
    _ev = 0  # trailing event dims of ``shape`` that shape ops leave alone

    shape: torch.Size
    device: torch.device | None
    dtype: torch.dtype | None

    _has_device = True  # leaf specs always have a device (torch's default one unless given); NonTensor may not

    def __init__(self, shape: Any, device: Any, dtype: torch.dtype | None) -> None:
        self.shape = _spec_shape(shape, type(self).__name__)
        self.device = _leaf_device(device) if self._has_device else _device(device)
        self.dtype = dtype
        self._tensors: dict[str, torch.Tensor] = {}
        self._finish()

    # ---- hooks -----------------------------------------------------------------------------
    def _finish(self) -> None:
        """Precompute hot-path constants; called after every construction or shape change."""

    def _extra_eq(self, other: "TensorSpec") -> bool:
        return True

    # ---- basic attributes ------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The number of dims of :attr:`shape`."""
        return len(self.shape)

    def ndimension(self) -> int:
        """The number of dims of :attr:`shape`."""
        return len(self.shape)

    @property
    def domain(self) -> str:
        """``"continuous"`` for floating-point dtypes, ``"discrete"`` otherwise (TorchRL's ``domain``)."""
        dtype = self.dtype
        return "continuous" if dtype is not None and (dtype.is_floating_point or dtype.is_complex) else "discrete"

    def clear_device_(self) -> Self:
        """Does nothing and returns ``self``: a leaf spec always has a device (see :meth:`Composite.clear_device_`)."""
        return self

    def memoize_encode(self, mode: bool = True) -> None:
        """Accepted for TorchRL compatibility; :meth:`encode` does one pass per call and caches nothing here.

        Examples:
            >>> from tdict.specs import Bounded
            >>> spec = Bounded(0.0, 1.0, shape=(2,))
            >>> spec.memoize_encode(True)
            >>> spec.encode([0.5, 0.25]).tolist()
            [0.5, 0.25]
        """
        if not isinstance(mode, bool):
            raise TypeError(f"{type(self).__name__}.memoize_encode: mode must be a bool, got {type(mode).__name__}")

    def erase_memoize_cache(self) -> None:
        """Accepted for TorchRL compatibility: there is no encode cache to clear (see :meth:`memoize_encode`)."""

    def type_check(self, value: torch.Tensor, key: Any = None) -> None:
        """Raise ``TypeError`` when ``value``'s dtype is not the spec's (``key`` is accepted for Composite parity).

        Examples:
            >>> import torch
            >>> from tdict.specs import Unbounded
            >>> Unbounded(shape=(2,)).type_check(torch.zeros(2))
            >>> Unbounded(shape=(2,)).type_check(torch.zeros(2, dtype=torch.int64))
            Traceback (most recent call last):
            ...
            TypeError: value.dtype=torch.int64 but Unbounded.dtype=torch.float32
        """
        dtype = getattr(value, "dtype", None)
        if dtype is not self.dtype:
            where = "" if key is None else f" (key {key!r})"
            raise TypeError(f"value.dtype={dtype} but {type(self).__name__}.dtype={self.dtype}{where}")

    @property
    def _batch_shape(self) -> torch.Size:
        return self.shape[: len(self.shape) - self._ev]

    def _full(self, shape: Any) -> torch.Size:
        if not shape and type(shape) is not int:  # () / None / torch.Size([]); an int 0 is a batch of 0
            return self.shape
        return _size(shape) + self.shape

    # ---- generation ------------------------------------------------------------------------
    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        """A random value inside the spec, of shape ``shape + self.shape``.

        With ``generator`` the draws come from it (on its device, then moved to the spec's) and the
        global generator is left alone: seeded components (a collector's random actions) pass theirs.
        """
        raise NotImplementedError

    def zero(self, shape: Any = ()) -> torch.Tensor:
        """A zero-filled tensor of shape ``shape + self.shape``."""
        return torch.zeros(self._full(shape), dtype=self.dtype, device=self.device)

    def zeros(self, shape: Any = ()) -> torch.Tensor:
        """Same as :meth:`zero`."""
        return self.zero(shape)

    def one(self, shape: Any = ()) -> torch.Tensor:
        """A one-filled tensor of shape ``shape + self.shape``."""
        return torch.ones(self._full(shape), dtype=self.dtype, device=self.device)

    def ones(self, shape: Any = ()) -> torch.Tensor:
        """Same as :meth:`one`."""
        return self.one(shape)

    # ---- validation ------------------------------------------------------------------------
    def _violation(self, val: Any) -> str | None:
        """Why ``val`` is outside the spec (``None`` when inside)."""
        raise NotImplementedError

    def _check_tensor(self, val: Any) -> str | None:
        if not isinstance(val, torch.Tensor):
            return f"expected a torch.Tensor, got {type(val).__name__}"
        n = len(self.shape)
        if val.shape[val.ndim - n :] != self.shape or val.ndim < n:
            return f"shape {tuple(val.shape)} does not end with the spec shape {tuple(self.shape)}"
        if self.dtype is not None and val.dtype != self.dtype:
            return f"dtype {val.dtype} differs from the spec dtype {self.dtype}"
        return None

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` lies in the spec (shape suffix, dtype and domain)."""
        return self._violation(val) is None

    def contains(self, val: Any) -> bool:
        """Same as :meth:`is_in`."""
        return self._violation(val) is None

    def sample(self, shape: Any = (), *, generator: torch.Generator | None = None) -> Any:
        """Same as :meth:`rand`."""
        return self.rand(shape, generator=generator)

    def assert_is_in(self, val: Any) -> None:
        """Raise ``AssertionError`` naming the violated condition when ``val`` is not in the spec."""
        why = self._violation(val)
        if why is not None:
            raise AssertionError(f"{type(self).__name__}: value not in spec: {why}")

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """The closest value inside the spec (values already inside are returned unchanged)."""
        if self.is_in(val):
            return val
        return self._project(val)

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        return val.to(self.dtype)

    # ---- conversion ------------------------------------------------------------------------
    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Convert a numpy array / Python value to a tensor of the spec's dtype and device.

        A non-tensor value is reshaped to the spec's shape (it must have as many elements); a tensor
        keeps its shape unless it is the spec's elements with fewer dims.

        Raises:
            RuntimeError: a non-tensor value cannot be reshaped to the spec's shape ("Shape mismatch").

        Examples:
            >>> from tdict.specs import Unbounded
            >>> Unbounded(shape=(2, 1)).encode([1.0, 2.0]).shape
            torch.Size([2, 1])
            >>> Unbounded(shape=(2,)).encode([[1.0, 2.0], [3.0, 4.0]])
            Traceback (most recent call last):
            ...
            RuntimeError: Shape mismatch: Unbounded.encode got a value of shape (2, 2), which cannot be reshaped to the spec shape (2,)
        """
        if isinstance(val, torch.Tensor):
            out = val.to(dtype=self.dtype, device=None if ignore_device else self.device)
            if out.shape != self.shape and out.numel() == self.shape.numel() and out.ndim <= len(self.shape):
                out = out.reshape(self.shape)
            return out
        flags = getattr(val, "flags", None)  # a numpy array (numpy is imported only by its users)
        if flags is not None and not flags.writeable:
            val = val.copy()
        out = torch.as_tensor(val).to(dtype=self.dtype, device=None if ignore_device else self.device)
        if out.shape != self.shape:
            if out.numel() != self.shape.numel():
                raise RuntimeError(
                    f"Shape mismatch: {type(self).__name__}.encode got a value of shape {tuple(out.shape)}, "
                    f"which cannot be reshaped to the spec shape {tuple(self.shape)}"
                )
            out = out.reshape(self.shape)
        return out

    def to_numpy(self, val: torch.Tensor, safe: bool | None = None) -> "numpy.ndarray":
        """Convert a tensor of the spec to numpy, checked with :meth:`assert_is_in` when ``safe`` is true
        (unchecked by default, as in TorchRL)."""
        if safe:
            self.assert_is_in(val)
        return val.detach().cpu().numpy()

    # ---- shape ops -------------------------------------------------------------------------
    def _rebuild(self, shape: torch.Size, tensors: dict[str, torch.Tensor]) -> Self:
        out = copy.copy(self)
        out.shape = torch.Size(shape)
        out._tensors = tensors
        out._finish()
        return out

    def _map(self, shape: torch.Size, fn) -> Self:
        return self._rebuild(shape, {k: fn(v) for k, v in self._tensors.items()})

    def _dim(self, dim: int) -> int:
        """A batch dim: negative dims count from the end of the whole shape, as in TorchRL, and the event
        dim of one-hot specs (the last one) is refused with a ``ValueError``."""
        n, nb = len(self.shape), len(self._batch_shape)
        if not -n <= dim < n:
            raise IndexError(f"{type(self).__name__}: dim {dim} out of range for shape {tuple(self.shape)}")
        d = dim + n if dim < 0 else dim
        if d >= nb:
            raise ValueError(
                f"{type(self).__name__}: dim {dim} is the event dim (the last one), which must remain unchanged"
            )
        return d

    def expand(self, *shape: Any) -> "TensorSpec":
        """Expand to ``shape`` (which must end with the current shape, or match it with -1)."""
        shape = _shape_args(shape)
        if len(shape) < len(self.shape):
            raise ValueError(
                f"{type(self).__name__}.expand: {tuple(shape)} is shorter than the spec shape {tuple(self.shape)}"
            )
        lead = len(shape) - len(self.shape)
        new = list(shape)
        for i, s in enumerate(self.shape):
            if new[lead + i] == -1:
                new[lead + i] = s
            elif s != 1 and new[lead + i] != s:
                raise ValueError(f"{type(self).__name__}.expand: cannot expand {tuple(self.shape)} to {tuple(shape)}")
        if self._ev and tuple(new[-self._ev :]) != tuple(self.shape[-self._ev :]):
            raise ValueError(f"{type(self).__name__}.expand: the last dim {self.shape[-1]} cannot change")
        new = torch.Size(new)
        nb = len(new) - self._ev
        return self._map(new, lambda t: t.expand(new[:nb] + t.shape[len(self._batch_shape) :]))

    def reshape(self, *shape: Any) -> "TensorSpec":
        """Reshape the batch dims (the event dim of one-hot specs stays last)."""
        shape = _shape_args(shape)
        if self._ev:
            if tuple(shape[-self._ev :]) != tuple(self.shape[-self._ev :]):
                raise ValueError(f"{type(self).__name__}.reshape: the last dim {self.shape[-1]} cannot change")
            shape = shape[: len(shape) - self._ev]
        nb = len(self._batch_shape)
        probe = torch.empty(self._batch_shape, device="meta").reshape(shape)
        new = probe.shape + self.shape[nb:]
        return self._map(new, lambda t: t.reshape(probe.shape + t.shape[nb:]))

    view = reshape

    def unflatten(self, dim: int, sizes: Sequence[int]) -> "TensorSpec":
        """Split batch dim ``dim`` into ``sizes`` (as :func:`torch.unflatten`)."""
        shape = torch.empty(self._batch_shape, device="meta").unflatten(dim, tuple(sizes)).shape
        return self.reshape(shape + self.shape[len(self._batch_shape) :])

    def flatten(self, start_dim: int, end_dim: int) -> "TensorSpec":
        """Merge batch dims ``start_dim..end_dim`` into one (as :func:`torch.flatten`)."""
        shape = torch.empty(self._batch_shape, device="meta").flatten(start_dim, end_dim).shape
        return self.reshape(shape + self.shape[len(self._batch_shape) :])

    def squeeze(self, dim: int | None = None) -> "TensorSpec":
        """Remove singleton batch dims (all, or only ``dim``)."""
        bs = self._batch_shape
        if dim is None:
            keep = [i for i, s in enumerate(bs) if s != 1]
            return self.reshape(torch.Size([bs[i] for i in keep]) + self.shape[len(bs) :])
        dim = self._dim(dim)
        if bs[dim] != 1:
            return self
        return self._map(self.shape[:dim] + self.shape[dim + 1 :], lambda t: t.squeeze(dim))

    def unsqueeze(self, dim: int) -> "TensorSpec":
        """Insert a singleton batch dim at ``dim`` (negative dims count from the end of the whole shape, as in
        TorchRL; a one-hot spec's event dim stays last, so ``-1`` is refused there with a ``ValueError``, unless
        the event dim has size one)."""
        n, nb = len(self.shape), len(self._batch_shape)
        if not -n - 1 <= dim <= n:
            raise IndexError(f"{type(self).__name__}.unsqueeze: dim {dim} out of range for shape {tuple(self.shape)}")
        dim = dim + n + 1 if dim < 0 else dim
        if dim > nb and all(s == 1 for s in self.shape[nb:]):
            dim = nb  # an event dim of size one: a 1 after it is the same shape as a 1 before it (TorchRL allows it)
        if dim > nb:
            raise ValueError(
                f"{type(self).__name__}.unsqueeze: dim {dim} would follow the event dim, which must remain last"
            )
        return self._map(self.shape[:dim] + (1,) + self.shape[dim:], lambda t: t.unsqueeze(dim))

    def unbind(self, dim: int = 0) -> tuple["TensorSpec", ...]:
        """Split along batch dim ``dim`` into a tuple of specs."""
        dim = self._dim(dim)
        new = self.shape[:dim] + self.shape[dim + 1 :]
        return tuple(self._map(new, lambda t, i=i: t.select(dim, i)) for i in range(self.shape[dim]))

    def __getitem__(self, index: Any) -> "TensorSpec":
        """Index the leading (batch) dims, like a tensor of the spec's shape (the event dim of one-hot
        specs is never indexed: ``...`` stands for batch dims only).

        Examples:
            >>> from tdict.specs import OneHot, Unbounded
            >>> Unbounded(shape=(5, 3))[[0, 1], None].shape
            torch.Size([2, 1, 3])
            >>> OneHot(4, shape=(5, 3, 4))[..., 0].shape
            torch.Size([5, 4])
        """
        if isinstance(index, str):
            raise IndexError(f"{type(self).__name__}: a leaf spec has no keys, got the index {index!r}")
        nb = len(self._batch_shape)
        index = _batch_index(index, self._batch_shape)
        probe = torch.empty(self._batch_shape, device="meta")[index]
        return self._map(probe.shape + self.shape[nb:], lambda t: t[index])

    def to(self, dest: Any) -> Self:
        """A copy on the device ``dest`` (a ``str``, ``int`` or :class:`torch.device`), or with the dtype
        ``dest`` (a :class:`torch.dtype`); ``self`` when nothing changes (or ``dest`` is ``None``).

        A dtype cast keeps the spec's parameters (``n``, ``nvec``, the mask); :class:`Bounded` casts its
        bounds, and :class:`Unbounded` re-picks its sampler for the new dtype.

        Raises:
            TypeError: ``dest`` is neither a dtype, a device nor ``None``.

        Examples:
            >>> import torch
            >>> from tdict.specs import Categorical, Unbounded
            >>> Unbounded(shape=(2,)).to(torch.float64).rand().dtype
            torch.float64
            >>> spec = Categorical(3)
            >>> spec.to("cpu").device, spec.to(torch.int32).dtype, spec.to(torch.int64) is spec
            (device(type='cpu'), torch.int32, True)
        """
        if dest is None:
            return self
        if isinstance(dest, torch.dtype):
            return self if dest == self.dtype else self._cast(dest)
        dev = _dest_device(dest, f"{type(self).__name__}.to")
        if dev == self.device:
            return self
        out = self._map(self.shape, lambda t: t.to(dev))
        out.device = dev
        out._finish()
        return out

    def _cast(self, dtype: torch.dtype) -> Self:
        """A copy with the dtype ``dtype`` (its per-element tensors cloned, their dtypes kept)."""
        out = self._map(self.shape, lambda t: t.clone())
        out.dtype = dtype
        out._finish()
        return out

    def cpu(self) -> "TensorSpec":
        """Move to the CPU: ``self.to("cpu")``."""
        return self.to("cpu")

    def clone(self) -> "TensorSpec":
        """A copy whose per-element tensors (bounds, masks) are cloned."""
        return self._map(self.shape, lambda t: t.clone())

    def cardinality(self) -> int:
        """The number of distinct values in the spec (discrete specs only).

        Raises:
            NotImplementedError: the spec is not discrete.
        """
        raise NotImplementedError(f"{type(self).__name__} is not discrete")

    def enumerate(self) -> torch.Tensor:
        """Every value in the spec, stacked along a new leading dim (discrete specs only).

        Raises:
            NotImplementedError: the spec is not discrete.
        """
        raise NotImplementedError(f"{type(self).__name__} is not discrete")

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Select entries of ``tensor_to_index``'s last dim with an action of this spec (discrete specs only)."""
        raise NotImplementedError(f"`index` is not implemented for {type(self).__name__} specs.")

    # ---- equality / repr -------------------------------------------------------------------
    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return False
        return self._equal_content(other)

    def _equal_content(self, other: Any) -> bool:
        """Equal shape, dtype, device, tensors and extras (the class is the caller's business)."""
        if self.shape != other.shape or self.dtype != other.dtype or self.device != other.device:
            return False
        if self._tensors.keys() != other._tensors.keys():
            return False
        for k, v in self._tensors.items():
            w = other._tensors[k]
            if v.shape != w.shape or not torch.equal(v, w.to(v.device)):
                return False
        return self._extra_eq(other)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable (update_mask), like torchrl)

    def __repr__(self) -> str:
        extra = self._repr_extra()
        return f"{type(self).__name__}(shape={tuple(self.shape)}, device={self.device}, dtype={self.dtype}{extra})"

    def _repr_extra(self) -> str:
        return ""


def _cartesian(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """All combinations of the given per-element value lists: ``[prod(len), len(rows), *elem]``."""
    idx = (
        torch.cartesian_prod(*[torch.arange(len(r)) for r in rows])
        if len(rows) > 1
        else torch.arange(len(rows[0]))[:, None]
    )
    return torch.stack([r[idx[:, j]] for j, r in enumerate(rows)], 1)
