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
from typing import Any, cast

import torch
from tdict import TensorDict, TensorDictBase, is_leaf_nontensor, lazy_stack
from tdict.errors import InvalidArgumentError
from tdict.specs import Composite
from tdict.validation import check_positive_int

from .._env_keys import _leaf_name, _root_of
from ..env_base import SPEC_NAMES, EnvBase
from ..env_creator import EnvCreator, EnvMetaData
from ._forward import SubEnvAttribute
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
            raise InvalidArgumentError(
                f"{owner}: len(create_env_fn) and num_workers mismatch: a list of {len(create_env_fn)} callables, "
                f"num_workers={num_workers}."
            )
        fns = list(create_env_fn)
    else:
        fns = [create_env_fn] * num_workers
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"{owner}: create_env_fn[{i}] must be callable (a function, an env class or an EnvCreator), got {type(fn).__name__}."
            )
    kwargs = _per_worker_kwargs(num_workers, create_env_kwargs, owner, "create_env_kwargs")
    creators: list[EnvCreator] = []
    for fn, kw in zip(fns, kwargs):
        same = next((c for f, k, c in zip(fns, kwargs, creators) if f is fn and k == kw), None)
        if same is None:
            same = fn if isinstance(fn, EnvCreator) and not kw else EnvCreator(fn, kw)
        creators.append(same)
    return creators


def _per_worker_kwargs(num_workers: int, value: Any, owner: str, name: str) -> list[dict]:
    """``value`` (None, a dict for every worker, or one dict per worker) as one dict per worker."""
    if value is None:
        return [{}] * num_workers
    if isinstance(value, dict):
        return [value] * num_workers
    if isinstance(value, (list, tuple)):
        if len(value) != num_workers:
            raise InvalidArgumentError(
                f"{owner}: len({name}) and num_workers mismatch: a list of {len(value)} dicts, num_workers={num_workers}."
            )
        if not all(isinstance(k, dict) for k in value):
            raise TypeError(f"{owner}: {name} must hold dicts, got {sorted({type(k).__name__ for k in value})}.")
        return list(value)
    raise TypeError(f"{owner}: {name} must be a dict or a list of dicts, got {type(value).__name__}.")


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


def _flagged_workers(masks: list, num_workers: int) -> list[bool]:
    """Per worker, whether any of ``masks`` (``[num_workers, ...]`` bool tensors, or None) flags it;
    every worker when no mask is given."""
    given = [m for m in masks if m is not None]
    if not given:
        return [True] * num_workers
    flags = given[0].reshape(num_workers, -1).any(-1)
    for m in given[1:]:
        flags = flags | m.reshape(num_workers, -1).any(-1)
    return flags.tolist()


def _non_tensor_rows(tensordict: TensorDictBase | None, keys: tuple, num_workers: int) -> list | None:
    """Each worker's row of the non-tensor entries ``keys`` of ``tensordict`` (None: none given)."""
    if tensordict is None or not keys:
        return None
    rows: list = [{} for _ in range(num_workers)]
    for key in keys:
        value = tensordict.get(key, None)
        if value is not None:
            for row, part in zip(rows, value.unbind(0)):
                row[key] = part
    return rows if rows[0] else None


def _set_non_tensor(out: TensorDictBase, rows: list, keys: tuple) -> None:
    """Sets the non-tensor entries ``keys`` of ``out`` from each worker's values."""
    for key in keys:
        values = [row.get(key) for row in rows]
        if all(v is not None for v in values):
            out.set(key, torch.stack(values, 0))


def _stack_rows(rows: list) -> TensorDictBase:
    """The sub-envs' outputs as one TensorDict of the batched env's batch size: a dense stack, or a lazy
    one where the rows differ in keys or shapes (non-tensor entries stack either way)."""
    first = rows[0]
    keys = set(first.keys(True, True))
    same = all(
        set(r.keys(True, True)) == keys
        and all(
            not isinstance(v, torch.Tensor) or v.shape == first.get(k).shape for k, v in ((k, r.get(k)) for k in keys)
        )
        for r in rows[1:]
    )
    return cast(TensorDictBase, torch.stack(rows, 0)) if same else lazy_stack(rows, 0)


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


