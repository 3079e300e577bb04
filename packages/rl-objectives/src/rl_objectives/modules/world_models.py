"""World models as TensorDict modules (TorchRL's ``WorldModel`` and ``WorldModelWrapper``).

A world model is a composition of key-driven modules: an encoder (observation -> latent), the
dynamics (latent, action -> next latent), a reward head, and optionally a done head and a decoder.
``rl_envs.model_based.WorldModelEnv`` steps its ``step_module`` as an env, so rollouts and
collectors run in imagination with the same code as on a real env.
"""

from __future__ import annotations

from tdict import TensorDictBase
from tdict.nn import TensorDictModuleBase, TensorDictSequential

__all__ = ["WorldModel", "WorldModelWrapper"]


class WorldModel(TensorDictModuleBase):
    """Encoder, dynamics, reward head and optional done head and decoder, called by name or in sequence.

    Calling the module runs them all in that order; :meth:`encode`, :meth:`step` (dynamics and
    heads, no encoder) and :meth:`decode` run parts of it.

    Args:
        encoder: observation -> latent (e.g. ``"observation" -> "latent"``).
        dynamics: latent and action -> next latent (``("next", "latent")``).
        reward_head: next latent -> ``("next", "reward")``.
        done_head: next latent -> ``("next", "done")`` (optional).
        decoder: latent -> reconstructed observation (optional; needed by :meth:`decode`).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> encoder = TensorDictModule(torch.nn.Linear(8, 4), in_keys=["observation"], out_keys=["latent"])
        >>> from rl_objectives.modules import MLP  # concatenates its inputs
        >>> dynamics = TensorDictModule(MLP(6, 4, depth=0), in_keys=["latent", "action"],
        ...                             out_keys=[("next", "latent")])
        >>> reward = TensorDictModule(torch.nn.Linear(4, 1), in_keys=[("next", "latent")],
        ...                           out_keys=[("next", "reward")])
        >>> model = WorldModel(encoder, dynamics, reward)
        >>> out = model(TensorDict(observation=torch.randn(2, 8), action=torch.randn(2, 2), batch_size=[2]))
        >>> out["next", "reward"].shape
        torch.Size([2, 1])
    """

    def __init__(
        self,
        encoder: TensorDictModuleBase,
        dynamics: TensorDictModuleBase,
        reward_head: TensorDictModuleBase,
        *,
        done_head: TensorDictModuleBase | None = None,
        decoder: TensorDictModuleBase | None = None,
    ) -> None:
        super().__init__()
        self.encoder, self.dynamics, self.reward_head = encoder, dynamics, reward_head
        self.done_head, self.decoder = done_head, decoder
        heads = [m for m in (done_head, decoder) if m is not None]
        self._step_seq = TensorDictSequential(dynamics, reward_head, *heads)
        self._full_seq = TensorDictSequential(encoder, dynamics, reward_head, *heads)
        self.in_keys, self.out_keys = list(self._full_seq.in_keys), list(self._full_seq.out_keys)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Encoder, dynamics, reward head, then the done head and the decoder when there are."""
        return self._full_seq(tensordict)

    def encode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The encoder alone: writes the latent of the observation in ``tensordict``."""
        return self.encoder(tensordict)

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """One imagined step from the latent in ``tensordict``: dynamics and heads, no encoder."""
        return self._step_seq(tensordict)

    def decode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The decoder alone; ``RuntimeError`` when the model has none."""
        if self.decoder is None:
            raise RuntimeError("WorldModel.decode: the model has no decoder (pass decoder= when building it).")
        return self.decoder(tensordict)

    @property
    def step_module(self) -> TensorDictSequential:
        """The dynamics and heads as one sequence (what ``WorldModelEnv`` steps)."""
        return self._step_seq


class WorldModelWrapper(TensorDictSequential):
    """A transition model followed by a reward model (the world model of ``DreamerEnv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import MLP
        >>> transition = TensorDictModule(MLP(5, 4, depth=0), in_keys=["state", "action"], out_keys=["state"])
        >>> reward = TensorDictModule(torch.nn.Linear(4, 1), in_keys=["state"], out_keys=["reward"])
        >>> model = WorldModelWrapper(transition, reward)
        >>> model(TensorDict(state=torch.zeros(3, 4), action=torch.ones(3, 1), batch_size=[3]))["reward"].shape
        torch.Size([3, 1])
        >>> model.get_reward_operator() is reward
        True
    """

    def __init__(self, transition_model: TensorDictModuleBase, reward_model: TensorDictModuleBase) -> None:
        super().__init__(transition_model, reward_model)
        self.__dict__["_parts"] = (transition_model, reward_model)  # registered once, by the sequence

    def get_transition_model_operator(self) -> TensorDictModuleBase:
        """The transition model (world state and action -> next world state)."""
        return self.__dict__["_parts"][0]

    def get_reward_operator(self) -> TensorDictModuleBase:
        """The reward model (world state -> reward)."""
        return self.__dict__["_parts"][1]
