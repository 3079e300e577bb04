"""Transform and Compose: key-mapped changes applied on the way out of an env (and back in, for inverses)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

import torch
from torch import nn
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.seeding import chain_seeds
from tdict.specs import Composite

if TYPE_CHECKING:
    from .transformed_env import TransformedEnv

__all__ = ["Transform", "Compose"]


def _key_list(keys: NestedKey | Sequence[NestedKey] | None) -> list:
    if keys is None:
        return []
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


class Transform(nn.Module):
    """Base of all transforms: maps ``in_keys`` to ``out_keys`` on env outputs, ``out_keys_inv`` back to
    ``in_keys_inv`` on env inputs, and keeps the env's specs truthful.

    Subclasses usually override :meth:`_apply_transform` (a tensor-to-tensor function applied to each
    key) and the spec methods; stateful transforms override :meth:`_reset` and :meth:`_step`.

    Where a transform is used:

    - in a :class:`~rl_envs.TransformedEnv`: ``_reset(td, td_reset)`` on reset outputs, ``_step(td,
      next_td)`` on step outputs, ``_inv_call(td)`` on the input of each step (actions);
    - on a plain TensorDict or a replay-buffer sample: ``transform(td)`` (``forward``) and ``inv(td)``.

    Args:
        in_keys: the entries read by the forward transform.
        out_keys: where the results are written (defaults to ``in_keys``).
        in_keys_inv: the entries the inner env reads (written by the inverse transform).
        out_keys_inv: the entries the caller provides (read by the inverse transform; defaults to
            ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> class Double(Transform):
        ...     def _apply_transform(self, x):
        ...         return x * 2
        >>> Double(in_keys=["obs"], out_keys=["obs2"])(TensorDict(obs=torch.ones(2)))["obs2"].tolist()
        [2.0, 2.0]
    """

    invertible = False
    # set through ``self.__dict__`` (so that nn.Module's ``__setattr__`` is bypassed)
    _container: Any
    _missing_tolerance: bool

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self.in_keys = in_keys
        self.out_keys = out_keys
        self.in_keys_inv = in_keys_inv
        self.out_keys_inv = out_keys_inv
        self.__dict__["_container"] = None
        self.__dict__["_missing_tolerance"] = False

    @property
    def resumable(self) -> bool:
        """Whether the transform keeps no per-step state outside the tensordict and its ``state_dict``
        (a transform holding such state in non-persistent buffers, e.g. ``CatFrames``, is not)."""
        return all(not m._non_persistent_buffers_set for m in self.modules())

    def set_seed(self, seed: int | None) -> int | None:
        """Seeds the transform's random streams; returns the seed after them (:mod:`tdict.seeding`).

        A transformed env calls it after seeding its base env, with the seed the base env returned.
        A transform that draws nothing (the default) hands ``seed`` on unchanged.
        """
        return seed

    # ------------------------------------------------------------------ keys
    @property
    def in_keys(self) -> list:
        """The entries the forward transform reads (a key or a list of keys may be assigned)."""
        return self.__dict__["_in_keys"]

    @in_keys.setter
    def in_keys(self, value: Any) -> None:
        self.__dict__["_in_keys"] = _key_list(value)

    @property
    def out_keys(self) -> list:
        """Where the forward transform writes its results (``in_keys`` when left empty)."""
        out = self.__dict__["_out_keys"]
        return out if out else list(self.in_keys)

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        self.__dict__["_out_keys"] = _key_list(value)

    @property
    def in_keys_inv(self) -> list:
        """The entries the inner env reads, written by the inverse transform."""
        return self.__dict__["_in_keys_inv"]

    @in_keys_inv.setter
    def in_keys_inv(self, value: Any) -> None:
        self.__dict__["_in_keys_inv"] = _key_list(value)

    @property
    def out_keys_inv(self) -> list:
        """The entries the caller provides, read by the inverse transform (``in_keys_inv`` when left empty)."""
        out = self.__dict__["_out_keys_inv"]
        return out if out else list(self.in_keys_inv)

    @out_keys_inv.setter
    def out_keys_inv(self, value: Any) -> None:
        self.__dict__["_out_keys_inv"] = _key_list(value)

    @property
    def missing_tolerance(self) -> bool:
        """Whether a missing ``in_key`` is skipped (True during resets) instead of raising."""
        return self._missing_tolerance

    def set_missing_tolerance(self, mode: bool = False) -> None:
        """Sets :attr:`missing_tolerance`: with ``True``, a missing ``in_key`` is skipped instead of raising."""
        self.__dict__["_missing_tolerance"] = mode

    def _check_pairs(self, ins: list, outs: list, what: str) -> None:
        if len(ins) != len(outs):
            raise ValueError(
                f"{type(self).__name__} expects the same number of input and output keys: {what} keys and their "
                f"outputs differ in length: {ins} vs {outs}."
            )

    # ------------------------------------------------------------------ forward direction
    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        """The tensor function applied to each ``in_key`` (override in key-mapping transforms)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _apply_transform.")

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Applies :meth:`_apply_transform` to every ``in_key`` of ``next_tensordict`` (in place)."""
        ins, outs = self.in_keys, self.out_keys
        self._check_pairs(ins, outs, "in")
        for in_key, out_key in zip(ins, outs):
            value = next_tensordict.get(in_key, None)
            if value is not None:
                next_tensordict.set(out_key, self._apply_transform(value))
            elif not self._missing_tolerance:
                raise KeyError(
                    f"{type(self).__name__}: key {in_key!r} not found; the tensordict has "
                    f"{sorted(map(str, next_tensordict.keys(True, True)))}."
                )
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Called by ``env.step`` with the input step and its ``"next"`` output; returns the output."""
        return self._call(next_tensordict)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        """Called by ``env.reset`` with its input and output; missing keys (e.g. rewards) are skipped."""
        previous = self._missing_tolerance
        self.__dict__["_missing_tolerance"] = True
        try:
            return self._call(tensordict_reset)
        finally:
            self.__dict__["_missing_tolerance"] = previous

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the transform to a plain TensorDict (e.g. a replay-buffer sample)."""
        return self._call(tensordict)

    # ------------------------------------------------------------------ inverse direction
    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self.invertible:
            raise NotImplementedError(f"{type(self).__name__} does not implement _inv_apply_transform.")
        return value

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Maps each ``out_key_inv`` (what the caller gives) to ``in_key_inv`` (what the inner env reads)."""
        ins, outs = self.in_keys_inv, self.out_keys_inv
        if not ins:
            return tensordict
        self._check_pairs(ins, outs, "inverse")
        for in_key, out_key in zip(ins, outs):
            value = tensordict.get(out_key, None)
            if value is not None:
                tensordict.set(in_key, self._inv_apply_transform(value))
            elif not self._missing_tolerance:
                raise KeyError(
                    f"{type(self).__name__} (inverse): key {out_key!r} not found; the tensordict has "
                    f"{sorted(map(str, tensordict.keys(True, True)))}."
                )
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The inverse transform on a copy of ``tensordict``'s structure (the input is left untouched)."""
        return self._inv_call(tensordict.copy())

    @property
    def has_inverse(self) -> bool:
        """Whether :meth:`_inv_call` may change anything (TransformedEnv skips it otherwise)."""
        return bool(self.in_keys_inv) or type(self)._inv_call is not Transform._inv_call

    # ------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Composite) -> Composite:
        """Maps ``Composite(full_observation_spec, full_reward_spec, full_done_spec)`` (a private copy)."""
        output_spec["full_observation_spec"] = self.transform_observation_spec(output_spec["full_observation_spec"])
        output_spec["full_reward_spec"] = self.transform_reward_spec(output_spec["full_reward_spec"])
        output_spec["full_done_spec"] = self.transform_done_spec(output_spec["full_done_spec"])
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        """Maps ``Composite(full_state_spec, full_action_spec)`` (a private copy)."""
        input_spec["full_action_spec"] = self.transform_action_spec(input_spec["full_action_spec"])
        input_spec["full_state_spec"] = self.transform_state_spec(input_spec["full_state_spec"])
        return input_spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Maps ``full_observation_spec`` (a private copy, edited in place and returned); unchanged by default."""
        return observation_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        """Maps ``full_reward_spec`` (a private copy, edited in place and returned); unchanged by default."""
        return reward_spec

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        """Maps ``full_done_spec`` (a private copy, edited in place and returned); unchanged by default."""
        return done_spec

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        """Maps the inner env's ``full_action_spec`` to the one callers see; unchanged by default."""
        return action_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        """Maps the inner env's ``full_state_spec`` to the one callers see; unchanged by default."""
        return state_spec

    # ------------------------------------------------------------------ containers
    @property
    def container(self) -> Any:
        """The Compose or TransformedEnv that holds this transform (None when free-standing)."""
        return self._container

    def set_container(self, container: Any) -> None:
        """Records the Compose or TransformedEnv holding this transform (``None`` detaches it).

        Raises:
            RuntimeError: the transform already belongs to another container (use :meth:`clone`).
        """
        if self._container is not None and container is not None and self._container is not container:
            raise RuntimeError(
                f"{type(self).__name__} already belongs to {type(self._container).__name__}; use transform.clone()."
            )
        previous = self._container
        self.__dict__["_container"] = container
        try:
            self._check_attachment()
        except Exception:
            self.__dict__["_container"] = previous
            raise

    def _check_attachment(self) -> None:
        """Called whenever this transform, or a Compose holding it, gets a new container: raise here to
        refuse a place (e.g. inside an env); the container is then left as it was."""

    def _holding_env(self) -> Any:
        """The env at the top of this transform's chain of containers, or None."""
        container = self._container
        while isinstance(container, Transform):
            container = container._container
        return container

    def notify_specs_changed(self) -> None:
        """Tells the env holding this transform to recompute its specs (e.g. after new statistics)."""
        env = self._holding_env()
        if env is not None:
            env._specs_changed()

    def reset_parent(self) -> None:
        """Detaches the transform from its container (``container`` becomes ``None``)."""
        self.__dict__["_container"] = None

    @property
    def parent(self) -> "TransformedEnv | None":
        """The env as this transform sees it: the base env with every transform that comes before it.

        Built once and cached until the chain of containers above the transform changes.
        """
        signature = self._chain_signature()
        cached = self.__dict__.get("_parent_cache")
        if cached is not None and cached[0] == signature:
            return cached[1]
        parent = self._build_parent()
        self.__dict__["_parent_cache"] = (signature, parent)
        return parent

    def _chain_signature(self) -> tuple:
        """Identifies the containers above this transform and their contents (what ``parent`` depends on)."""
        signature: list = []
        node: Any = self
        while True:
            container = node.container
            if container is None:
                return tuple(signature)
            if isinstance(container, Compose):
                signature.append((id(container), tuple(id(t) for t in container.transforms)))
                node = container
                continue
            signature.append((id(container), id(getattr(container, "_base", None))))
            return tuple(signature)

    def _build_parent(self) -> "TransformedEnv | None":
        preceding: list = []
        node: Any = self
        while True:
            container = node.container
            if container is None:
                return None
            if isinstance(container, Compose):
                index = [i for i, t in enumerate(container.transforms) if t is node][0]
                preceding = list(container.transforms[:index]) + preceding
                node = container
                continue
            view = getattr(type(container), "_view", None)  # a TransformedEnv (no import: it imports us)
            return view(container.base_env, preceding) if view is not None else None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_parent_cache", None)  # a view of the env, rebuilt on demand (never copied or pickled)
        return state

    def clone(self) -> "Transform":
        """A deep copy that belongs to no container."""
        container = self._container
        self.__dict__["_container"] = None
        try:
            return copy.deepcopy(self)
        finally:
            self.__dict__["_container"] = container

    def close(self) -> None:
        """Releases resources (no-op by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in_keys={self.in_keys}, out_keys={self.out_keys})"


class Compose(Transform):
    """A sequence of transforms applied in order (inverse transforms in reverse order).

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> t = Compose(StepCounter(max_steps=3), StepCounter(step_count_key="total"))
        >>> rollout = TransformedEnv(PendulumEnv(), t).rollout(5)
        >>> len(t), rollout["next", "step_count"].tolist(), rollout["next", "total"].tolist()
        (2, [1, 2, 3], [1, 2, 3])
    """

    def __init__(self, *transforms: Transform) -> None:
        super().__init__()
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        for t in transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose takes Transform instances, got {type(t).__name__}.")
            t.set_container(self)
        self.transforms = nn.ModuleList(transforms)

    def set_seed(self, seed: int | None) -> int | None:
        """Seeds the transforms in turn, each with the seed the previous one returned."""
        return chain_seeds(seed, [t.set_seed for t in self])

    def _check_attachment(self) -> None:
        for t in self.__dict__.get("_modules", {}).get("transforms", ()):  # absent while __init__ adds them
            t._check_attachment()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for t in self:
            next_tensordict = t._call(next_tensordict)
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for t in self:
            next_tensordict = t._step(tensordict, next_tensordict)
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        for t in self:
            tensordict_reset = t._reset(tensordict, tensordict_reset)
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self:
            tensordict = t(tensordict)
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in reversed(list(self)):
            tensordict = t._inv_call(tensordict)
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return any(t.has_inverse for t in self)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        for t in self:
            output_spec = t.transform_output_spec(output_spec)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        for t in self:
            input_spec = t.transform_input_spec(input_spec)
        return input_spec

    def set_missing_tolerance(self, mode: bool = False) -> None:
        """Sets the missing-key tolerance of the Compose and of every transform in it."""
        super().set_missing_tolerance(mode)
        for t in self:
            t.set_missing_tolerance(mode)

    def append(self, transform: Transform) -> None:
        """Adds ``transform`` at the end (it joins this Compose; the env's specs are recomputed)."""
        transform.set_container(self)
        self.transforms.append(transform)
        self.notify_specs_changed()

    def insert(self, index: int, transform: Transform) -> None:
        """Inserts ``transform`` at position ``index`` (it joins this Compose; the env's specs are recomputed)."""
        transform.set_container(self)
        self.transforms.insert(index, transform)
        self.notify_specs_changed()

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Compose(*[cast(Transform, t).clone() for t in self.transforms[index]])
        return self.transforms[index]

    def __len__(self) -> int:
        return len(self.transforms)

    def __iter__(self) -> Iterator[Transform]:
        return cast("Iterator[Transform]", iter(self.transforms))  # the ModuleList holds only Transforms

    def close(self) -> None:
        for t in self:
            t.close()

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(t) for t in self)
        return f"Compose(\n    {inner})" if inner else "Compose()"
