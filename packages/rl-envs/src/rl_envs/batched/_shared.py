"""The core SerialEnv and ParallelEnv share: env factories, expanded specs, the preallocated buffer, seeding.

Seeding follows :mod:`tdict.seeding`: the workers are seeded in turn, each with the seed the previous
one's ``set_seed`` returned, so worker ``i`` gets ``seed + i`` when every sub-env has one random
stream, and no two streams share a seed when sub-envs have several.

A batched env of ``num_workers`` sub-envs of batch size ``B`` has batch size ``[num_workers, *B]``.
Its buffer is ``fake_tensordict()`` (every declared key, zero-filled) plus the ``"_reset"`` masks.
A step writes the root inputs into the buffer, lets each sub-env step on its slice, and returns a
copy of the buffer's ``"next"`` entries; a reset does the same with the root outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.specs import Composite
from tdict.validation import check_positive_int

from .._env_keys import _leaf_name, _root_of
from ..env_base import SPEC_NAMES, EnvBase
from ..env_creator import EnvCreator, EnvMetaData
from ._worker import BufferLayout

__all__ = ["BatchedEnvBase"]


def _unique(keys: Sequence) -> tuple:
    out: list = []
    for key in keys:
        if key not in out:
            out.append(key)
    return tuple(out)


def _make_creators(num_workers: int, create_env_fn: Any, create_env_kwargs: Any, owner: str) -> list[EnvCreator]:
    """One EnvCreator per worker; workers with the same factory and kwargs share one (one metadata query)."""
    if isinstance(create_env_fn, (list, tuple)):
        if len(create_env_fn) != num_workers:
            raise ValueError(
                f"{owner}: create_env_fn is a list of {len(create_env_fn)} callables, expected num_workers={num_workers}."
            )
        fns = list(create_env_fn)
    else:
        fns = [create_env_fn] * num_workers
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"{owner}: create_env_fn[{i}] must be callable (a function, an env class or an EnvCreator), got {type(fn).__name__}."
            )
    if create_env_kwargs is None:
        kwargs = [{}] * num_workers
    elif isinstance(create_env_kwargs, dict):
        kwargs = [create_env_kwargs] * num_workers
    elif isinstance(create_env_kwargs, (list, tuple)):
        if len(create_env_kwargs) != num_workers or not all(isinstance(k, dict) for k in create_env_kwargs):
            raise ValueError(
                f"{owner}: create_env_kwargs must be a dict or a list of num_workers={num_workers} dicts, got a list of "
                f"{len(create_env_kwargs)} {sorted({type(k).__name__ for k in create_env_kwargs})}."
            )
        kwargs = list(create_env_kwargs)
    else:
        raise TypeError(
            f"{owner}: create_env_kwargs must be a dict or a list of dicts, got {type(create_env_kwargs).__name__}."
        )
    creators: list[EnvCreator] = []
    for fn, kw in zip(fns, kwargs):
        same = next((c for f, k, c in zip(fns, kwargs, creators) if f is fn and k == kw), None)
        if same is None:
            same = fn if isinstance(fn, EnvCreator) and not kw else EnvCreator(fn, kw)
        creators.append(same)
    return creators


def _structure(spec: Composite) -> list:
    """What must agree between sub-envs: every leaf's key, spec type, shape and dtype."""
    return sorted(
        ((str(key), type(leaf).__name__, tuple(leaf.shape), leaf.dtype) for key, leaf in spec.items(True, True)),
        key=lambda entry: entry[0],
    )


def _check_same_specs(creators: list[EnvCreator], owner: str) -> EnvMetaData:
    """Worker 0's metadata, after checking that every sub-env has its batch size and spec structure
    (the values in the specs, such as bounds, may differ: the batched specs stack them)."""
    meta = creators[0].meta_data
    seen = {id(creators[0])}
    for i, creator in enumerate(creators):
        if id(creator) in seen:
            continue
        seen.add(id(creator))
        other = creator.meta_data
        if other.batch_size != meta.batch_size:
            raise ValueError(
                f"{owner}: the env of worker {i} ({other.env_str}) has batch size {list(other.batch_size)}, worker 0's "
                f"({meta.env_str}) {list(meta.batch_size)}; every sub-env must have the same batch size."
            )
        for name in SPEC_NAMES:
            if _structure(other.specs[name]) != _structure(meta.specs[name]):
                raise ValueError(
                    f"{owner}: the env of worker {i} ({other.env_str}) has a different {name} than worker 0's "
                    f"({meta.env_str}): every sub-env must have the same keys, spec types, shapes and dtypes."
                )
    return meta


def _stack_specs(specs: list[Composite]) -> Composite:
    """The batched spec of sub-envs whose specs have the same structure: an expand when they are equal,
    else a leaf-wise stack (per-worker bounds and the like kept)."""
    first = specs[0]
    if all(spec == first for spec in specs[1:]):
        return first.expand(len(specs), *first.shape)
    entries = {}
    for key in first.keys():
        members = [spec[key] for spec in specs]
        entries[key] = _stack_specs(members) if isinstance(members[0], Composite) else torch.stack(members, 0)
    return Composite(entries, shape=(len(specs), *first.shape), device=first.device)