def _view_positions(item: Any, num_workers: int, owner: str) -> list[int]:
    """The worker positions ``item`` (an int, a slice, or a 1-d sequence of ints: a list, a tensor, a
    numpy array) selects, in order."""
    dtype = getattr(item, "dtype", None)
    if isinstance(item, bool) or dtype is torch.bool or str(dtype) == "bool":
        raise NotImplementedError(
            f"{owner}[...]: Boolean masks are not supported to index a batched env; pass worker indices or a slice."
        )
    if isinstance(item, slice):
        return list(range(num_workers))[item]
    if hasattr(item, "tolist"):  # tensors, numpy arrays and numpy integers
        item = item.tolist()
    positions = [item] if isinstance(item, int) else item
    if not isinstance(positions, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in positions
    ):
        raise TypeError(f"{owner}[...]: expected an int, a slice or a sequence of ints, got {item!r}.")
    bad = [i for i in positions if not -num_workers <= i < num_workers]
    if bad:
        raise IndexError(f"{owner}[...]: indices {bad} out of range for {num_workers} workers.")
    return [i % num_workers for i in positions]


def _as_slice(ids: list[int], owner: str) -> slice:
    """The slice of the buffer's first dim holding workers ``ids`` (evenly spaced, increasing)."""
    if not ids:
        raise IndexError(f"{owner}[...]: the index selects no worker.")
    step = ids[1] - ids[0] if len(ids) > 1 else 1
    if step < 1 or any(b - a != step for a, b in zip(ids, ids[1:])):
        raise NotImplementedError(
            f"{owner}[...]: workers {ids} are not evenly spaced and increasing; an indexed batched env is a view "
            "of the parent's buffer, so it takes a slice or indices such as [0, 2] or [1, 3]."
        )
    return slice(ids[0], ids[-1] + 1, step)


