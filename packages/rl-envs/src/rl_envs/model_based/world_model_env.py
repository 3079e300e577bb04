"""WorldModelEnv: a learnt world model stepped as an env, in its latent space (TorchRL's ``WorldModelEnv``)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import NestedKey, TensorDict, TensorDictBase, unravel_key
from tdict.specs import Composite, Unbounded

from ..env_base import EnvBase
from .common import ModelBasedEnvBase

__all__ = ["WorldModelEnv"]


class WorldModelEnv(ModelBasedEnvBase):
    """Imagined episodes of a world model, with the real env's action, reward and done specs.

    The world model is any object with an ``encode`` method and a ``step_module`` (dynamics and
    heads, writing under ``"next"``), such as :class:`rl_objectives.modules.WorldModel`. The env
    steps in latent space: each step runs ``step_module`` on the current latent and action and
    returns what it wrote under ``"next"`` (the observations the spec declares, the reward, the
    done flags; a head that is absent gives zeros, and a head's trailing dim of 1 is dropped when
    the real env's reward or flag has none). An episode starts from a latent the caller
    provides: ``reset(world_model.encode(observation_td))``, or ``rollout(..., tensordict=...)``.

    Args:
        world_model: the model (``encode`` and ``step_module``).
        base_env: the real env whose action, reward and done specs are copied (it is not stepped).
        observation_spec: the observations (default: the latent alone, its shape found by encoding
            ``base_env`` 's fake observation).
        batch_size: default ``base_env`` 's, or ``[1]`` for an unbatched one.
        device: default ``base_env`` 's.
        latent_key: where the latent lives.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_envs import PendulumEnv
        >>> class Model:  # a world model: encode + step_module
        ...     encode = TensorDictModule(torch.nn.Linear(3, 4), in_keys=["observation"], out_keys=["latent"])
        ...     step_module = TensorDictModule(lambda z, a: (z + a.sum(-1, keepdim=True), z.sum(-1)),
        ...         in_keys=["latent", "action"], out_keys=[("next", "latent"), ("next", "reward")])
        >>> env = WorldModelEnv(Model(), PendulumEnv(), batch_size=[2])
        >>> start = Model.encode(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        >>> rollout = env.rollout(5, tensordict=start)
        >>> rollout.batch_size, rollout["next", "latent"].shape
        (torch.Size([2, 5]), torch.Size([2, 5, 4]))
    """

    def __init__(
        self,
        world_model: Any,
        base_env: EnvBase,
        *,
        observation_spec: Composite | None = None,
        batch_size: int | Sequence[int] | torch.Size | None = None,
        device: Any = None,
        latent_key: NestedKey = "latent",
    ) -> None:
        if not hasattr(world_model, "step_module") or not callable(getattr(world_model, "encode", None)):
            raise TypeError(
                f"WorldModelEnv: world_model must have encode() and step_module (a WorldModel), got "
                f"{type(world_model).__name__}."
            )
        if batch_size is None:
            batch_size = base_env.batch_size if len(base_env.batch_size) else torch.Size([1])
        batch_size = torch.Size([batch_size] if isinstance(batch_size, int) else batch_size)
        device = base_env.device if device is None else device
        super().__init__(world_model.step_module, device=device, batch_size=batch_size, allow_done_after_reset=True)
        self.__dict__["_model"] = world_model  # the whole model (encode, decode), not a submodule twice
        self.latent_key = unravel_key(latent_key)
        # the real env's specs of one sub-env, expanded to this env's batch
        self.full_action_spec_unbatched = base_env.full_action_spec_unbatched
        self.full_reward_spec_unbatched = base_env.full_reward_spec_unbatched
        self.full_done_spec_unbatched = base_env.full_done_spec_unbatched
        if observation_spec is None:
            latent = world_model.encode(base_env.fake_tensordict()).get(self.latent_key)
            feature = latent.shape[len(base_env.batch_size) :]
            self.full_observation_spec_unbatched = Composite(
                {self.latent_key: Unbounded(shape=feature, dtype=latent.dtype)}, shape=()
            )
        else:
            self.observation_spec = observation_spec

    @property
    def world_model_full(self) -> Any:
        """The whole world model (the env steps its ``step_module``)."""
        return self.__dict__["_model"]

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self._call_world_model(tensordict.copy())
        nxt = out.get("next", None)
        result = TensorDict.unchecked({}, tensordict.batch_size, tensordict.device)
        keys = self._keys()
        for key in keys.observation_keys:
            value = None if nxt is None else nxt.get(key, None)
            if value is not None:
                result.set(key, value)
        extra = tensordict.batch_size[: tensordict.batch_dims - keys.batch_dims]
        for spec, names in ((self.full_reward_spec, keys.reward_keys), (self.full_done_spec, keys.done_keys)):
            for key in names:
                value = None if nxt is None else nxt.get(key, None)
                if value is None:
                    value = spec[key].zero(extra)
                elif value.shape == (*extra, *spec[key].shape, 1):  # a head's trailing dim of 1, which the env has not
                    value = value.squeeze(-1)
                result.set(key, value)
        return result

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if tensordict is None or tensordict.get(self.latent_key, None) is None:
            raise RuntimeError(
                f"WorldModelEnv.reset needs the starting latent under {self.latent_key!r}: encode an observation "
                "(world_model.encode(td)) and pass it as reset(td) or rollout(..., tensordict=td)."
            )
        out = tensordict.copy()
        done = self.full_done_spec.zero(tensordict.batch_size[: tensordict.batch_dims - len(self.batch_size)])
        for key in done.keys(True, True):
            out.set(key, done.get(key))
        return out
