"""Trainer hooks that report: a scalar of the batch, the frame count, and the return of validation
episodes (``torchrl.trainers`` names).

A logging hook returns a dict ``{name: number, ..., "log_pbar": bool}``; the trainer sends every
number to its logger (at most once per ``log_interval`` frames per name) and, with ``log_pbar``, to
the progress bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tdict import TensorDictBase, unravel_key
from tdict.nn import InteractionType
from tdict.validation import check_one_of, check_positive_int

from .evaluation import _done_mask, episode_returns, eval_rollout
from .hooks import TrainerHookBase, _int_state

__all__ = ["CountFramesLog", "LogScalar", "LogValidationReward"]

_REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "max": torch.amax, "min": torch.amin}


def _key_name(key: Any) -> str:
    return key if isinstance(key, str) else "_".join(key)


class LogScalar(TrainerHookBase):
    """Logs a reduction (and the std) of one entry of every collected batch.

    Registered at ``"pre_steps_log"``. The entry is read as float and reduced over all its elements.

    Args:
        key: the entry; default ``("next", "reward")``.
        logname: the logged name; default: the key, its parts joined by ``"_"`` (``"next_reward"``).
        log_pbar: also show the value on the progress bar.
        include_std: also log ``"<logname>_std"`` (0 for a single element).
        reduction: ``"mean"`` (default), ``"sum"``, ``"max"`` or ``"min"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import LogScalar
        >>> td = TensorDict({"next": {"reward": torch.tensor([[1.0, 3.0], [5.0, 7.0]])}}, batch_size=[2, 2])
        >>> LogScalar(logname="r_training")(td)
        {'r_training': 4.0, 'r_training_std': 2.5819..., 'log_pbar': False}
    """

    def __init__(
        self,
        key: Any = ("next", "reward"),
        logname: str | None = None,
        log_pbar: bool = False,
        include_std: bool = True,
        reduction: str = "mean",
    ) -> None:
        check_one_of("LogScalar", "reduction", reduction, sorted(_REDUCTIONS))
        if logname is not None and (not isinstance(logname, str) or not logname):
            raise ValueError(f"LogScalar: logname must be a non-empty string or None, got {logname!r}.")
        self.key = unravel_key(key)
        self.logname = _key_name(self.key) if logname is None else logname
        self.log_pbar = bool(log_pbar)
        self.include_std = bool(include_std)
        self.reduction = reduction

    def __call__(self, batch: TensorDictBase) -> dict[str, Any]:
        if not isinstance(batch, TensorDictBase):
            raise TypeError(f"LogScalar: expected a TensorDict batch, got {type(batch).__name__}.")
        if self.key not in batch.keys(include_nested=True):
            raise KeyError(
                f"LogScalar: no entry {self.key!r} in the batch; keys: {list(batch.keys(include_nested=True))}."
            )
        value = batch.get(self.key).detach().float()
        out: dict[str, Any] = {self.logname: float(_REDUCTIONS[self.reduction](value))}
        if self.include_std:
            out[f"{self.logname}_std"] = float(value.std()) if value.numel() > 1 else 0.0
        out["log_pbar"] = self.log_pbar
        return out

    def register(self, trainer: Any, name: str | None = None) -> None:
        trainer.register_op("pre_steps_log", self)


class CountFramesLog(TrainerHookBase):
    """Counts the frames of the collected batches (``numel * frame_skip``) and logs ``"n_frames"``.

    Registered at ``"pre_steps_log"``; the count is part of the trainer state.

    Args:
        frame_skip: env frames per collected step.
        log_pbar: also show the count on the progress bar.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import CountFramesLog
        >>> hook = CountFramesLog(frame_skip=2)
        >>> _ = hook(TensorDict(batch_size=[4, 5]))
        >>> hook(TensorDict(batch_size=[4, 5]))
        {'n_frames': 80, 'log_pbar': False}
    """

    def __init__(self, frame_skip: int = 1, log_pbar: bool = False) -> None:
        self.frame_skip = check_positive_int("CountFramesLog", "frame_skip", frame_skip)
        self.log_pbar = bool(log_pbar)
        self.frame_count = 0

    def __call__(self, batch: TensorDictBase) -> dict[str, Any]:
        if not isinstance(batch, TensorDictBase):
            raise TypeError(f"CountFramesLog: expected a TensorDict batch, got {type(batch).__name__}.")
        self.frame_count += batch.numel() * self.frame_skip
        return {"n_frames": self.frame_count, "log_pbar": self.log_pbar}

    def state_dict(self) -> dict[str, Any]:
        return {"frame_count": self.frame_count}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.frame_count = _int_state("CountFramesLog", state_dict, ["frame_count"])["frame_count"]

    def register(self, trainer: Any, name: str = "count_frames_log") -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)


class LogValidationReward(TrainerHookBase):
    """Every ``record_interval`` calls, runs the policy in an evaluation env and logs the return of its
    whole episodes.

    Registered at ``"post_steps_log"``. The first call records (TorchRL's schedule: calls ``0, n,
    2n, ...``); with ``record_first=False`` calls ``n - 1, 2n - 1, ...`` do, so that after batches of
    ``B`` frames the evaluations fall at ``n * B, 2n * B, ...`` frames (SB3's ``EvalCallback``). The rollout is
    :func:`~rl_objectives.trainers.eval_rollout`: ``environment.rollout(max_steps=record_frames,
    policy=policy_exploration, auto_reset=True, break_when_any_done=False)`` under ``torch.no_grad()``
    and ``set_interaction_type(exploration_type)`` (deterministic by default, so exploration modules
    stand aside), with the policy (and the env, when it has ``eval``/``train``) in eval mode, restored
    afterwards. Done sub-envs are reset in place, so a sub-env may run several episodes.

    For the reward key it logs ``"total_" + out_keys[key]`` (default ``"total_r_evaluation"``), the mean
    return of the episodes that ended within the rollout (:func:`~rl_objectives.trainers.episode_returns`:
    an episode still running when the rollout stops is not counted; sub-envs may end their episodes at
    different steps), and ``out_keys[key]`` (default ``"r_evaluation"``), the mean reward per step of
    the whole rollout divided by ``frame_skip``; other ``log_keys`` are logged as their mean. Give
    ``record_frames`` at least the episode length (the env's time limit): when no episode ends within
    the rollout, the call raises instead of logging a partial sum.

    Args:
        record_interval: number of calls between two rollouts.
        record_frames: rollout length in steps (per sub-env).
        frame_skip: env frames per step.
        policy_exploration: the policy (``td -> td``).
        environment: anything with ``rollout(max_steps, policy, ...)`` returning a ``[*B, T]``
            TensorDict with done flags (``("next", "done")``, ``"terminated"`` or ``"truncated"``).
        exploration_type: the interaction type of the rollout (an ``InteractionType`` or its name).
        log_keys: the rollout entries to log; default ``[("next", "reward")]``.
        out_keys: log names per key; default ``{("next", "reward"): "r_evaluation"}``, other keys:
            their parts joined by ``"_"``.
        log_pbar: also show the values on the progress bar.
        record_first: record on the first call (default), else on the ``record_interval``-th.
        done_keys: the flags that end an episode (see :func:`~rl_objectives.trainers.evaluate_episodes`).
        reward_key: the reward whose whole-episode return is logged (``("next", "agents", "reward")``
            for a multi-agent group: one return per agent, averaged). Default ``("next", "reward")``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import LogValidationReward
        >>> class Env:  # episodes of 2 steps, reward 1 per step
        ...     def rollout(self, max_steps, policy=None, **kwargs):
        ...         done = torch.arange(1, max_steps + 1) % 2 == 0
        ...         return TensorDict({"next": {"reward": torch.ones(max_steps), "done": done}}, batch_size=[max_steps])
        >>> hook = LogValidationReward(record_interval=2, record_frames=5, policy_exploration=lambda td: td, environment=Env())
        >>> hook()  # two whole episodes in 5 steps; the fifth step starts a third one
        {'r_evaluation': 1.0, 'total_r_evaluation': 2.0, 'log_pbar': False}
        >>> hook() is None  # not due: nothing recorded
        True
    """

    def __init__(
        self,
        *,
        record_interval: int,
        record_frames: int,
        frame_skip: int = 1,
        policy_exploration: Any,
        environment: Any,
        exploration_type: Any = InteractionType.DETERMINISTIC,
        log_keys: Sequence[Any] | None = None,
        out_keys: Mapping[Any, str] | None = None,
        log_pbar: bool = False,
        record_first: bool = True,
        done_keys: Sequence[Any] | None = None,
        reward_key: Any = ("next", "reward"),
    ) -> None:
        self.record_interval = check_positive_int("LogValidationReward", "record_interval", record_interval)
        self.record_frames = check_positive_int("LogValidationReward", "record_frames", record_frames)
        self.frame_skip = check_positive_int("LogValidationReward", "frame_skip", frame_skip)
        if not callable(policy_exploration):
            raise TypeError(
                f"LogValidationReward: policy_exploration must be callable (td -> td), got {type(policy_exploration).__name__}."
            )
        if not callable(getattr(environment, "rollout", None)):
            raise TypeError(
                f"LogValidationReward: environment must have a rollout() method, got {type(environment).__name__}."
            )
        try:
            self.exploration_type = InteractionType(exploration_type)
        except ValueError:
            raise ValueError(
                f"LogValidationReward: exploration_type must name an InteractionType {[t.value for t in InteractionType]}, got {exploration_type!r}."
            ) from None
        if done_keys is not None and (
            isinstance(done_keys, (str, tuple)) or not isinstance(done_keys, Sequence) or not done_keys
        ):
            raise ValueError(
                f"LogValidationReward: done_keys must be a non-empty list of keys or None, got {done_keys!r}."
            )
        self.policy_exploration = policy_exploration
        self.environment = environment
        self.reward_key = unravel_key(reward_key)
        self.log_keys = [unravel_key(k) for k in (log_keys if log_keys is not None else [self.reward_key])]
        names = {self.reward_key: "r_evaluation"}
        for key, name in (out_keys or {}).items():
            names[unravel_key(key)] = name
        self.out_keys = {k: names.get(k, _key_name(k)) for k in self.log_keys}
        self.log_pbar = bool(log_pbar)
        if not isinstance(record_first, bool):
            raise TypeError(f"LogValidationReward: record_first must be a bool, got {type(record_first).__name__}.")
        self._phase = (
            0 if record_first else 1
        )  # added to the call count: 1 shifts the rollouts to the interval's last call
        self.done_keys = None if done_keys is None else [unravel_key(k) for k in done_keys]
        self._count = 0

    def _rollout(self) -> TensorDictBase:
        return eval_rollout(self.environment, self.policy_exploration, self.record_frames, self.exploration_type)

    def __call__(self, batch: Any = None) -> dict[str, Any] | None:
        out = None
        if (self._count + self._phase) % self.record_interval == 0:
            record = self._rollout()
            present = record.keys(include_nested=True)
            missing = [k for k in self.log_keys if k not in present]
            if missing:
                raise KeyError(f"LogValidationReward: the rollout has no {missing}; keys: {list(present)}.")
            out = {}
            for key in self.log_keys:
                value = record.get(key).detach().float()
                name = self.out_keys[key]
                if key == self.reward_key:
                    returns = episode_returns(value, _done_mask(record, self.done_keys, "LogValidationReward"))
                    if returns.shape[0] == 0:
                        raise RuntimeError(
                            f"LogValidationReward: no episode ended within record_frames={self.record_frames} steps, so there "
                            f"is no whole-episode return to log; give record_frames at least the episode length (the env's time limit)."
                        )
                    out[name] = float(value.mean()) / self.frame_skip
                    out[f"total_{name}"] = float(returns.mean())
                else:
                    out[name] = float(value.mean())
            out["log_pbar"] = self.log_pbar
        self._count += 1
        return out

    def _env_has_state(self) -> bool:
        return callable(getattr(self.environment, "state_dict", None)) and callable(
            getattr(self.environment, "load_state_dict", None)
        )

    def state_dict(self) -> dict[str, Any]:
        """The call count and the evaluation env's ``state_dict`` (its generators: the next resets)."""
        state: dict[str, Any] = {"_count": self._count}
        if self._env_has_state():
            state["environment"] = self.environment.state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        count = _int_state("LogValidationReward", state_dict, ["_count"])["_count"]
        if "environment" in state_dict and self._env_has_state():
            self.environment.load_state_dict(state_dict["environment"])
        self._count = count

    def register(self, trainer: Any, name: str = "recorder") -> None:
        trainer.register_op("post_steps_log", self)
        trainer.register_module(name, self)