class BatchedEnvBase(EnvBase):
    """``num_workers`` copies of an env run as one env of batch size ``[num_workers, *sub_batch]``.

    ``env[index]`` (an int, a slice, or evenly spaced worker indices) is a live view of some of the
    workers: an env of the same class whose steps and resets run only those sub-envs, in place, on the
    parent's workers and buffer. Closing the view leaves the parent running; closing the parent makes the
    view raise. Public attributes and methods of the sub-envs that the batched env lacks are reached
    through it (:class:`~rl_envs.batched._forward.SubEnvAttribute`): ``env.count`` iterates over each
    sub-env's ``count``, ``env.custom_method()`` returns each sub-env's result.

    Subclasses implement how the sub-envs run: ``_start_runners``, ``_run_step``, ``_run_reset``,
    ``_run_seed``, ``_stop_runners``, ``_sub_env_values`` and ``_sub_env_call``; they read the workers
    they drive from ``self._ids`` (all of them, or a view's) and the shared running state from
    ``self._owner`` (the env the view was taken from, or the env itself).
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
    _ids: tuple  # the workers this env drives (positions in the owner's buffer)
    _parent: BatchedEnvBase | None  # the env a view was taken from (None: not a view)
    _view_closed: bool
    _started: int  # how many times the workers were started (a view checks it to see its parent's restarts)

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
        creators = _make_creators(num_workers, create_env_fn, create_env_kwargs, owner)
        meta = _check_same_specs(creators, owner)
        super().__init__(device=_batched_device(owner, device, meta.device), batch_size=(num_workers, *meta.batch_size))
        self.num_workers = num_workers
        self.serial_for_single = bool(serial_for_single)
        self._use_creators(creators, meta)
        self.__dict__.update(
            _buffer=None, _layout=None, _ids=tuple(range(num_workers)), _parent=None, _view_closed=False, _started=0
        )
        self.__dict__["_use_buffers"] = bool(use_buffers)

    def _use_creators(self, creators: list[EnvCreator], meta: EnvMetaData) -> None:
        self.__dict__["_creators"] = creators
        self.__dict__["_meta_data"] = meta
        for name in SPEC_NAMES:
            setattr(self, name, _stack_specs([creator.meta_data.specs[name] for creator in creators]))

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
    def _single_task(self) -> bool:
        """Whether every worker runs the same factory with the same arguments."""
        return len({id(c) for c in self._creators}) == 1

    @property
    def _owner(self) -> BatchedEnvBase:
        return self._parent if self._parent is not None else self

    @property
    def batch_locked(self) -> bool:
        """Batched envs take exactly their batch size (their buffers are preallocated)."""
        return True

    @property
    def is_closed(self) -> bool:
        """True until the sub-envs are started (lazily, or by :meth:`start`) and after :meth:`close`; a view
        is closed once it or its parent is."""
        parent = self._parent
        if parent is None:
            return self._buffer is None
        return self._view_closed or parent._buffer is None or parent._started != self._started

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, env={self._meta_data.env_str}, "
            f"batch_size={list(self.batch_size)}, device={self.device})"
        )

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            # a public attribute of the running sub-envs (the first one is asked whether it has it)
            if name.startswith("_") or "_parent" not in self.__dict__ or self.is_closed:
                raise
            if not self._sub_env_has(name):
                raise
            return SubEnvAttribute(self, (name,))

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

    def update_kwargs(self, kwargs: dict | Sequence[dict]) -> None:
        """Merges ``kwargs`` (a dict for every worker, or one dict per worker) into the factories'
        keyword arguments; the sub-envs are built with them when the env next starts.

        Raises:
            RuntimeError: the env is running (close it first), or a list whose length is not ``num_workers``.
        """
        owner = type(self).__name__
        if not self.is_closed or self._parent is not None:
            raise RuntimeError(
                f"{owner}.update_kwargs: the sub-envs are running{' (this is a view of them)' if self._parent else ''}; "
                "close the env first, the new arguments apply when it starts again."
            )
        per_worker = _per_worker_kwargs(self.num_workers, kwargs, owner, "kwargs")
        variants: dict = {}  # one new creator per (old creator, kwargs), so that equal workers share one
        creators = []
        for creator, kw in zip(self._creators, per_worker):
            key = (id(creator), tuple(sorted(kw.items(), key=lambda item: item[0])))
            try:
                variant = variants.get(key)
            except TypeError:  # unhashable values: no sharing
                variant = None
            if variant is None:
                variant = creator.make_variant(**kw)
                try:
                    variants[key] = variant
                except TypeError:
                    pass
            creators.append(variant)
        meta = _check_same_specs(creators, owner)
        if meta.batch_size != self._meta_data.batch_size:
            raise ValueError(
                f"{owner}.update_kwargs: the sub-envs would have batch size {list(meta.batch_size)}, not "
                f"{list(self._meta_data.batch_size)}; build a new batched env instead."
            )
        self._use_creators(creators, meta)

    # ------------------------------------------------------------------ indexed views
    def __getitem__(self, item: Any) -> BatchedEnvBase:
        """A live view of the workers ``item`` selects (see the class docstring)."""
        owner = type(self).__name__
        positions = _view_positions(item, self.num_workers, owner)
        ids = [self._ids[i] for i in positions]
        _as_slice(ids, owner)  # refused here rather than at the first step
        if self._parent is None:
            self.start()
        return self._view(ids)

    def __setitem__(self, item: Any, value: Any) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}[...] = env: snapshot writeback of an env into a worker is not supported; "
            "set the state through reset(tensordict) instead."
        )

    def _view(self, ids: list[int]) -> BatchedEnvBase:
        """A view of the owner's workers ``ids``: an env of this class built from their factories (their
        metadata is known, nothing is built) that runs on the owner's workers and buffer."""
        owner = self._owner
        creators = [owner._creators[i] for i in ids]
        view = type(self)._view_of(len(ids), creators, owner.device, owner._use_buffers)
        view.__dict__.update(_ids=tuple(ids), _parent=owner, _started=owner._started)
        return view

    @classmethod
    def _view_of(cls, num_workers: int, creators: list, device: Any, use_buffers: bool) -> BatchedEnvBase:
        return cls(num_workers, creators, device=device, use_buffers=use_buffers)

    def _start_view(self) -> None:
        parent = self._parent
        assert parent is not None
        if self._view_closed:
            raise RuntimeError(f"{type(self).__name__}: this closed indexed env cannot run; index the parent again.")
        if parent._buffer is None or parent._started != self._started:
            raise RuntimeError(
                f"{type(self).__name__}: the parent environment has been closed; index it again once it runs."
            )
        if self._buffer is None:
            layout = parent._layout
            assert parent._buffer is not None and layout is not None
            self._bind(parent._buffer[_as_slice(list(self._ids), type(self).__name__)], layout)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Builds the sub-envs and the buffers now (otherwise done on the first reset/step/set_seed)."""
        if self._parent is not None:
            return self._start_view()
        if self._buffer is not None:
            return
        layout, buffer = self._make_buffer()
        try:
            self._start_runners(buffer, layout)
        except BaseException:
            self._stop_runners()
            raise
        self.__dict__["_started"] += 1
        self._bind(buffer, layout)

    def _bind(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        """Uses ``buffer`` (the whole buffer, or a view's slice of it): the destinations of the inputs."""
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
        self.__dict__["_step_keys"] = step_in

        def non_tensor(source: TensorDictBase, keys: Sequence) -> tuple:
            return tuple(k for k in keys if not isinstance(source.get(k, None), (torch.Tensor, type(None))))

        self.__dict__["_nt_step_in"] = non_tensor(root_in, step_in)
        self.__dict__["_nt_reset_in"] = non_tensor(root_in, keys.state_keys)
        self.__dict__["_nt_next"] = non_tensor(buffer.get("next"), layout.next_keys)
        self.__dict__["_nt_reset_out"] = non_tensor(root_in, layout.reset_out_keys)
        if self._parent is None:
            self.__dict__["_nt_current"] = [{} for _ in range(self.num_workers)]
            self.__dict__["_last_rows"] = [None] * self.num_workers  # use_buffers=False: each worker's last output
        self.__dict__["_next_views"] = {}
        self.__dict__["_root_views"] = {}

    def close(self, *, raise_if_closed: bool = False) -> None:
        """Closes the sub-envs; the next reset/step starts fresh ones (a view: only the view is closed,
        for good, and the parent keeps running).

        Idempotent, unless ``raise_if_closed=True`` (TorchRL's default): then closing an env whose
        sub-envs are not running raises ``RuntimeError``.
        """
        if raise_if_closed and self.is_closed:
            raise RuntimeError(f"{type(self).__name__}.close: the env is already closed (or was never started).")
        try:
            if self._parent is None:
                self._stop_runners()
            else:
                self.__dict__["_view_closed"] = True
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
        next_keys = _unique([*keys.observation_keys, *keys.reward_keys, *keys.done_keys])
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
        if self._buffer is None or self._parent is not None:
            self.start()
        partial = tensordict.get("_step", None)
        if partial is not None:
            flags = _flagged_workers([partial], self.num_workers)
            if not all(flags):
                return self._partial_step(tensordict, [i for i, flag in enumerate(flags) if flag])
        if not self._use_buffers:
            parts = tensordict.select(*self._step_keys, strict=False).unbind(0)
            rows = self._run_step_tds(list(parts))
            last = self._owner._last_rows
            for i, row in zip(self._ids, rows):
                last[i] = row
            return _stack_rows(rows)
        present = self._write_inputs(tensordict, self._step_dests)
        if not self._nt_step_in and not self._nt_next:
            return self._output(self._run_step(present, None)[0], "next")
        # non-tensor entries have no buffer: they travel with the commands and replies
        written, non_tensor = self._run_step(present, _non_tensor_rows(tensordict, self._nt_step_in, self.num_workers))
        out = self._output(written, "next")
        _set_non_tensor(out, non_tensor, self._nt_next)
        current = self._owner._nt_current
        for i, values in zip(self._ids, non_tensor):  # what the next reset leaves as it is
            current[i] = {**current[i], **{k: v for k, v in values.items() if k in self._nt_reset_out}}
        return out

    def _partial_step(self, tensordict: TensorDictBase, positions: list) -> TensorDictBase:
        """A step of the workers at ``positions`` only (TorchRL's ``"_step"`` mask): the others' next
        entries carry their root values over (rewards zero), and they do not step."""
        rows = list(self._carried_next(tensordict).unbind(0))
        if positions:
            if self._use_buffers:
                present = self._write_inputs(tensordict, self._step_dests)
                extras = _non_tensor_rows(tensordict, self._nt_step_in, self.num_workers)
                written, non_tensor = self._run_step(present, extras, positions)
                out = self._output(written, "next")
                for p, extra in zip(positions, non_tensor):
                    rows[p] = out[p].update(extra) if extra else out[p]
            else:
                parts = tensordict.select(*self._step_keys, strict=False).unbind(0)
                for p, row in zip(positions, self._run_step_tds([parts[p] for p in positions], positions)):
                    rows[p] = row
        return _stack_rows(rows)

    def _carried_next(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The next entries of a worker that does not step: its root values where the root has the key
        (observations, done flags), zeros elsewhere (rewards)."""
        carried = self.fake_tensordict().get("next").clone()
        for key in carried.keys(True, True, is_leaf_nontensor):
            value = tensordict.get(key, None)
            if value is not None:
                carried.set(key, value.clone() if isinstance(value, torch.Tensor) else value)
        return carried

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if self._buffer is None or self._parent is not None:
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
        if not self._use_buffers:
            return self._reset_unbuffered(tensordict, masks, kwargs)
        if tensordict is not None:
            present = self._write_inputs(tensordict, self._reset_dests)
        with_mask = any(m is not None for m in masks)
        if with_mask:
            for (key, dest), mask in zip(self._mask_dests, masks):
                if mask is None:
                    dest.zero_()
                else:
                    dest.copy_(mask.reshape(dest.shape))
        need_list = _flagged_workers(masks, self.num_workers)
        extras = _non_tensor_rows(tensordict, self._nt_reset_in, self.num_workers)
        written, non_tensor = self._run_reset(need_list, present, with_mask, kwargs, extras)
        if not written and not self._nt_reset_out:
            return TensorDict.unchecked({}, self.batch_size, self.device)
        out = self._output(written, "root")
        if self._nt_reset_out:
            current = self._owner._nt_current
            for i, values in zip(self._ids, non_tensor):  # workers not reset report nothing: their last values
                if values is not None:
                    current[i] = {**current[i], **values}
            _set_non_tensor(out, [current[i] for i in self._ids], self._nt_reset_out)
        return out

    def _reset_unbuffered(self, tensordict: TensorDictBase | None, masks: list, kwargs: dict) -> TensorDictBase:
        """Resets the workers whose mask is set (all without masks), each with its row of ``tensordict``;
        the rows of the others hold their last outputs (what ``EnvBase.reset`` keeps of them where the
        input lacks an entry)."""
        n = self.num_workers
        need = _flagged_workers(masks, n)
        rows: list = [None] * n
        keys = self._keys()
        inputs = None
        if tensordict is not None:
            wanted = [*keys.state_keys, *keys.reset_keys]
            inputs = tensordict.select(*wanted, strict=False).unbind(0)
        chosen = [i for i in range(n) if need[i]]
        outs = self._run_reset_tds(chosen, [None if inputs is None else inputs[i] for i in chosen], kwargs)
        if not chosen:
            return TensorDict.unchecked({}, self.batch_size, self.device)
        last = self._owner._last_rows
        for i, out in zip(chosen, outs):
            rows[i] = last[self._ids[i]] = out
        for i in range(n):  # the workers not reset: their last values, in the structure of a reset row
            if rows[i] is None:
                rows[i] = outs[0].clone()
                previous = last[self._ids[i]]
                if previous is not None:
                    rows[i].update(previous.select(*rows[i].keys(True, True, is_leaf_nontensor), strict=False))
        return _stack_rows(rows)

    def _seed_streams(self, seed: int | None) -> int | None:
        """Seeds the workers in turn, each with the seed the previous one's ``set_seed`` returned.

        Worker ``i`` gets ``seed + i`` and ``seed + num_workers`` is returned when every sub-env has one
        random stream (``set_seed``; ``seed=None`` seeds every worker randomly).
        """
        if self._buffer is None or self._parent is not None:
            self.start()
        return self._run_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        self._seed_streams(seed)

    # ------------------------------------------------------------------ how the sub-envs run (subclasses)
    def _start_runners(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _stop_runners(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_step(self, keys: tuple, extras: list | None, positions: list | None = None) -> tuple[tuple, list]:
        """Steps the sub-envs (those at ``positions`` of this env's, or all) on the buffer's root entries
        ``keys`` and each worker's non-tensor inputs ``extras``; returns the ``"next"`` keys written and
        the non-tensor outputs of each worker stepped."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_reset(self, need: list, keys: tuple, with_mask: bool, kwargs: dict, extras: list | None) -> tuple:
        """Resets the workers flagged in ``need``; returns the root keys written and each worker's
        non-tensor outputs (``None`` for workers not reset)."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_seed(self, seed: int | None) -> int | None:
        """Seeds the sub-envs in turn (:func:`tdict.seeding.chain_seeds`); returns the seed after the last."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_step_tds(self, parts: list, positions: list | None = None) -> list:
        """``use_buffers=False``: steps each sub-env this env drives (or those at ``positions``) on its
        row; the ``_step`` outputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _run_reset_tds(self, positions: list, parts: list, kwargs: dict) -> list:
        """``use_buffers=False``: resets the sub-envs at ``positions`` (of this env's) with ``parts``."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _sub_env_has(self, name: str) -> bool:
        """Whether the (first) sub-env has the attribute ``name``."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _sub_env_values(self, path: tuple) -> list:
        """The attribute ``path`` of each sub-env this env drives, in worker order."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")

    def _sub_env_call(self, path: tuple, args: tuple, kwargs: dict) -> list:
        """Calls the method ``path`` of each sub-env this env drives; the results in worker order."""
        raise NotImplementedError(f"{type(self).__name__} must implement how its sub-envs run.")
