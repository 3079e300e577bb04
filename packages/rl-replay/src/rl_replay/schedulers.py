"""Parameter schedulers: anneal a sampler attribute (e.g. a PrioritizedSampler's ``beta``) step by step."""

from __future__ import annotations

import math
from typing import Any, Callable

from tdict.validation import check_positive_int

__all__ = ["ParameterScheduler", "LambdaScheduler", "LinearScheduler", "StepScheduler", "SchedulerList"]


class ParameterScheduler:
    """Base class: each :meth:`step` sets ``sampler.<param_name>`` to ``_step()`` clipped to ``[min_value, max_value]``.

    Args:
        obj: a replay buffer (its ``sampler`` is adjusted) or a sampler.
        param_name: the attribute to adjust (``"beta"``, ``"alpha"``, ...).
        min_value: lower bound of the value (default: none).
        max_value: upper bound of the value (default: none).
    """

    def __init__(
        self, obj: Any, param_name: str, min_value: float | None = None, max_value: float | None = None
    ) -> None:
        sampler = getattr(obj, "sampler", obj)
        if not hasattr(sampler, param_name):
            raise ValueError(
                f"{type(self).__name__}: {type(sampler).__name__} has no attribute {param_name!r} to schedule."
            )
        self.sampler = sampler
        self.param_name = param_name
        self._min_val = -math.inf if min_value is None else min_value
        self._max_val = math.inf if max_value is None else max_value
        self.initial_val = getattr(sampler, param_name)
        self._step_cnt = 0

    def _step(self) -> float:
        raise NotImplementedError

    def step(self) -> None:
        """Advances one step and writes the new value into the sampler."""
        self._step_cnt += 1
        value = min(max(self._step(), self._min_val), self._max_val)
        setattr(self.sampler, self.param_name, value)

    def state_dict(self) -> dict:
        """Everything but the sampler (and callables)."""
        return {k: v for k, v in self.__dict__.items() if k != "sampler" and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (the step count and the values it holds)."""
        self.__dict__.update(state)


class LambdaScheduler(ParameterScheduler):
    """Sets the parameter to ``initial_value * lambda_fn(step_count)`` (like ``torch.optim.lr_scheduler.LambdaLR``).

    Examples:
        >>> from rl_replay import PrioritizedSampler
        >>> sampler = PrioritizedSampler(10, alpha=0.6, beta=0.5)
        >>> s = LambdaScheduler(sampler, "beta", lambda n: 1 + n)
        >>> s.step(); s.step(); sampler.beta
        1.5
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        lambda_fn: Callable[[int], float],
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        self.lambda_fn = lambda_fn

    def _step(self) -> float:
        return self.initial_val * self.lambda_fn(self._step_cnt)


class LinearScheduler(ParameterScheduler):
    """Moves the parameter linearly from its current value to ``final_value`` over ``num_steps`` steps.

    Args:
        obj: a replay buffer or sampler.
        param_name: the attribute to adjust.
        final_value: the value reached after ``num_steps`` steps (and kept afterwards).
        num_steps: how many steps the change takes.

    Examples:
        >>> from rl_replay import PrioritizedSampler
        >>> sampler = PrioritizedSampler(10, alpha=0.6, beta=0.6)
        >>> s = LinearScheduler(sampler, "beta", final_value=1.0, num_steps=4)
        >>> values = []
        >>> for _ in range(5):
        ...     s.step(); values.append(round(sampler.beta, 6))
        >>> values
        [0.7, 0.8, 0.9, 1.0, 1.0]
    """

    def __init__(self, obj: Any, param_name: str, final_value: float, num_steps: int) -> None:
        super().__init__(obj, param_name)
        check_positive_int("LinearScheduler", "num_steps", num_steps)
        self.final_val = final_value
        self.num_steps = num_steps
        self._delta = (final_value - self.initial_val) / num_steps

    def _step(self) -> float:
        if self._step_cnt < self.num_steps:
            return self.initial_val + self._delta * self._step_cnt
        return self.final_val


class StepScheduler(ParameterScheduler):
    """Every ``n_steps`` steps, multiplies the parameter by ``gamma`` (or adds ``gamma``), within bounds.

    Args:
        obj: a replay buffer or sampler.
        param_name: the attribute to adjust.
        gamma: the factor (``mode="multiplicative"``) or increment (``mode="additive"``).
        n_steps: steps between changes.
        mode: ``"multiplicative"`` or ``"additive"``.
        min_value: lower bound.
        max_value: upper bound.

    Examples:
        >>> from rl_replay import PrioritizedSampler
        >>> sampler = PrioritizedSampler(10, alpha=0.6, beta=0.6)
        >>> s = StepScheduler(sampler, "beta", gamma=0.1, n_steps=2, mode="additive", max_value=0.75)
        >>> values = []
        >>> for _ in range(6):
        ...     s.step(); values.append(round(sampler.beta, 6))
        >>> values
        [0.6, 0.7, 0.7, 0.75, 0.75, 0.75]
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        gamma: float = 0.9,
        n_steps: int = 1,
        mode: str = "multiplicative",
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        if mode not in ("multiplicative", "additive"):
            raise ValueError(f"StepScheduler: mode must be 'multiplicative' or 'additive', got {mode!r}.")
        check_positive_int("StepScheduler", "n_steps", n_steps)
        self.gamma = gamma
        self.n_steps = n_steps
        self.mode = mode

    def _step(self) -> float:
        value = getattr(self.sampler, self.param_name)
        if self._step_cnt % self.n_steps:
            return value
        return value + self.gamma if self.mode == "additive" else value * self.gamma


class SchedulerList:
    """Steps several schedulers together.

    Examples:
        >>> from rl_replay import PrioritizedSampler
        >>> sampler = PrioritizedSampler(10, alpha=0.6, beta=0.5)
        >>> s = SchedulerList([LinearScheduler(sampler, "beta", 1.0, 5), StepScheduler(sampler, "alpha", gamma=0.5)])
        >>> s.step(); round(sampler.beta, 6), sampler.alpha
        (0.6, 0.3)
    """

    def __init__(self, schedulers: list | ParameterScheduler) -> None:
        if isinstance(schedulers, ParameterScheduler):
            schedulers = [schedulers]
        self.schedulers = list(schedulers)

    def append(self, scheduler: ParameterScheduler) -> None:
        """Adds a scheduler, stepped after the others."""
        self.schedulers.append(scheduler)

    def step(self) -> None:
        """Steps every scheduler, in order."""
        for scheduler in self.schedulers:
            scheduler.step()

    def state_dict(self) -> dict:
        """``{"schedulers": [...]}``: each scheduler's state, in order."""
        return {"schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`, one state per scheduler in order."""
        for s, sd in zip(self.schedulers, state["schedulers"]):
            s.load_state_dict(sd)