def _batched_device(owner: str, device: Any, sub_device: torch.device | None) -> torch.device | None:
    """The batched env's device: its sub-envs' (``device`` may only restate it, or pin device-free
    sub-envs, whose tensors are CPU tensors, to the CPU)."""
    if device is None:
        return sub_device
    device = torch.device(device)
    if device == sub_device or (sub_device is None and device.type == "cpu"):
        return device
    raise ValueError(
        f"{owner}: device={device} differs from the sub-envs' device {sub_device}; build the sub-envs on {device} "
        "(create_env_fn), or move the data with a DeviceCastTransform around the batched env."
    )


class BatchedEnvBase(EnvBase):
    """``num_workers`` copies of an env run as one env of batch size ``[num_workers, *sub_batch]``.

    Subclasses implement how the sub-envs run: ``_start_runners``, ``_run_step``, ``_run_reset``,
    ``_run_seed`` and ``_stop_runners``.
    """

    # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``); the buffer views by ``start``
    _creators: list[EnvCreator]
    _meta_data: EnvMetaData
    _buffer: TensorDictBase | None
    _layout: BufferLayout | None
    _step_dests: tuple
    _reset_dests: tuple
    _mask_dests: tuple
    _next_views: dict
    _root_views: dict

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]] | EnvCreator,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        serial_for_single: bool = False,
        device: Any = None,
        use_buffers: bool = True,
    ) -> None:
        owner = type(self).__name__
        check_positive_int(owner, "num_workers", num_workers)
        if not use_buffers:
            raise ValueError(
                f"{owner}: use_buffers=False is not supported; the sub-envs always exchange data through "
                "preallocated buffers."
            )
        creators = _make_creators(num_workers, create_env_fn, create_env_kwargs, owner)
        meta = _check_same_specs(creators, owner)
        super().__init__(device=_batched_device(owner, device, meta.device), batch_size=(num_workers, *meta.batch_size))
        self.__dict__["_creators"] = creators
        self.__dict__["_meta_data"] = meta
        self.num_workers = num_workers
        self.serial_for_single = bool(serial_for_single)
        for name in SPEC_NAMES:
            setattr(self, name, _stack_specs([creator.meta_data.specs[name] for creator in creators]))
        self.__dict__["_buffer"] = None
        self.__dict__["_layout"] = None

    # ------------------------------------------------------------------ attributes
    @property
    def meta_data(self) -> EnvMetaData:
        """The sub-env's metadata (batch size, specs, a fake step), queried once at construction."""
        return self._meta_data

    @property
    def create_env_fn(self) -> list:
        """The factory of each worker (one per worker)."""
        return [c.create_env_fn for c in self._creators]

    @property
    def create_env_kwargs(self) -> list:
        """The keyword arguments of each worker's factory (one dict per worker)."""
        return [dict(c.create_env_kwargs) for c in self._creators]

    @property
    def batch_locked(self) -> bool:
        """Batched envs take exactly their batch size (their buffers are preallocated)."""
        return True

    @property
    def is_closed(self) -> bool:
        """True until the sub-envs are started (lazily, or by :meth:`start`) and after :meth:`close`."""
        return self._buffer is None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, env={self._meta_data.env_str}, "
            f"batch_size={list(self.batch_size)}, device={self.device})"
        )

    def to(self, *args: Any, **kwargs: Any) -> BatchedEnvBase:
        """Returns ``self`` when the device is unchanged (the sub-envs cannot be moved from here).

        Raises:
            NotImplementedError: a device other than the env's (build the sub-envs there instead).
        """
        device = torch._C._nn._parse_to(*args, **kwargs)[0]  # pyright: ignore[reportAttributeAccessIssue]
        if device is None or device == self.device or (self.device is None and device.type == "cpu"):
            return self
        raise NotImplementedError(
            f"{type(self).__name__}.to({device}): the sub-envs (on {self.device or 'no fixed device'}) cannot be moved from the parent; "
            f"make create_env_fn build them on the device you want."
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Builds the sub-envs and the buffers now (otherwise done on the first reset/step/set_seed)."""
        if self._buffer is not None:
            return
        layout, buffer = self._make_buffer()
        try:
            self._start_runners(buffer, layout)
        except BaseException:
            self._stop_runners()
            raise
        self.__dict__["_layout"] = layout
        self.__dict__["_buffer"] = buffer
        root_in = buffer.exclude("next")
        keys = self._keys()
        step_in = _unique([*keys.action_keys, *keys.state_keys, *keys.observation_keys])
        self.__dict__["_step_dests"] = tuple(
            (k, root_in.get(k)) for k in step_in if isinstance(root_in.get(k), torch.Tensor)
        )
        self.__dict__["_reset_dests"] = tuple(
            (k, root_in.get(k)) for k in keys.state_keys if isinstance(root_in.get(k), torch.Tensor)
        )
        self.__dict__["_mask_dests"] = tuple((k, buffer.get(k)) for k in layout.mask_keys)
        self.__dict__["_next_views"] = {}
        self.__dict__["_root_views"] = {}

    def close(self, *, raise_if_closed: bool = False) -> None:
        """Closes the sub-envs; the next reset/step starts fresh ones.

        Idempotent, unless ``raise_if_closed=True`` (TorchRL's default): then closing an env whose
        sub-envs are not running raises ``RuntimeError``.
        """
        if raise_if_closed and self.is_closed:
            raise RuntimeError(f"{type(self).__name__}.close: the env is already closed (or was never started).")
        try:
            self._stop_runners()
        finally:
            self.__dict__["_buffer"] = None
            self.__dict__["_next_views"] = {}
            self.__dict__["_root_views"] = {}
            self.__dict__["_step_dests"] = ()
            self.__dict__["_reset_dests"] = ()
            self.__dict__["_mask_dests"] = ()

    def _make_buffer(self) -> tuple[BufferLayout, TensorDictBase]:
        keys = self._keys()
        buffer = self.fake_tensordict().clone()  # clone: expanded spec bounds may have left stride-0 leaves
        for mask_key, root in zip(keys.reset_keys, keys.done_roots):
            done_keys = [k for k in keys.done_keys if _root_of(k) == root]
            done_key = next((k for k in done_keys if _leaf_name(k) == "done"), done_keys[0])
            buffer.set(mask_key, torch.zeros(buffer.get(done_key).shape, dtype=torch.bool, device=self.device))
        next_keys = tuple(buffer.get("next").keys(True, True))
        reset_out = _unique([*keys.observation_keys, *keys.done_keys, *keys.state_keys])
        return BufferLayout(next_keys, reset_out, tuple(keys.reset_keys)), buffer

    # ------------------------------------------------------------------ the EnvBase hooks
    @staticmethod
    def _write_inputs(tensordict: TensorDictBase, dests: tuple) -> tuple:
        """Copies the entries of ``tensordict`` the sub-envs read into the buffer; returns the keys present."""
        present = []
        for key, dest in dests:
            value = tensordict.get(key, None)
            if value is None:
                continue
            if value.shape != dest.shape:
                raise ValueError(
                    f"entry {key!r}: expected shape {list(dest.shape)} (the batched env's batch size and the spec), "
                    f"got {list(value.shape)}."
                )
            dest.copy_(value)
            present.append(key)
        return tuple(present)

    def _output(self, written: tuple, where: str) -> TensorDictBase:
        cache = self._next_views if where == "next" else self._root_views
        view = cache.get(written)
        if view is None:
            buffer = self._buffer
            assert buffer is not None  # started by _step/_reset
            source = buffer.get("next") if where == "next" else buffer
            view = cache[written] = source.select(*written)
        return view.clone()  # the buffer is overwritten by the next call

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._buffer is None:
            self.start()
        present = self._write_inputs(tensordict, self._step_dests)
        return self._output(self._run_step(present), "next")

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if self._buffer is None:
            self.start()
        present: tuple = ()
        masks = [None] * len(self._mask_dests)
        if tensordict is not None:
            masks = [tensordict.get(key, None) for key, _ in self._mask_dests]
            for (key, dest), mask in zip(self._mask_dests, masks):  # checked before anything is written
                if mask is not None and mask.numel() != dest.numel():
                    raise ValueError(
                        f"reset: {key!r} must have shape {list(dest.shape)} (one flag per sub-env), got {list(mask.shape)}."
                    )
            present = self._write_inputs(tensordict, self._reset_dests)
        with_mask = any(m is not None for m in masks)
        if with_mask:
            need = torch.zeros(self.num_workers, dtype=torch.bool, device=self.device)
            for (key, dest), mask in zip(self._mask_dests, masks):
                if mask is None:
                    dest.zero_()
                else:
                    dest.copy_(mask.reshape(dest.shape))
                need |= dest.reshape(self.num_workers, -1).any(-1)
            need_list = need.tolist()
        else:
            need_list = [True] * self.num_workers
        written = self._run_reset(need_list, present, with_mask, kwargs)
        if not written:
            return TensorDict.unchecked({}, self.batch_size, self.device)
        return self._output(written, "root")

    def _seed_streams(self, seed: int | None) -> int | None:
        """Seeds the workers in turn, each with the seed the previous one's ``set_seed`` returned.

        Worker ``i`` gets ``seed + i`` and ``seed + num_workers`` is returned when every sub-env has one
        random stream (``set_seed``; ``seed=None`` seeds every worker randomly).
        """
        if self._buffer is None:
            self.start()
        return self._run_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        self._seed_streams(seed)

    # ------------------------------------------------------------------ how the sub-envs run (subclasses)
    def _start_runners(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _stop_runners(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_step(self, keys: tuple) -> tuple:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_reset(self, need: list, keys: tuple, with_mask: bool, kwargs: dict) -> tuple:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_seed(self, seed: int | None) -> int | None:
        """Seeds the sub-envs in turn (:func:`tdict.seeding.chain_seeds`); returns the seed after the last."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")
