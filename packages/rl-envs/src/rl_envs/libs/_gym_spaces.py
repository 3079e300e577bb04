"""Gymnasium spaces <-> specs, and the converters between gymnasium values and tensors.

Everything here is built once per env: :func:`space_to_spec` maps a space to a spec and
:func:`make_codec` returns the functions that turn gymnasium observations into tensors and
actions (tensors) back into what ``env.step`` expects. The per-step functions are closures with
no isinstance cascade over spaces.

Mapping (TorchRL 0.14 names):

========================  =====================================================================
gymnasium                 spec
========================  =====================================================================
``Box``                   ``Unbounded`` when every bound is infinite (or the dtype's min/max),
                          else ``Bounded``; the dtype is kept (float64 stays float64). A
                          ``Box`` of shape ``()`` keeps shape ``()``.
``Discrete(n, start)``    ``OneHot(n)`` (int64) or, with ``categorical_action_encoding``,
                          ``Categorical(n)``: the value is the index ``x - start``.
``MultiDiscrete``         ``MultiOneHot(nvec)`` / ``MultiCategorical(nvec)`` (index ``x - start``);
                          a multi-dim ``nvec`` always maps to ``MultiCategorical``.
``MultiBinary``           ``Binary`` (int8)
``Dict``                  ``Composite`` (nested); a ``"state"`` entry is renamed
                          ``"observation"`` (as TorchRL does).
``Tuple``                 ``Composite`` with keys ``"0"``, ``"1"``, ... (TorchRL stacks the
                          members, which fails unless they are all alike).
========================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tdict import TensorDict
from tdict.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)

__all__ = ["SpaceCodec", "make_codec", "space_to_spec"]

_from_numpy = torch.from_numpy


def _torch_dtype(np_dtype: Any) -> torch.dtype:
    return _from_numpy(np.zeros((), dtype=np_dtype)).dtype


def _kind(space: Any) -> str:
    """The space family, by class name along the MRO (works for gymnasium subclasses)."""
    for cls in type(space).__mro__:
        name = cls.__name__
        if name in ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"):
            return name
    raise NotImplementedError(
        f"gymnasium space {type(space).__name__} ({space}) has no spec mapping; supported: Box, Discrete, "
        f"MultiDiscrete, MultiBinary, Dict, Tuple."
    )


def _dict_keys(space: Any, remap_state: bool) -> list[tuple[str, str]]:
    """(spec key, space key) pairs of a Dict space."""
    names = list(space.spaces.keys())
    out = []
    for name in names:
        key = name
        if remap_state and name == "state" and "observation" not in names:
            key = "observation"
        out.append((str(key), name))
    return out


def _box_spec(space: Any, device: Any) -> Any:
    dtype = _torch_dtype(space.dtype)
    shape = torch.Size(space.shape)
    low = np.asarray(space.low)
    high = np.asarray(space.high)
    if np.issubdtype(space.dtype, np.floating):
        info = np.finfo(space.dtype)
    elif np.issubdtype(space.dtype, np.integer):
        info = np.iinfo(space.dtype)
    else:
        info = None
    unbounded = bool(np.all(np.isinf(low)) and np.all(np.isinf(high)))
    if not unbounded and info is not None:
        unbounded = bool(np.all(low <= info.min) and np.all(high >= info.max))
    if unbounded:
        return Unbounded(shape=shape, device=device, dtype=dtype)
    if dtype is torch.bool:
        return (
            Binary(shape=shape, device=device, dtype=torch.bool)
            if shape
            else Categorical(2, shape=shape, device=device, dtype=torch.bool)
        )
    return Bounded(torch.as_tensor(low), torch.as_tensor(high), shape=shape, device=device, dtype=dtype)


def space_to_spec(
    space: Any,
    categorical_action_encoding: bool = False,
    device: Any = None,
    remap_state_to_observation: bool = True,
) -> Any:
    """Maps a gymnasium space to a spec (shape ``[]`` batch; expand it for vector envs).

    Args:
        space: a gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple).
        categorical_action_encoding: discrete spaces become ``Categorical``/``MultiCategorical``
            (indices) instead of ``OneHot``/``MultiOneHot``.
        device: the specs' device.
        remap_state_to_observation: rename a Dict's ``"state"`` entry ``"observation"``.

    Examples:
        >>> from gymnasium import spaces
        >>> space_to_spec(spaces.Discrete(3))
        OneHot(shape=(3,), device=cpu, dtype=torch.int64, n=3)
        >>> space_to_spec(spaces.Dict(a=spaces.Discrete(2), b=spaces.Tuple([spaces.MultiBinary(2)])),
        ...               categorical_action_encoding=True).keys(True, True)
        ['a', ('b', '0')]
    """
    kind = _kind(space)
    cat = categorical_action_encoding
    if kind == "Box":
        return _box_spec(space, device)
    if kind == "Discrete":
        if cat:
            return Categorical(int(space.n), shape=(), device=device, dtype=_torch_dtype(space.dtype))
        return OneHot(int(space.n), device=device, dtype=torch.int64)
    if kind == "MultiDiscrete":
        nvec = np.asarray(space.nvec)
        if cat or nvec.ndim != 1:
            return MultiCategorical(torch.as_tensor(nvec), device=device, dtype=_torch_dtype(space.dtype))
        return MultiOneHot([int(k) for k in nvec], device=device, dtype=torch.int64)
    if kind == "MultiBinary":
        return Binary(shape=torch.Size(space.shape), device=device, dtype=_torch_dtype(space.dtype))
    if kind == "Dict":
        return Composite(
            {
                key: space_to_spec(space.spaces[name], cat, device, remap_state_to_observation)
                for key, name in _dict_keys(space, remap_state_to_observation)
            },
            shape=(),
            device=device,
        )
    # Tuple
    return Composite(
        {str(i): space_to_spec(sub, cat, device, remap_state_to_observation) for i, sub in enumerate(space.spaces)},
        shape=(),
        device=device,
    )


# ---------------------------------------------------------------------------------------------- codecs
class SpaceCodec:
    """Converters for one space, built once.

    Attributes:
        spec: the spec of one value (no batch dims).
        read: gymnasium value -> tensor (or TensorDict for Dict/Tuple), zero-copy where possible.
        read_safe: the same, always copying and casting (for envs that reuse buffers, and resets).
        check: whether ``read`` is safe for a value (dtype, strides, writeable); used on the first steps.
        arrays: gymnasium value -> the ndarrays ``read`` would share memory with.
        write: tensor (or TensorDict) -> the gymnasium action.
        replace_rows: ``(batched value, per-env values, env indices) -> batched value`` with those
            rows replaced (SAME_STEP final observations of vector envs).
        entries, entries_safe: Dict/Tuple spaces only (else ``None``): ``read`` / ``read_safe``'s
            top-level ``{key: value}`` before it becomes a TensorDict (the env step builds its own).
    """

    __slots__ = ("arrays", "check", "entries", "entries_safe", "read", "read_safe", "replace_rows", "spec", "write")

    def __init__(
        self,
        spec,
        read,
        read_safe,
        check,
        arrays,
        write,
        replace_rows,
        entries: Callable[[Any], dict] | None = None,
        entries_safe: Callable[[Any], dict] | None = None,
    ) -> None:
        self.spec, self.read, self.read_safe, self.check = spec, read, read_safe, check
        self.entries, self.entries_safe = entries, entries_safe
        self.arrays, self.write, self.replace_rows = arrays, write, replace_rows


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    try:
        return t.numpy()
    except (RuntimeError, TypeError):  # requires grad, or not on the cpu
        return t.detach().cpu().numpy()


def _replace_array_rows(batched: Any, finals: Any, idx: np.ndarray) -> np.ndarray:
    out = np.array(batched, copy=True)
    for i in idx:
        out[i] = finals[i]
    return out


def _no_arrays(x: Any) -> tuple:
    return ()


def _always(x: Any) -> bool:
    return True


def make_codec(
    space: Any,
    *,
    categorical_action_encoding: bool = False,
    batch_size: torch.Size | None = None,
    device: Any = None,
    remap_state_to_observation: bool = True,
) -> SpaceCodec:
    """The converters of ``space`` for an env with ``batch_size`` (``[N]`` for a vector env).

    ``space`` is the space of one env (``single_observation_space`` for vector envs); values
    carry the batch dims in front.

    Examples:
        >>> import numpy as np, torch
        >>> from gymnasium import spaces
        >>> codec = make_codec(spaces.Discrete(3, start=1))
        >>> codec.read(2).tolist(), codec.write(torch.tensor([0, 0, 1]))
        ([0, 1, 0], 3)
    """
    batch_size = torch.Size(batch_size if batch_size is not None else ())
    batched = len(batch_size) > 0
    kind = _kind(space)
    cat = categorical_action_encoding
    spec = space_to_spec(space, cat, device, remap_state_to_observation)
    if kind in ("Dict", "Tuple"):
        return _composite_codec(space, kind, spec, cat, batch_size, device, remap_state_to_observation)

    if kind == "Discrete":
        start, n = int(space.start), int(space.n)
        np_index = np.int64

        def index(x: Any) -> np.ndarray:
            idx = np.asarray(x, dtype=np_index)
            return np.asarray(idx - start) if start else idx

        if cat:

            def read(x: Any) -> torch.Tensor:
                return _from_numpy(np.asarray(index(x), dtype=space.dtype))

            if batched:

                def write(t: torch.Tensor) -> Any:
                    a = _to_numpy(t)
                    return a + start if start else a
            else:

                def write(t: torch.Tensor) -> Any:
                    return int(t) + start
        else:

            def read(x: Any) -> torch.Tensor:
                return torch.nn.functional.one_hot(_from_numpy(index(x)), n)

            if batched:

                def write(t: torch.Tensor) -> Any:
                    a = _to_numpy(t).argmax(-1)
                    return a + start if start else a
            else:

                def write(t: torch.Tensor) -> Any:
                    return int(_to_numpy(t).argmax()) + start

        return SpaceCodec(spec, read, read, _always, _no_arrays, write, _replace_array_rows)

    if kind == "MultiDiscrete" and not isinstance(spec, MultiCategorical):
        nvec = [int(k) for k in np.asarray(space.nvec)]
        start = np.asarray(space.start, dtype=np.int64)
        has_start = bool(np.any(start))
        bounds = np.cumsum([0] + nvec)

        def read(x: Any) -> torch.Tensor:
            idx = np.asarray(x, dtype=np.int64)
            if has_start:
                idx = idx - start
            idx = _from_numpy(idx)
            return torch.cat([torch.nn.functional.one_hot(idx[..., i], k) for i, k in enumerate(nvec)], -1)

        def write(t: torch.Tensor) -> Any:
            a = _to_numpy(t)
            out = np.stack([a[..., bounds[i] : bounds[i + 1]].argmax(-1) for i in range(len(nvec))], -1).astype(
                space.dtype
            )
            return out + start if has_start else out

        return SpaceCodec(spec, read, read, _always, _no_arrays, write, _replace_array_rows)

    # array-valued leaves: Box, MultiBinary, MultiDiscrete (categorical)
    np_dtype = np.dtype(space.dtype)
    shape = tuple(batch_size) + tuple(space.shape)
    start = None
    if kind == "MultiDiscrete":
        start = np.asarray(space.start, dtype=np_dtype)
        if not np.any(start):
            start = None

    if start is None:
        read = _from_numpy  # pyright: ignore[reportAssignmentType]  (its parameter is named ndarray, not x)

        def read_safe(x: Any) -> torch.Tensor:
            return _from_numpy(np.array(x, dtype=np_dtype, copy=True).reshape(shape))

        write = _to_numpy
    else:

        def read(x: Any) -> torch.Tensor:
            return _from_numpy(np.asarray(np.asarray(x, dtype=np_dtype) - start))

        read_safe = read

        def write(t: torch.Tensor) -> Any:
            return _to_numpy(t) + start

    def check(x: Any) -> bool:
        return (
            type(x) is np.ndarray
            and x.dtype == np_dtype
            and x.shape == shape
            and x.flags.writeable
            and all(s >= 0 for s in x.strides)
            and x.dtype.isnative
        )

    def arrays(x: Any) -> tuple:
        return (x,) if type(x) is np.ndarray else ()

    if start is not None:
        check = _always  # read makes a new array anyway
        arrays = _no_arrays
    return SpaceCodec(spec, read, read_safe, check, arrays, write, _replace_array_rows)


def _composite_codec(space, kind, spec, cat, batch_size, device, remap) -> SpaceCodec:
    if kind == "Dict":
        pairs = _dict_keys(space, remap)
        members = [
            (
                key,
                name,
                make_codec(
                    space.spaces[name],
                    categorical_action_encoding=cat,
                    batch_size=batch_size,
                    device=device,
                    remap_state_to_observation=remap,
                ),
            )
            for key, name in pairs
        ]
    else:
        members = [
            (
                str(i),
                i,
                make_codec(
                    sub,
                    categorical_action_encoding=cat,
                    batch_size=batch_size,
                    device=device,
                    remap_state_to_observation=remap,
                ),
            )
            for i, sub in enumerate(space.spaces)
        ]
    readers = tuple((key, name, c.read) for key, name, c in members)
    safe_readers = tuple((key, name, c.read_safe) for key, name, c in members)
    new_td = TensorDict.unchecked

    def entries(x: Any) -> dict:
        return {key: r(x[name]) for key, name, r in readers}

    def entries_safe(x: Any) -> dict:
        return {key: r(x[name]) for key, name, r in safe_readers}

    def read(x: Any) -> TensorDict:
        return new_td(entries(x), batch_size, device)

    def read_safe(x: Any) -> TensorDict:
        return new_td(entries_safe(x), batch_size, device)

    def check(x: Any) -> bool:
        return all(c.check(x[name]) for _, name, c in members)

    def arrays(x: Any) -> tuple:
        return tuple(a for _, name, c in members for a in c.arrays(x[name]))

    if kind == "Dict":

        def write(td: Any) -> Any:
            return {name: c.write(td.get(key)) for key, name, c in members}

        def replace_rows(batched: Any, finals: Any, idx: np.ndarray) -> Any:
            return {
                name: c.replace_rows(batched[name], {i: finals[i][name] for i in idx}, idx) for _, name, c in members
            }
    else:

        def write(td: Any) -> Any:
            return tuple(c.write(td.get(key)) for key, _, c in members)

        def replace_rows(batched: Any, finals: Any, idx: np.ndarray) -> Any:
            return tuple(c.replace_rows(batched[i], {j: finals[j][i] for j in idx}, idx) for _, i, c in members)

    return SpaceCodec(spec, read, read_safe, check, arrays, write, replace_rows, entries, entries_safe)
