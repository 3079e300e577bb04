"""DreamerV3Loss: DreamerV3's world-model, actor and critic losses in one call (TorchRL 0.14's name,
arguments and keys).

The model loss runs on the replayed sequences; the actor loss imagines from their posterior
states (detached, flattened); the value loss regresses the imagined lambda-returns; with
``replay_value_loss_weight > 0`` the critic also regresses replayed returns bootstrapped with the
imagined ones, through the posterior states (so it trains the representation too).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict, TensorDictBase, unravel_key
from tdict.validation import check_non_negative, check_positive, check_unit_interval

from .common import LossModule
from .dreamer_v3_actor import DreamerV3ActorLoss
from .dreamer_v3_model import DreamerV3ModelLoss
from .dreamer_v3_value import DreamerV3ValueLoss

__all__ = ["DreamerV3Loss"]


class DreamerV3Loss(LossModule):
    """DreamerV3's world-model, actor and critic losses in one call (TorchRL's ``DreamerV3Loss``).

    ``forward(sample)`` runs ``model_loss`` on the replayed sequences ``[*B, T]``, imagines from
    every posterior state (``("next", "state")`` / ``("next", "belief")``, detached, flattened), runs
    ``value_loss`` on the imagined data and, with ``replay_value_loss_weight > 0``, the critic on
    the replayed posteriors against lambda-returns bootstrapped with each state's first imagined
    return (``loss_replay_value``, which trains the representation too). It returns one TensorDict:
    the losses of the three (sum the ``loss_*`` entries), ``replay_value`` (detached) and the
    detached posteriors under ``"replay_context"``.

    Args:
        model_loss: a :class:`DreamerV3ModelLoss` (``detach_output=False`` for the replay term).
        actor_loss: a :class:`DreamerV3ActorLoss`.
        value_loss: a :class:`DreamerV3ValueLoss`.

    Keyword Args:
        replay_value_loss_weight: the replay term's weight, >= 0 (0 turns it off). Default 0.3.
        continuation_horizon: the replay targets' horizon (discount ``1 - 1 / horizon``). Default 333.
        lmbda: the replay targets' lambda. Default 0.95.

    Keys (``set_keys``): ``state``, ``belief``, ``is_init``, ``replay_context``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from tdict.nn import ProbabilisticTensorDictModule as Prob, ProbabilisticTensorDictSequential as Seq
        >>> from tdict.specs import Composite, Unbounded
        >>> from rl_envs.model_based import DreamerEnv
        >>> from rl_objectives.modules import MLP
        >>> class World(torch.nn.Module):  # writes what a DreamerV3 world model writes
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.post, self.prior, self.reward = torch.nn.Linear(3, 4), torch.nn.Linear(3, 4), torch.nn.Linear(2, 1)
        ...     def forward(self, td):
        ...         o = td["next", "pixels"]
        ...         td.set(("next", "posterior_logits"), self.post(o).unflatten(-1, (2, 2)))
        ...         td.set(("next", "prior_logits"), self.prior(o).unflatten(-1, (2, 2)))
        ...         td.set(("next", "state"), self.post(o)[..., :2])
        ...         td.set(("next", "belief"), self.post(o)[..., 2:3])
        ...         td.set(("next", "reco_pixels"), o * 0.5)
        ...         td.set(("next", "reward"), self.reward(td["next", "state"]))
        ...         return td
        >>> step = TensorDictModule(lambda s, b, a: (s + a, b, s.sum(-1, keepdim=True)),
        ...                         in_keys=["state", "belief", "action"], out_keys=["state", "belief", "reward"])
        >>> env = DreamerEnv(step, prior_shape=(2,), belief_shape=(1,))
        >>> env.observation_spec = Composite(state=Unbounded((2,)), belief=Unbounded((1,)))
        >>> env.state_spec, env.action_spec, env.reward_spec = env.observation_spec.clone(), Unbounded((2,)), Unbounded((1,))
        >>> actor = Seq(TensorDictModule(MLP(2, 2, depth=0), in_keys=["state"], out_keys=["loc"]),
        ...             Prob(in_keys=["loc"], out_keys=["action"], distribution_kwargs={"scale": 1.0}))
        >>> critic = TensorDictModule(MLP(2, 1, depth=0), in_keys=["state"], out_keys=["state_value"])
        >>> actor_loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=2)
        >>> loss = DreamerV3Loss(DreamerV3ModelLoss(World(), reward_two_hot=False, detach_output=False),
        ...                      actor_loss, DreamerV3ValueLoss(critic, actor_loss=actor_loss))
        >>> sample = TensorDict({"next": {"pixels": torch.randn(2, 3, 3), "reward": torch.randn(2, 3, 1),
        ...     "done": torch.zeros(2, 3, 1, dtype=torch.bool), "terminated": torch.zeros(2, 3, 1, dtype=torch.bool)}},
        ...     [2, 3])
        >>> out = loss(sample)
        >>> sorted(k for k in out.keys() if k.startswith("loss_"))
        ['loss_actor', 'loss_model_kl', 'loss_model_reco', 'loss_model_reward', 'loss_replay_value', 'loss_value']
    """

    default_keys: ClassVar[dict] = {
        "state": "state",
        "belief": "belief",
        "is_init": "is_init",
        "replay_context": "replay_context",
    }

    def __init__(
        self,
        model_loss: DreamerV3ModelLoss,
        actor_loss: DreamerV3ActorLoss,
        value_loss: DreamerV3ValueLoss,
        *,
        replay_value_loss_weight: float = 0.3,
        continuation_horizon: float = 333.0,
        lmbda: float = 0.95,
    ) -> None:
        owner = type(self).__name__
        for name, given, cls in (
            ("model_loss", model_loss, DreamerV3ModelLoss),
            ("actor_loss", actor_loss, DreamerV3ActorLoss),
            ("value_loss", value_loss, DreamerV3ValueLoss),
        ):
            if not isinstance(given, cls):
                raise TypeError(f"{owner}: {name} must be a {cls.__name__}, got {type(given).__name__}.")
        weight = float(check_non_negative(owner, "replay_value_loss_weight", replay_value_loss_weight, finite=True))
        horizon = float(check_positive(owner, "continuation_horizon", continuation_horizon, finite=True))
        if horizon < 1.0:
            raise ValueError(f"{owner}: continuation_horizon must be a number >= 1, got {continuation_horizon!r}.")
        lmbda = check_unit_interval(owner, "lmbda", lmbda)
        if weight and model_loss.detach_output:
            raise ValueError(
                f"{owner}: replay_value_loss_weight={weight} needs model_loss built with detach_output=False (the "
                "replay value loss trains the representation through the posterior states)."
            )
        super().__init__()
        self.model_loss, self.actor_loss, self.value_loss = model_loss, actor_loss, value_loss
        self.replay_value_loss_weight, self.continuation_horizon, self.lmbda = weight, horizon, lmbda

    @property
    def in_keys(self) -> list[Any]:
        """The world model's inputs, the reset marker and the real transitions' targets."""
        pixels = self.model_loss.tensor_keys.pixels
        pixels = pixels if isinstance(pixels, list) else [pixels]
        value_keys = self.value_loss.tensor_keys
        keys = [
            *getattr(self.model_loss.world_model, "in_keys", []),
            self.tensor_keys.is_init,
            *(unravel_key(("next", key)) for key in pixels),
            unravel_key(("next", self.model_loss.tensor_keys.reward)),
            unravel_key(("next", value_keys.reward)),
            unravel_key(("next", value_keys.done)),
            unravel_key(("next", value_keys.terminated)),
        ]
        return list(dict.fromkeys(unravel_key(k) for k in keys))

    def forward(self, sample: TensorDictBase) -> TensorDict:
        owner, keys = type(self).__name__, self.tensor_keys
        model_losses, posterior = self.model_loss(sample)
        features = {}
        for name in ("state", "belief"):
            key = unravel_key(("next", getattr(keys, name)))
            value = posterior.get(key, None)
            if value is None:
                raise KeyError(f"{owner}: the world model wrote no {key!r} (the posterior {name} key, under 'next').")
            features[name] = value
        state, belief = features["state"], features["belief"]
        n = sample.numel()
        akeys = self.actor_loss.tensor_keys
        start = TensorDict.unchecked(
            {
                akeys.state: state.detach().reshape(n, *state.shape[sample.batch_dims :]),
                akeys.belief: belief.detach().reshape(n, *belief.shape[sample.batch_dims :]),
            },
            torch.Size([n]),
            None,
        )
        actor_losses, imagined = self.actor_loss(start)
        value_losses, _ = self.value_loss(imagined.detach())
        if self.replay_value_loss_weight:
            vkeys = self.value_loss.tensor_keys
            replay = posterior.get("next").select(*self.value_loss.value_model.in_keys, strict=False)
            replay.set(vkeys.bootstrap, imagined.get("lambda_target")[..., 0, 0].reshape(sample.batch_size))
            replay.set("next", sample.get("next").select(vkeys.reward, vkeys.done, vkeys.terminated))
            replay_value = self.value_loss.replay_value_loss(
                replay, horizon=self.continuation_horizon, lmbda=self.lmbda
            )["loss_replay_value"]
        else:
            replay_value = state.new_zeros(())
        result = model_losses.apply(torch.squeeze)
        result.update(actor_losses)
        result.update(value_losses)
        result.set("loss_replay_value", self.replay_value_loss_weight * replay_value)
        result.set("replay_value", replay_value.detach())
        result.set(keys.replay_context, posterior.get("next").select(keys.state, keys.belief).detach())
        return result
