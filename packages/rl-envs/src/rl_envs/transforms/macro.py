"""Macro actions: one policy decision expands into several low-level env steps.

A macro action is a tensorclass holding the parameters of a multi-step primitive for every env of
the batch, with TorchRL's fields (``mode``, ``steps``, ``settle_steps``, ``target``):
:class:`MacroAction` (wait) and :class:`TargetMacroAction` (move the low-level action to a target,
then hold it; tasks subclass it with a controller of their own, e.g. ``SatelliteMacroAction``
slews to an attitude in closed loop). :class:`MacroPrimitiveTransform`
turns an env into one whose action is the macro's flat parameter vector in ``[-1, 1]``: each step
decodes it, runs the low-level steps inside the env, and returns the last observation with the
summed reward.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
from tdict import TensorDictBase, tensorclass
from tdict.specs import Bounded, Composite, TensorSpec
from tdict.validation import check_positive_int

from ._episode_utils import _ENV_ONLY, _need_parent
from .base import Transform

__all__ = ["MacroAction", "MacroPrimitive", "MacroPrimitiveTransform", "TargetMacroAction"]


class MacroPrimitive(IntEnum):
    """What a macro action does with the low-level action: hold it (``WAIT``) or move it (``MOVE``)."""

    WAIT = 0
    MOVE = 1


def _duration(fraction: torch.Tensor, max_duration: int) -> torch.Tensor:
    """``[-1, 1]`` -> an int64 number of steps in ``[1, max_duration]``."""
    unit = (fraction.clamp(-1, 1) + 1) / 2
    return (1 + torch.round(unit * (max_duration - 1))).to(torch.int64)


def _unit(fraction: torch.Tensor) -> torch.Tensor:
    return (fraction.clamp(-1, 1) + 1) / 2


@tensorclass
class MacroAction:
    """A multi-step primitive: ``mode`` for ``steps`` low-level steps, then ``settle_steps`` more holding.

    Fields (``B``: the env's batch; TorchRL's names): ``mode`` (int64 ``[*B]``, a
    :class:`MacroPrimitive`), ``steps`` and ``settle_steps`` (int64 ``[*B]``). A bare
    ``MacroAction`` can only wait: it holds the low-level action it starts from for
    ``steps + settle_steps`` steps (at least one). :class:`TargetMacroAction` moves.

    Examples:
        >>> import torch
        >>> wait = MacroAction(mode=torch.tensor([0]), steps=torch.tensor([2]), settle_steps=torch.tensor([1]),
        ...                    batch_size=[1])
        >>> [wait.action(k, None, None, torch.ones(1, 1)).item() for k in range(3)]
        [1.0, 1.0, 1.0]
        >>> [bool(wait.finished(k, None, None)) for k in range(3)]
        [False, False, True]
    """

    mode: torch.Tensor
    steps: torch.Tensor
    settle_steps: torch.Tensor

    @classmethod
    def flat_size(cls, action_spec: TensorSpec) -> int:
        """The length of the flat policy action :meth:`from_flat` decodes: the duration fraction."""
        return 1

    @classmethod
    def from_flat(cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int) -> Any:
        """Waits of ``1 + round((flat + 1) / 2 * (max_duration - 1))`` steps."""
        zeros = torch.zeros(flat.shape[:-1], dtype=torch.int64, device=flat.device)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(
            mode=zeros, steps=_duration(flat[..., -1], max_duration), settle_steps=zeros, batch_size=zeros.shape
        )

    @property
    def duration(self) -> torch.Tensor:
        """``steps + settle_steps``, at least 1: the low-level steps the macro takes (``[*B]``)."""
        return (self.steps + self.settle_steps).clamp(min=1)

    def action(self, step: int, tensordict: TensorDictBase | None, env: Any, start: torch.Tensor) -> torch.Tensor:
        """The low-level action of step ``step`` (from 0); ``start`` is the action before the macro."""
        return start

    def finished(self, step: int, tensordict: TensorDictBase | None, env: Any) -> torch.Tensor:
        """Whether the macro ends after step ``step`` (``[*B]`` bool)."""
        return self.duration <= step + 1


@tensorclass
class TargetMacroAction(MacroAction):
    """Move the low-level action to ``target``: linearly over ``steps`` steps, then hold it ``settle_steps``.

    With ``mode == MacroPrimitive.WAIT`` it holds the starting action instead. ``target`` is
    ``[*B, A]``; ``steps == 0`` jumps to it at once. From a flat policy action
    (:meth:`from_flat`): ``[target in [-1, 1] mapped onto the action bounds, the fraction of the
    duration spent moving, the duration fraction]``. Tasks subclass it with a controller of their
    own (``SatelliteMacroAction``: ``target`` is an attitude, reached in closed loop).

    Examples:
        >>> import torch
        >>> move = TargetMacroAction(mode=torch.tensor([1]), steps=torch.tensor([2]), settle_steps=torch.tensor([2]),
        ...                          target=torch.ones(1, 1), batch_size=[1])
        >>> [move.action(k, None, None, torch.zeros(1, 1)).item() for k in range(4)]
        [0.5, 1.0, 1.0, 1.0]
    """

    target: torch.Tensor

    @classmethod
    def flat_size(cls, action_spec: TensorSpec) -> int:
        """The target's size (the low-level action's), then the moving and the duration fractions."""
        return action_spec.shape[-1] + 2

    @classmethod
    def from_flat(cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int) -> Any:
        """Moves to the targets in ``flat`` for the bounds of ``env.action_spec``."""
        spec = env.action_spec
        size = spec.shape[-1]
        low, high = spec.space.low.to(flat), spec.space.high.to(flat)
        duration = _duration(flat[..., size + 1], max_duration)
        steps = torch.round(_unit(flat[..., size]) * duration).to(torch.int64)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(
            mode=torch.full_like(steps, int(MacroPrimitive.MOVE)),
            steps=steps,
            settle_steps=duration - steps,
            target=low + _unit(flat[..., :size]) * (high - low),
            batch_size=steps.shape,
        )

    def action(self, step: int, tensordict: TensorDictBase | None, env: Any, start: torch.Tensor) -> torch.Tensor:
        """``start`` moved ``(step + 1) / steps`` of the way to ``target`` (all of it once ``steps`` are done)."""
        fraction = ((step + 1) / self.steps.clamp(min=1).to(self.target.dtype)).clamp(max=1)
        fraction = torch.where(self.mode == int(MacroPrimitive.MOVE), fraction, torch.zeros_like(fraction))
        return start + fraction.unsqueeze(-1) * (self.target - start)


class MacroPrimitiveTransform(Transform):
    """Makes each env step one macro action: decode, run its low-level steps inside the env, sum rewards.

    The action the caller gives is the flat parameter vector of ``macro_type`` (``Bounded(-1, 1)``,
    ``macro_type.flat_size`` long, the duration fraction last); the transform decodes it (``macro_type.from_flat``), steps the
    parent env with the macro's low-level actions until the macro finishes or the episode ends (at
    most ``max_duration`` steps), and returns the last step's output with the rewards summed. In a
    batched env the sub-envs whose macro or episode ended keep the output of their last step while
    the others go on.

    TorchRL's ``MacroPrimitiveTransform`` turns a macro into an action sequence that ``MultiAction``
    then executes open loop (``execute=True``); here the macro runs inside the env one low-level
    step at a time, so a closed-loop macro (``SatelliteMacroAction``) reads every new observation.

    With ``fixed_duration=True`` the caller leaves the duration out: every macro lasts
    ``max_duration`` steps (or until it finishes). Then each decision covers the same time, so that
    a learner discounting per decision sees one time scale: with durations of its own choice, short
    macros push the cost of a task into later, more discounted decisions.

    Args:
        macro_type: a macro action class (:class:`TargetMacroAction` or a subclass, :class:`MacroAction`).
        max_duration: the largest number of low-level steps per macro action.
        action_key: the action entry (the low-level action below, the flat macro above).
        fixed_duration: macros last ``max_duration`` steps; the duration entry is not in the action.

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(MacroPrimitiveTransform(TargetMacroAction, max_duration=5))
        TransformedEnv(...)
        >>> env.action_spec.shape  # [target torque, moving fraction, duration fraction]
        torch.Size([3])
        >>> td = env.step(env.reset().set("action", torch.tensor([1.0, -1.0, 1.0])))
        >>> int(td["next", "step_count"])  # one macro: 5 low-level steps
        5
    """

    def __init__(
        self,
        macro_type: type = TargetMacroAction,
        max_duration: int = 10,
        action_key: str = "action",
        *,
        fixed_duration: bool = False,
    ) -> None:
        for name in ("flat_size", "from_flat", "action", "finished"):
            if not callable(getattr(macro_type, name, None)):
                raise TypeError(
                    f"MacroPrimitiveTransform: macro_type must be a macro action class with {name}() (MacroAction, "
                    f"TargetMacroAction or a subclass), got {macro_type!r}."
                )
        super().__init__()
        self.macro_type = macro_type
        self.max_duration = check_positive_int("MacroPrimitiveTransform", "max_duration", max_duration)
        self.action_key = action_key
        self.fixed_duration = bool(fixed_duration)
        self._macro: Any = None
        self._last: torch.Tensor | None = None

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        spec = action_spec[self.action_key]
        if not spec.dtype.is_floating_point:
            raise TypeError(
                f"MacroPrimitiveTransform: the low-level action {self.action_key!r} must be continuous (a float "
                f"Bounded spec, whose bounds the macros interpolate within), got {spec!r}."
            )
        size = self.macro_type.flat_size(spec) - self.fixed_duration
        shape = (*spec.shape[:-1], size)
        action_spec[self.action_key] = Bounded(-1.0, 1.0, shape=shape, dtype=spec.dtype, device=spec.device)
        return action_spec

    def _low_level_start(self, parent: Any) -> torch.Tensor:
        if self._last is None:
            spec = parent.action_spec
            self._last = torch.zeros(spec.shape, dtype=spec.dtype, device=spec.device)
        return self._last

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        parent = _need_parent(self)
        flat = tensordict.get(self.action_key)
        if self.fixed_duration:  # the longest duration: fraction 1
            flat = torch.cat([flat, torch.ones_like(flat[..., :1])], -1)
        macro = self.macro_type.from_flat(flat, tensordict, parent, self.max_duration)
        start = self._low_level_start(parent)
        low = macro.action(0, tensordict, parent, start)
        self._macro, self._start, self._last = macro, start, low
        tensordict.set(self.action_key, low)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent, macro = _need_parent(self), self._macro
        keys = parent._keys()
        batch = next_tensordict.batch_size
        rewards = {k: next_tensordict.get(k) for k in keys.reward_keys}

        def ended(td: TensorDictBase, step: int) -> torch.Tensor:
            flag = macro.finished(step, td, parent)
            for k in keys.stop_keys:
                value = td.get(k)
                flag = flag | (value.reshape(*batch, -1).any(-1) if value.ndim > len(batch) else value)
            return flag

        finished = ended(next_tensordict, 0)
        for step in range(1, self.max_duration):
            if bool(finished.all()):
                break
            step_in = tensordict.copy()
            step_in.set("next", next_tensordict)
            step_in = keys.shift(step_in)
            last = self._last
            assert last is not None  # set by _inv_call
            low = macro.action(step, step_in, parent, self._start)
            low = torch.where(finished.reshape(tuple(batch) + (1,) * (low.ndim - len(batch))), last, low)
            self._last = low
            new = parent.step(step_in.set(self.action_key, low)).get("next")
            live = ~finished
            for k in keys.reward_keys:
                r = new.get(k)
                rewards[k] = rewards[k] + torch.where(
                    live.reshape(tuple(live.shape) + (1,) * (r.ndim - live.ndim)), r, 0
                )
            # torch.where takes TensorDicts through __torch_function__ (the torch stubs only know tensors)
            next_tensordict = new if not bool(finished.any()) else torch.where(finished, next_tensordict, new)  # pyright: ignore[reportCallIssue, reportArgumentType]
            finished = finished | ended(next_tensordict, step)
        for k, r in rewards.items():
            next_tensordict.set(k, r)
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        if self._last is not None:
            if mask is None:
                self._last = torch.zeros_like(self._last)
            else:
                self._last = torch.where(mask.reshape(tuple(mask.shape) + (1,)), 0, self._last)
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(_ENV_ONLY.format("MacroPrimitiveTransform"))

    def __repr__(self) -> str:
        fixed = ", fixed_duration=True" if self.fixed_duration else ""
        return f"MacroPrimitiveTransform({self.macro_type.__name__}, max_duration={self.max_duration}{fixed})"
