"""ModelBasedEnvBase: an env whose steps are the predictions of a learnt model (TorchRL's base class)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import TensorDictBase

from ..env_base import SPEC_NAMES, EnvBase

__all__ = ["ModelBasedEnvBase"]


class ModelBasedEnvBase(EnvBase):
    """A batch-unlocked env that steps by calling ``world_model`` on the step's TensorDict.

    A step runs ``world_model`` on a shallow copy of its input and keeps the entries the specs
    declare (observations, rewards, done flags; missing done flags are ``False``). Subclasses
    write ``_reset`` (how an imagined episode starts) and set the specs, for instance copied from
    the real env with :meth:`set_specs_from_env`. The env takes any leading batch (``batch_locked``
    is ``False``), as TorchRL's.

    Args:
        world_model: a TensorDict module (state and action in, next state, reward... out).
        params / buffers: tensors to call the world model with instead of its own parameters and
            buffers (``torch.func.functional_call``), in the order of ``named_parameters()`` /
            ``named_buffers()``.
        device: where the env and the world model live (the model is moved there).
        batch_size: the env's batch size.
        run_type_checks: accepted for TorchRL compatibility (the first step is always checked).
        allow_done_after_reset: see :class:`~rl_envs.EnvBase`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from tdict.specs import Composite, Unbounded
        >>> class Imagined(ModelBasedEnvBase):
        ...     def __init__(self, world_model):
        ...         super().__init__(world_model)
        ...         self.observation_spec = Composite(hidden=Unbounded((4,)))
        ...         self.state_spec = Composite(hidden=Unbounded((4,)))
        ...         self.action_spec = Unbounded((1,))
        ...     def _reset(self, tensordict=None, **kwargs):
        ...         return TensorDict(hidden=torch.zeros(*(tensordict.batch_size if tensordict is not None else ()), 4))
        >>> class Model(torch.nn.Module):
        ...     def forward(self, hidden, action):
        ...         return hidden + action, (hidden + action).sum(-1)
        >>> env = Imagined(TensorDictModule(Model(), in_keys=["hidden", "action"], out_keys=["hidden", "reward"]))
        >>> rollout = env.rollout(3, lambda td: td.set("action", torch.ones(*td.batch_size, 1)))
        >>> rollout["next", "hidden"][:, 0].tolist(), rollout["next", "reward"].tolist()
        ([1.0, 2.0, 3.0], [4.0, 8.0, 12.0])
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__new__(cls, *args, _batch_locked=False, **kwargs)

    def __init__(
        self,
        world_model: torch.nn.Module,
        params: Sequence[torch.Tensor] | None = None,
        buffers: Sequence[torch.Tensor] | None = None,
        device: Any = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size, allow_done_after_reset=allow_done_after_reset)
        self.world_model = world_model.to(self.device) if self.device is not None else world_model
        self.world_model_params = None if params is None else list(params)
        self.world_model_buffers = None if buffers is None else list(buffers)
        self.run_type_checks = run_type_checks

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Takes ``env`` 's specs (and batch size): the imagined env presents the real one's data."""
        self.batch_size = env.batch_size
        for name in SPEC_NAMES:
            spec = getattr(env, name).clone()
            setattr(self, name, spec.to(self.device) if self.device is not None else spec)

    def _call_world_model(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.world_model_params is None and self.world_model_buffers is None:
            return self.world_model(tensordict)
        tensors = {}
        for names, values in (
            (self.world_model.named_parameters(), self.world_model_params),
            (self.world_model.named_buffers(), self.world_model_buffers),
        ):
            if values is not None:
                names = [name for name, _ in names]
                if len(names) != len(values):
                    raise ValueError(
                        f"{type(self).__name__}: got {len(values)} tensors for the world model's {len(names)} "
                        "parameters (or buffers)."
                    )
                tensors.update(zip(names, values))
        return torch.func.functional_call(self.world_model, tensors, (tensordict,))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self._call_world_model(tensordict.copy())  # a shallow copy: the input keeps its entries
        keys = self._keys()
        wanted = [*keys.observation_keys, *keys.reward_keys, *keys.done_keys]
        return out.select(*wanted, strict=False)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset: how an imagined episode starts.")

    def _set_seed(self, seed: int | None) -> None:
        """Nothing to seed: the world model draws from torch's generator."""
