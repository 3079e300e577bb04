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


def _device(device: Any) -> torch.device | None:
    return None if device is None else torch.device(device)


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

    def __init__(self, shape: Any, device: Any, dtype: torch.dtype | None) -> None:
        self.shape = _spec_shape(shape, type(self).__name__)
        self.device = _device(device)
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
        """Convert a numpy array / Python value to a tensor of the spec's dtype and device."""
        if isinstance(val, torch.Tensor):
            out = val
        else:
            flags = getattr(val, "flags", None)  # a numpy array (numpy is imported only by its users)
            if flags is not None and not flags.writeable:
                val = val.copy()
            out = torch.as_tensor(val)
        out = out.to(dtype=self.dtype, device=None if ignore_device else self.device)
        if out.shape != self.shape and out.numel() == self.shape.numel() and out.ndim <= len(self.shape):
            out = out.reshape(self.shape)
        return out

    def to_numpy(self, val: torch.Tensor, safe: bool = True) -> "numpy.ndarray":
        """Convert a tensor of the spec to numpy (checked with :meth:`assert_is_in` when ``safe``)."""
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
        nb = len(self._batch_shape)
        if not -nb <= dim < nb:
            raise IndexError(
                f"{type(self).__name__}: dim {dim} out of range for batch shape {tuple(self._batch_shape)}"
            )
        return dim + nb if dim < 0 else dim

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
        """Insert a singleton batch dim at ``dim``."""
        nb = len(self._batch_shape)
        if not -nb - 1 <= dim <= nb:
            raise IndexError(
                f"{type(self).__name__}.unsqueeze: dim {dim} out of range for batch shape {tuple(self._batch_shape)}"
            )
        dim = dim + nb + 1 if dim < 0 else dim
        return self._map(self.shape[:dim] + (1,) + self.shape[dim:], lambda t: t.unsqueeze(dim))

    def unbind(self, dim: int = 0) -> tuple["TensorSpec", ...]:
        """Split along batch dim ``dim`` into a tuple of specs."""
        dim = self._dim(dim)
        new = self.shape[:dim] + self.shape[dim + 1 :]
        return tuple(self._map(new, lambda t, i=i: t.select(dim, i)) for i in range(self.shape[dim]))

    def __getitem__(self, index: Any) -> "TensorSpec":
        """Index the leading (batch) dims, like a tensor of the spec's shape."""
        if (
            isinstance(index, str)
            or (isinstance(index, tuple) and any(i is Ellipsis for i in index))
            or index is Ellipsis
        ):
            raise IndexError(
                f"{type(self).__name__}: only int/slice/tensor indices over the batch dims are supported, got {index!r}"
            )
        probe = torch.empty(self._batch_shape, device="meta")[index]
        return self._map(probe.shape + self.shape[len(self._batch_shape) :], lambda t: t[index])

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
