"""Macro actions: one policy decision expands into several low-level env steps.

A macro action is a tensorclass holding the parameters of a multi-step primitive for every env of
the batch: :class:`MacroAction` (open loop: ramp to a value, then hold it) and
:class:`TargetMacroAction` (closed loop: steer towards a target until within tolerance; tasks
subclass it with their controller, e.g. ``SatelliteMacroAction``). :class:`MacroPrimitiveTransform`
turns an env into one whose action is the macro's flat parameter vector in ``[-1, 1]``: each step
decodes it, runs the low-level steps inside the env, and returns the last observation with the
summed reward.
"""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase, tensorclass
from tdict.specs import Bounded, Composite, TensorSpec
from tdict.validation import check_positive_int

from ._episode_utils import _ENV_ONLY, _need_parent
from .base import Transform

__all__ = ["MacroAction", "MacroPrimitiveTransform", "TargetMacroAction"]


def _duration(fraction: torch.Tensor, max_duration: int) -> torch.Tensor:
    """``[-1, 1]`` -> an int64 number of steps in ``[1, max_duration]``."""
    unit = (fraction.clamp(-1, 1) + 1) / 2
    return (1 + torch.round(unit * (max_duration - 1))).to(torch.int64)


@tensorclass
class MacroAction:
    """Open loop: go linearly from the previous low-level action to ``value`` in ``ramp`` steps, then hold it.

    Fields (``B`` = the env's batch): ``value`` (``[*B, A]``), ``duration`` (int64 ``[*B]``, the
    low-level steps, ``>= 1``) and ``ramp`` (int64 ``[*B]``, ``0``: jump to ``value`` at once).
    From a flat policy action (:meth:`from_flat`): ``[value in [-1, 1] mapped onto the action
    bounds, ramp fraction, duration fraction]``.

    Examples:
        >>> import torch
        >>> macro = MacroAction(value=torch.ones(1, 1), duration=torch.tensor([4]), ramp=torch.tensor([2]), batch_size=[1])
        >>> [macro.action(k, None, None, torch.zeros(1, 1)).item() for k in range(4)]
        [0.5, 1.0, 1.0, 1.0]
        >>> [bool(macro.finished(k, None, None)) for k in range(4)]
        [False, False, False, True]
    """

    value: torch.Tensor
    duration: torch.Tensor
    ramp: torch.Tensor

    @classmethod
    def flat_size(cls, action_spec: TensorSpec) -> int:
        """The length of the flat action that :meth:`from_flat` decodes."""
        return action_spec.shape[-1] + 2

    @classmethod
    def from_flat(cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int) -> "MacroAction":
        """Decodes ``[value, ramp, duration]`` (each in ``[-1, 1]``) for the bounds of ``env.action_spec``."""
        spec = env.action_spec
        size = spec.shape[-1]
        low, high = spec.space.low.to(flat), spec.space.high.to(flat)
        value = low + (flat[..., :size].clamp(-1, 1) + 1) / 2 * (high - low)
        duration = _duration(flat[..., size + 1], max_duration)
        ramp = torch.round((flat[..., size].clamp(-1, 1) + 1) / 2 * duration).to(torch.int64)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(value=value, duration=duration, ramp=ramp, batch_size=flat.shape[:-1])

    def action(self, step: int, tensordict: TensorDictBase | None, env: Any, start: torch.Tensor) -> torch.Tensor:
        """The low-level action of step ``step`` (from 0); ``start`` is the action before the macro."""
        fraction = ((step + 1) / self.ramp.clamp(min=1).to(self.value.dtype)).clamp(max=1)
        fraction = torch.where(self.ramp == 0, torch.ones_like(fraction), fraction).unsqueeze(-1)
        return start + fraction * (self.value - start)

    def finished(self, step: int, tensordict: TensorDictBase | None, env: Any) -> torch.Tensor:
        """Whether the macro ends after step ``step`` (``[*B]`` bool)."""
        return self.duration <= step + 1


@tensorclass
class TargetMacroAction:
    """Closed loop: a controller steers towards ``target`` until within ``tolerance`` or ``duration`` steps.

    Subclasses give the task's controller (:meth:`control`), the distance to the target
    (:meth:`error`) and the decoding of a flat policy action (:meth:`flat_size`, :meth:`from_flat`;
    by convention its last entry is the duration fraction, as :class:`MacroAction`'s).
    Fields: ``target`` (``[*B, T]``), ``duration`` (int64 ``[*B]``) and ``tolerance`` (``[*B]``).
    """

    target: torch.Tensor
    duration: torch.Tensor
    tolerance: torch.Tensor

    @classmethod
    def flat_size(cls, action_spec: TensorSpec) -> int:
        """The length of the flat action that :meth:`from_flat` decodes (``action_spec``: the low-level one)."""
        raise NotImplementedError(f"{cls.__name__} must implement flat_size(action_spec).")

    @classmethod
    def from_flat(cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int) -> Any:
        """The macro actions that the flat policy actions ``flat`` (in ``[-1, 1]``) stand for."""
        raise NotImplementedError(f"{cls.__name__} must implement from_flat(flat, tensordict, env, max_duration).")

    def control(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """The low-level action that moves towards ``target`` from the observation in ``tensordict``."""
        raise NotImplementedError(f"{type(self).__name__} must implement control(tensordict, env).")

    def error(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """The distance to ``target`` of the observation in ``tensordict`` (``[*B]``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement error(tensordict, env).")

    def action(self, step: int, tensordict: TensorDictBase, env: Any, start: torch.Tensor) -> torch.Tensor:
        """The controller's action (closed loop: ``step`` and ``start`` are not used)."""
        return self.control(tensordict, env)

    def finished(self, step: int, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """Whether the target is reached (``error <= tolerance``) or the duration is spent."""
        return (self.duration <= step + 1) | (self.error(tensordict, env) <= self.tolerance)


class MacroPrimitiveTransform(Transform):
    """Makes each env step one macro action: decode, run its low-level steps inside the env, sum rewards.

    The action the caller gives is the flat parameter vector of ``macro_type`` (``Bounded(-1, 1)``,
    ``macro_type.flat_size`` long, the duration fraction last); the transform decodes it (``macro_type.from_flat``), steps the
    parent env with the macro's low-level actions until the macro finishes or the episode ends (at
    most ``max_duration`` steps), and returns the last step's output with the rewards summed. In a
    batched env the sub-envs whose macro or episode ended keep the output of their last step while
    the others go on.

    With ``fixed_duration=True`` the caller leaves the duration out: every macro lasts
    ``max_duration`` steps (or until it finishes). Then each decision covers the same time, so that
    a learner discounting per decision sees one time scale: with durations of its own choice, short
    macros push the cost of a task into later, more discounted decisions.

    Args:
        macro_type: a :class:`MacroAction` or :class:`TargetMacroAction` class.
        max_duration: the largest number of low-level steps per macro action.
        action_key: the action entry (the low-level action below, the flat macro above).
        fixed_duration: macros last ``max_duration`` steps; the duration entry is not in the action.

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(MacroPrimitiveTransform(MacroAction, max_duration=5))
        TransformedEnv(...)
        >>> env.action_spec.shape  # [torque, ramp, duration]
        torch.Size([3])
        >>> td = env.step(env.reset().set("action", torch.tensor([1.0, -1.0, 1.0])))
        >>> int(td["next", "step_count"])  # one macro: 5 low-level steps
        5
    """

    def __init__(
        self, macro_type: type, max_duration: int = 10, action_key: str = "action", *, fixed_duration: bool = False
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
