"""Image transforms: ToTensorImage, Resize, CenterCrop, Crop, GrayScale (pure torch, no torchvision).

Images are ``[..., C, H, W]`` after :class:`ToTensorImage` (``[..., H, W, C]`` before); any number of
leading dims (env batch, rollout time, replay-buffer batch) is accepted. As in TorchRL, ``w`` is the
size of dim ``-2`` and ``h`` the size of dim ``-1`` of the output.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from tdict import NestedKey
from tdict.validation import check_one_of

from .elementwise import _MapTransform, map_spec

__all__ = ["ToTensorImage", "Resize", "CenterCrop", "Crop", "GrayScale"]

_INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "area")


def _image_keys(in_keys: Any) -> Any:
    return ["pixels"] if in_keys is None else in_keys


def _check_image(name: str, value: torch.Tensor, min_ndim: int = 3) -> None:
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name}: expected an image with at least {min_ndim} dims ([..., C, H, W]), got shape {list(value.shape)}."
        )


class ToTensorImage(_MapTransform):
    """Turns ``[..., H, W, C]`` images into ``[..., C, H, W]`` floats, scaled from ``0..255`` to ``[0, 1]``.

    Args:
        from_int: divide by 255 (``None``: only when the input is not floating point).
        unsqueeze: add a leading dim to single images (3-dim inputs).
        dtype: the output dtype (default: torch's default float dtype).
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> img = torch.full((2, 4, 5, 3), 255, dtype=torch.uint8)
        >>> out = ToTensorImage()(TensorDict(pixels=img, batch_size=[2]))["pixels"]
        >>> out.shape, out.dtype, out.max().item()
        (torch.Size([2, 3, 4, 5]), torch.float32, 1.0)
    """

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        *,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_image_keys(in_keys), out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"ToTensorImage: dtype must be a floating-point dtype, got {dtype}.")
        self.from_int = from_int
        self.unsqueeze = unsqueeze
        self.dtype = dtype if dtype is not None else torch.get_default_dtype()

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("ToTensorImage", value)
        scale = self.from_int if self.from_int is not None else not value.is_floating_point()
        out = value.movedim(-1, -3).to(self.dtype)
        if scale:
            out = out.div(255)
        if self.unsqueeze and out.ndim == 3:
            out = out.unsqueeze(0)
        return out

    def __repr__(self) -> str:
        return f"ToTensorImage(from_int={self.from_int}, dtype={self.dtype}, in_keys={self.in_keys})"


def _resize(value: torch.Tensor, size: tuple[int, int], mode: str) -> torch.Tensor:
    lead = value.shape[:-3]
    flat = value.reshape(-1, *value.shape[-3:])
    is_float = flat.is_floating_point()
    x = flat if is_float else flat.to(torch.float32)
    kwargs: dict = {}
    if mode in ("bilinear", "bicubic"):
        kwargs = {"align_corners": False, "antialias": True}
    out = F.interpolate(x, size=size, mode=mode, **kwargs)
    if not is_float:
        info = torch.iinfo(value.dtype)
        out = out.round_().clamp_(info.min, info.max).to(value.dtype)
    return out.reshape(*lead, *out.shape[-3:])


class Resize(_MapTransform):
    """Resizes ``[..., C, H, W]`` images to ``[..., C, w, h]`` with :func:`torch.nn.functional.interpolate`.

    Bilinear and bicubic resizing antialias (as torchvision's ``resize(antialias=True)``). Integer
    images are resized in float32 and rounded back to their dtype.

    Args:
        w: the output size of dim ``-2`` (a pair ``(w, h)`` is accepted too).
        h: the output size of dim ``-1`` (default ``w``).
        interpolation: one of ``"nearest"``, ``"nearest-exact"``, ``"bilinear"``, ``"bicubic"``, ``"area"``.
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(pixels=torch.rand(2, 3, 3, 8, 8), batch_size=[2, 3])
        >>> Resize(4, 6)(td)["pixels"].shape
        torch.Size([2, 3, 3, 4, 6])
    """

    def __init__(
        self,
        w: int | tuple[int, int] | list[int],
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if isinstance(w, (list, tuple)):
            w, h = w
        h = w if h is None else h
        if int(w) < 1 or int(h) < 1:
            raise ValueError(f"Resize: w and h must be >= 1, got w={w}, h={h}.")
        interpolation = str(getattr(interpolation, "value", interpolation))
        check_one_of("Resize", "interpolation", interpolation, _INTERPOLATIONS)
        super().__init__(_image_keys(in_keys), out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.w, self.h = int(w), int(h)
        self.interpolation = interpolation

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("Resize", value)
        if value.shape[-2:] == (self.w, self.h):
            return value
        return _resize(value, (self.w, self.h), self.interpolation)

    def _spec_fn(self, spec: Any) -> Any:
        if self.interpolation == "bicubic":  # overshoots: only shape and dtype are kept
            from tdict.specs import Unbounded

            z = self._apply_transform(spec.zero())
            return Unbounded(shape=z.shape, device=spec.device, dtype=z.dtype)
        return map_spec(spec, self._apply_transform)

    def __repr__(self) -> str:
        return f"Resize(w={self.w}, h={self.h}, interpolation={self.interpolation!r}, in_keys={self.in_keys})"


class Crop(_MapTransform):
    """Crops ``[..., C, H, W]`` images to ``[..., C, w, h]`` starting at row ``top`` and column ``left``.

    Args:
        w: the output size of dim ``-2`` (rows).
        h: the output size of dim ``-1`` (columns; default ``w``).
        top: the first row kept.
        left: the first column kept.
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> img = torch.arange(16.0).reshape(1, 4, 4)
        >>> Crop(2, 3, top=1, left=1)(TensorDict(pixels=img))["pixels"].tolist()
        [[[5.0, 6.0, 7.0], [9.0, 10.0, 11.0]]]
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        h = w if h is None else h
        if int(w) < 1 or int(h) < 1 or int(top) < 0 or int(left) < 0:
            raise ValueError(
                f"{type(self).__name__}: need w, h >= 1 and top, left >= 0, got w={w}, h={h}, top={top}, left={left}."
            )
        super().__init__(_image_keys(in_keys), out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.w, self.h, self.top, self.left = int(w), int(h), int(top), int(left)

    def _window(self, value: torch.Tensor) -> tuple[int, int]:
        return self.top, self.left

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image(type(self).__name__, value, 2)
        top, left = self._window(value)
        rows, cols = value.shape[-2], value.shape[-1]
        if top + self.w > rows or left + self.h > cols:
            raise ValueError(
                f"{type(self).__name__}: the window rows {top}..{top + self.w - 1}, columns {left}..{left + self.h - 1} "
                f"does not fit in an image of shape {list(value.shape)} ([..., H, W])."
            )
        return value[..., top : top + self.w, left : left + self.h]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(w={self.w}, h={self.h}, top={self.top}, left={self.left}, in_keys={self.in_keys})"
        )


class CenterCrop(Crop):
    """Crops the center of ``[..., C, H, W]`` images to ``[..., C, w, h]``.

    The window starts at row ``(H - w) // 2`` and column ``(W - h) // 2``.

    Args:
        w: the output size of dim ``-2`` (rows).
        h: the output size of dim ``-1`` (columns; default ``w``).
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> img = torch.arange(16.0).reshape(1, 4, 4)
        >>> CenterCrop(2)(TensorDict(pixels=img))["pixels"].tolist()
        [[[5.0, 6.0], [9.0, 10.0]]]
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(w, h, 0, 0, in_keys, out_keys)

    def _window(self, value: torch.Tensor) -> tuple[int, int]:
        return (value.shape[-2] - self.w) // 2, (value.shape[-1] - self.h) // 2

    def __repr__(self) -> str:
        return f"CenterCrop(w={self.w}, h={self.h}, in_keys={self.in_keys})"


class GrayScale(_MapTransform):
    """Turns ``[..., 3, H, W]`` RGB images into ``[..., 1, H, W]`` luminance.

    ``0.2989 R + 0.587 G + 0.114 B`` (torchvision's weights); integer images keep their dtype
    (the result is truncated, as torchvision does).

    Args:
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the results go (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> img = torch.ones(2, 3, 4, 4)
        >>> GrayScale()(TensorDict(pixels=img, batch_size=[2]))["pixels"].shape
        torch.Size([2, 1, 4, 4])
    """

    _WEIGHTS = (0.2989, 0.587, 0.114)

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_image_keys(in_keys), out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("GrayScale", value)
        if value.shape[-3] != 3:
            raise ValueError(
                f"GrayScale: expected 3 channels at dim -3 ([..., 3, H, W]), got shape {list(value.shape)}."
            )
        r, g, b = value.unbind(-3)
        wr, wg, wb = self._WEIGHTS
        out = (wr * r + wg * g + wb * b).unsqueeze(-3)
        return out.to(value.dtype)
