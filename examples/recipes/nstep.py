"""n-step transitions for the off-policy recipes (``buffer.n_steps``).

Each collected batch ``[*envs, T]`` becomes n-step transitions before it goes into the replay
buffer (rl_replay's :class:`~rl_replay.MultiStepTransform`): the reward of step ``t`` is
``sum_{i<k} gamma**i * r_{t+i}``, its next observation the one after step ``t + k - 1``, and
``"steps_to_next_obs" = k``, where ``k <= n`` stops at the first done flag. The losses' value
estimators then bootstrap with ``gamma ** k``. Unlike the transform alone, the next ``done`` and
``terminated`` flags are those of the window's last step, so a window that runs into a termination
does not bootstrap past it. The last ``n`` steps of each env wait for the next batch (they are in
the trainer's checkpoint: a resumed run loses none).
"""

from __future__ import annotations

from typing import Any

from rl_replay import MultiStepTransform
from tdict import TensorDictBase

_END_FLAGS = ("done", "terminated")
_AT_WINDOW_END = "window_end"  # not a done key: MultiStepTransform takes it from the window's last step


class NStepTransitions:
    """A trainer op (``"batch_process"``, between ``SelectKeys`` and the replay buffer) turning
    collected batches into ``n_steps``-step transitions discounted by ``gamma``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> op = NStepTransitions(n_steps=2, gamma=0.5)
        >>> flags = torch.zeros(4, dtype=torch.bool)
        >>> batch = TensorDict(observation=torch.arange(4.0), next=TensorDict(observation=torch.arange(1.0, 5.0),
        ...     reward=torch.ones(4), done=flags, terminated=flags, batch_size=[4]), batch_size=[4])
        >>> out = op(batch)  # the last 2 steps wait for the next batch
        >>> out["next", "reward"].tolist(), out["next", "observation"].tolist(), out["steps_to_next_obs"].tolist()
        ([1.5, 1.5], [2.0, 3.0], [2, 2])
    """

    def __init__(self, n_steps: int, gamma: float) -> None:
        self.multistep = MultiStepTransform(n_steps=n_steps, gamma=gamma)

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        nxt = batch.get("next")
        missing = [("next", key) for key in _END_FLAGS if key not in nxt.keys()]
        if missing:
            raise KeyError(f"NStepTransitions: the batch has no {missing}; keys: {list(batch.keys(True, True))}.")
        batch = batch.copy()
        batch.set(("next", _AT_WINDOW_END), nxt.select(*_END_FLAGS))
        out = self.multistep.inv(batch)
        if out is None:  # fewer than n + 1 steps held so far: nothing complete to store
            return batch[..., :0].exclude(("next", _AT_WINDOW_END))
        ends = out.get(("next", _AT_WINDOW_END))
        out = out.exclude(("next", _AT_WINDOW_END))
        for key in _END_FLAGS:
            out.set(("next", key), ends.get(key))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The steps held for the next batch (:meth:`MultiStepTransform.state_dict`)."""
        return self.multistep.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.multistep.load_state_dict(state)

    def register(self, trainer: Any, name: str = "n_step_transitions") -> None:
        trainer.register_op("batch_process", self)
        trainer.register_module(name, self)
