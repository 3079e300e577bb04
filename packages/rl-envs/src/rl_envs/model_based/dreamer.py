"""DreamerEnv: imagination in a Dreamer world model's latent space; DreamerDecoder: its decoded frames."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import TensorDictBase
from tdict.specs import Composite

from ..env_base import EnvBase
from ..transforms import Transform
from .common import ModelBasedEnvBase

__all__ = ["DreamerDecoder", "DreamerEnv"]


class DreamerEnv(ModelBasedEnvBase):
    """The latent state (``"state"``, ``"belief"``) stepped by a Dreamer world model (TorchRL's ``DreamerEnv``).

    ``world_model`` maps ``(state, belief, action)`` to the next ``state``, ``belief`` and the
    ``reward`` (e.g. ``WorldModelWrapper`` of an ``RSSMPriorV3`` and a reward head). Imagined
    episodes never end: the done flags stay ``False``, nothing is reset on the way, and a
    rollout runs its whole horizon. :meth:`set_specs_from_env` takes the real env's specs, whose
    observation spec must hold ``"state"`` and ``"belief"`` (e.g. added by a primer); ``reset``
    starts from a given TensorDict of latents, or from random ones.

    Args:
        world_model: the model stepped.
        prior_shape / belief_shape: the shapes of ``"state"`` and ``"belief"``.
        obs_decoder: decodes latents into observations (:meth:`decode_obs`, :class:`DreamerDecoder`).
        device: where the env lives.
        batch_size: the env's batch size.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, TensorDictSequential
        >>> from tdict.specs import Composite, Unbounded
        >>> step = TensorDictModule(lambda s, b, a: (s + a, b + 1, s.sum(-1, keepdim=True)),
        ...                         in_keys=["state", "belief", "action"], out_keys=["state", "belief", "reward"])
        >>> env = DreamerEnv(step, prior_shape=(2,), belief_shape=(3,))
        >>> env.observation_spec = Composite(state=Unbounded((2,)), belief=Unbounded((3,)))
        >>> env.state_spec = env.observation_spec.clone()
        >>> env.action_spec, env.reward_spec = Unbounded((2,)), Unbounded((1,))
        >>> start = TensorDict(state=torch.zeros(4, 2), belief=torch.zeros(4, 3), batch_size=[4])
        >>> out = env.rollout(6, lambda td: td.set("action", torch.ones(4, 2)), auto_reset=False,
        ...                   tensordict=env.reset(start))
        >>> out.batch_size, out["next", "belief"][0, -1].tolist(), bool(out["next", "done"].any())
        (torch.Size([4, 6]), [6.0, 6.0, 6.0], False)
    """

    def __init__(
        self,
        world_model: torch.nn.Module,
        prior_shape: Sequence[int],
        belief_shape: Sequence[int],
        obs_decoder: torch.nn.Module | None = None,
        device: Any = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
    ) -> None:
        super().__init__(world_model, device=device, batch_size=batch_size, allow_done_after_reset=True)
        self.obs_decoder = obs_decoder
        self.prior_shape, self.belief_shape = tuple(prior_shape), tuple(belief_shape)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Imagined episodes never end: nothing to reset."""
        return tensordict

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Takes ``env`` 's specs; the state spec becomes its ``"state"`` and ``"belief"`` observations."""
        super().set_specs_from_env(env)
        observation = self.observation_spec
        missing = [k for k in ("state", "belief") if k not in observation.keys()]
        if missing:
            raise KeyError(
                f"DreamerEnv.set_specs_from_env: the env observes no {missing}; add the latents to its observation "
                "spec (e.g. with a TensorDictPrimer of state and belief)."
            )
        self.state_spec = Composite(state=observation["state"], belief=observation["belief"], shape=env.batch_size)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if tensordict is not None:
            return tensordict.clone()
        td = self.full_state_spec.rand()
        td.update(self.full_observation_spec.rand())
        return td if self.device is None else td.to(self.device)

    def decode_obs(self, tensordict: TensorDictBase, compute_latents: bool = False) -> TensorDictBase:
        """The observations decoded from the latents in ``tensordict`` (after one world-model call
        with ``compute_latents``)."""
        if self.obs_decoder is None:
            raise ValueError("DreamerEnv.decode_obs: the env has no obs_decoder.")
        if compute_latents:
            tensordict = self.world_model(tensordict)
        return self.obs_decoder(tensordict)


class DreamerDecoder(Transform):
    """Writes the observations decoded from each imagined step (the base ``DreamerEnv`` 's ``obs_decoder``).

    Examples:
        >>> from rl_envs import TransformedEnv
        >>> env = TransformedEnv(DreamerEnv(torch.nn.Identity(), (2,), (3,)), DreamerDecoder())
    """

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError("DreamerDecoder: the transform is not attached to an env.")
        base = parent.base_env
        decoder = getattr(base, "obs_decoder", None)
        if decoder is None:
            raise ValueError(f"DreamerDecoder: the base env ({type(base).__name__}) has no obs_decoder.")
        return decoder(next_tensordict)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)
