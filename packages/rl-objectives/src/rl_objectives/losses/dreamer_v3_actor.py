"""DreamerV3ActorLoss: DreamerV3's actor objective (Hafner et al. 2023), TorchRL 0.14's names, arguments
and keys (:class:`~rl_objectives.DreamerV3Loss` runs it with the model and value losses in one call).

The actor loss imagines ``imagination_horizon`` steps from the given latent states in a model env
(``DreamerEnv`` / ``WorldModelEnv``: anything with ``reset`` and ``rollout``), the actor choosing
the actions, then:

- ``R_t``: the lambda-returns of the imagined rewards, bootstrapped with the critic's values of the
  next states (a critic writing two-hot logits at the value key is decoded with the symexp bins),
  the discount multiplied by the predicted continuation when a ``continuation_model`` is given;
- ``w_t``: the imagination weights ``c_0 * prod_{k=1..t} gamma * c_k`` (``gamma^t`` without a
  continuation model), with a stopped gradient;
- ``S``: ``max(min_scale, high - low)``, ``low`` / ``high`` moving averages (rate
  ``return_normalization_rate``) of the 5th and 95th return percentiles;
- ``loss_actor = -mean(w_t * R_t / S)`` (dynamics backpropagation, continuous actions), or
  ``-mean(w_t * log pi(a_t | s_t) * sg(R_t - v(s_t)) / S)`` with ``use_reinforce=True`` (discrete
  actions), minus ``entropy_bonus * mean(w_t * H[pi(. | s_t)])``.

Only the actor receives gradients: the world model, the critic and the continuation model are
held out (their parameters do not require grad during the call) while the returns still carry
the gradient of the imagined states back to the actor.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings
from typing import Any, ClassVar, Iterator

import torch
from tdict import TensorDict, TensorDictBase, unravel_key
from tdict.nn import InteractionType, set_interaction_type
from tdict.validation import check_non_negative, check_positive, check_positive_int, check_unit_interval

from .._stack import user_stacklevel as _user_stacklevel
from ..functional.dreamer import symexp_bins, two_hot_decode
from ..functional.value import vec_td_lambda_return_estimate
from ..modules.value_norm import PercentileValueNorm
from ..value import TD0Estimator, TD1Estimator, ValueEstimators
from .common import LossModule

__all__ = ["DreamerV3ActorLoss"]

_Tensor = torch.Tensor


@contextlib.contextmanager
def _held_out(*modules: Any) -> Iterator[None]:
    """The parameters of ``modules`` that require grad stop requiring it inside the block (TorchRL's
    ``hold_out_net``): the computation still differentiates through them, they get no gradient."""
    found: dict[int, torch.nn.Parameter] = {}
    for module in modules:
        if isinstance(module, torch.nn.Module):
            found.update((id(p), p) for p in module.parameters() if p.requires_grad)
    frozen = list(found.values())
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _per_step(owner: str, name: str, value: _Tensor, batch: torch.Size) -> _Tensor:
    """``value`` as ``[*batch]`` (a trailing dim of 1 dropped), or a ``ValueError`` naming ``name``."""
    if value.shape == batch:
        return value
    if value.shape == (*batch, 1):
        return value.squeeze(-1)
    raise ValueError(
        f"{owner}: {name} must have the imagined batch shape {tuple(batch)} (or with a trailing 1), "
        f"got {tuple(value.shape)}."
    )


def _decode_value(owner: str, key: Any, value: _Tensor, batch: torch.Size) -> _Tensor:
    """A critic output as ``[*batch]`` values: logits over ``K > 1`` bins are two-hot decoded with
    ``symexp_bins(K)``."""
    if value.ndim == len(batch) + 1 and value.shape[:-1] == batch and value.shape[-1] > 1:
        return two_hot_decode(value, symexp_bins(value.shape[-1], device=value.device, dtype=value.dtype))
    return _per_step(owner, f"the critic's output {unravel_key(key)!r}", value, batch)


def _to_batch(value: _Tensor, batch: torch.Size) -> _Tensor:
    """A per-sample log-prob or entropy reduced to ``[*batch]`` (trailing event dims summed)."""
    while value.ndim > len(batch):
        value = value.sum(-1)
    return value


def _entropy(dist: Any, batch: torch.Size) -> _Tensor:
    """The closed-form entropy, or a one-draw estimate ``-log pi(x)`` (reparametrised when possible)."""
    try:
        return _to_batch(dist.entropy(), batch)
    except NotImplementedError:
        pass
    if hasattr(dist, "rsample_and_log_prob"):
        _, log_prob = dist.rsample_and_log_prob()
    else:
        draw = dist.rsample() if getattr(dist, "has_rsample", False) else dist.sample()
        log_prob = dist.log_prob(draw)
    return -_to_batch(log_prob, batch)


def _check_module(owner: str, name: str, module: Any, *, optional: bool = False) -> None:
    if module is None and optional:
        return
    if not callable(module) or not hasattr(module, "in_keys"):
        raise TypeError(
            f"{owner}: {name} must be a TensorDict module (callable, with in_keys), got {type(module).__name__}."
        )


class DreamerV3ActorLoss(LossModule):
    """DreamerV3's actor loss (see the module docs).

    ``forward(tensordict)`` takes latent states ``[*B]`` (``"state"``, and ``"belief"`` when
    present) and returns ``(losses, imagined)``: ``loss_actor`` and the detached diagnostics
    ``actor_entropy``, ``return_low``, ``return_high``, ``return_scale``, ``continuation_mean``
    (all 0-dim), and the imagined rollout ``[*B, H]`` detached, with ``"lambda_target"`` and
    ``"discount_weight"`` (``[*B, H, 1]``): what :class:`DreamerV3ValueLoss` reads.

    Args:
        actor_model: the policy (a probabilistic TensorDict module with ``get_dist``), stepping the
            model env; its actions must carry a gradient (``rsample``) for dynamics backpropagation.
        value_model: the critic, writing the value key (a value, or two-hot logits); not owned.
        model_based_env: the imagination env (``reset`` and ``rollout``, e.g. ``DreamerEnv``).

    Keyword Args:
        continuation_model: writes ``"continuation"`` (probabilities) for imagined states; not owned.
        imagination_horizon: imagined steps, >= 1. Default 15.
        discount_loss: weight the steps with the imagination weights (else 1). Default ``True``.
        entropy_bonus: the entropy weight ``eta`` >= 0. Default ``3e-4``.
        use_reinforce: the REINFORCE estimator (discrete actions) instead of dynamics backprop.
        return_normalization: divide by the return scale ``S``. Default ``True``.
        return_normalization_rate / return_normalization_quantiles / return_normalization_min_scale:
            the scale's statistics (``PercentileValueNorm``, ``self.retnorm``); defaults ``0.01``,
            ``(0.05, 0.95)``, ``1.0``.
        gamma / lmbda: deprecated; use ``make_value_estimator(gamma=..., lmbda=...)`` (defaults 0.99, 0.95).

    Keys (``set_keys``): ``state``, ``belief``, ``reward``, ``value``, ``action``,
    ``action_log_prob``, ``done``, ``terminated``, ``continuation``, ``discount_weight``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from tdict.nn import ProbabilisticTensorDictModule as Prob, ProbabilisticTensorDictSequential as Seq
        >>> from tdict.specs import Composite, Unbounded
        >>> from rl_envs.model_based import DreamerEnv
        >>> from rl_objectives.modules import MLP
        >>> step = TensorDictModule(lambda s, b, a: (s + a, b, (s * a).sum(-1, keepdim=True)),
        ...                         in_keys=["state", "belief", "action"], out_keys=["state", "belief", "reward"])
        >>> env = DreamerEnv(step, prior_shape=(2,), belief_shape=(1,))
        >>> env.observation_spec = Composite(state=Unbounded((2,)), belief=Unbounded((1,)))
        >>> env.state_spec, env.action_spec, env.reward_spec = env.observation_spec.clone(), Unbounded((2,)), Unbounded((1,))
        >>> actor = Seq(TensorDictModule(MLP(2, 2, depth=0), in_keys=["state"], out_keys=["loc"]),
        ...             Prob(in_keys=["loc"], out_keys=["action"], distribution_kwargs={"scale": 1.0}))
        >>> critic = TensorDictModule(MLP(2, 1, depth=0), in_keys=["state"], out_keys=["state_value"])
        >>> loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=3)
        >>> losses, imagined = loss(TensorDict(state=torch.randn(4, 2), belief=torch.zeros(4, 1), batch_size=[4]))
        >>> losses["loss_actor"].shape, imagined["lambda_target"].shape
        (torch.Size([]), torch.Size([4, 3, 1]))
    """

    default_keys: ClassVar[dict] = {
        "state": "state",
        "belief": "belief",
        "reward": "reward",
        "value": "state_value",
        "action": "action",
        "action_log_prob": "action_log_prob",
        "done": "done",
        "terminated": "terminated",
        "continuation": "continuation",
        "discount_weight": "discount_weight",
    }
    default_value_estimator = ValueEstimators.TDLambda
    default_value_kwargs: ClassVar[dict] = {"gamma": 0.99, "lmbda": 0.95}
    out_keys = ("loss_actor", "actor_entropy", "return_low", "return_high", "return_scale", "continuation_mean")

    def __init__(
        self,
        actor_model: Any,
        value_model: Any,
        model_based_env: Any,
        *,
        continuation_model: Any = None,
        imagination_horizon: int = 15,
        discount_loss: bool = True,
        entropy_bonus: float = 3e-4,
        use_reinforce: bool = False,
        return_normalization: bool = True,
        return_normalization_rate: float = 0.01,
        return_normalization_quantiles: tuple[float, float] = (0.05, 0.95),
        return_normalization_min_scale: float = 1.0,
        gamma: float | None = None,
        lmbda: float | None = None,
    ) -> None:
        owner = type(self).__name__
        _check_module(owner, "actor_model", actor_model)
        _check_module(owner, "value_model", value_model)
        _check_module(owner, "continuation_model", continuation_model, optional=True)
        if not callable(getattr(model_based_env, "rollout", None)) or not callable(
            getattr(model_based_env, "reset", None)
        ):
            raise TypeError(
                f"{owner}: model_based_env must be an env with reset() and rollout() (e.g. DreamerEnv), got "
                f"{type(model_based_env).__name__}."
            )
        check_positive_int(owner, "imagination_horizon", imagination_horizon)
        for name, flag in (
            ("discount_loss", discount_loss),
            ("use_reinforce", use_reinforce),
            ("return_normalization", return_normalization),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{owner}: {name} must be a bool, got {type(flag).__name__}.")
        entropy_bonus = float(check_non_negative(owner, "entropy_bonus", entropy_bonus, finite=True))
        if (use_reinforce or entropy_bonus > 0) and not callable(getattr(actor_model, "get_dist", None)):
            raise TypeError(
                f"{owner}: actor_model must have get_dist() (a probabilistic module) for use_reinforce=True or "
                f"entropy_bonus > 0, got {type(actor_model).__name__}."
            )
        rate = float(check_unit_interval(owner, "return_normalization_rate", return_normalization_rate))
        quantiles = return_normalization_quantiles
        if (
            not isinstance(quantiles, (tuple, list))
            or len(quantiles) != 2
            or not all(isinstance(q, numbers.Real) and not isinstance(q, bool) for q in quantiles)
            or not 0.0 <= quantiles[0] < quantiles[1] <= 1.0
        ):
            raise ValueError(
                f"{owner}: return_normalization_quantiles must be a pair (low, high) with 0 <= low < high <= 1, "
                f"got {quantiles!r}."
            )
        min_scale = float(
            check_positive(owner, "return_normalization_min_scale", return_normalization_min_scale, finite=True)
        )
        if lmbda is not None:
            check_unit_interval(owner, "lmbda", lmbda)
        super().__init__()
        self._set_deprecated_ctor_args(gamma=gamma)
        if lmbda is not None:
            warnings.warn(
                f"{owner}(lmbda=...) is deprecated: call loss.make_value_estimator(lmbda={lmbda}) instead. The value is "
                "used as the value estimator's lambda.",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
        self._ctor_lmbda = None if lmbda is None else float(lmbda)
        self.actor_model = actor_model
        self.__dict__["value_model"] = value_model  # read, not owned: the critic is trained by the value loss
        self.model_based_env = model_based_env
        self.__dict__["continuation_model"] = continuation_model
        self.imagination_horizon = imagination_horizon
        self.discount_loss, self.entropy_bonus, self.use_reinforce = discount_loss, entropy_bonus, use_reinforce
        self.return_normalization = return_normalization
        self.retnorm = PercentileValueNorm(
            quantiles=(float(quantiles[0]), float(quantiles[1])), rate=rate, min_scale=min_scale
        )

    # ------------------------------------------------------------------ value estimator
    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> "DreamerV3ActorLoss":
        """The estimator whose ``gamma`` (and ``lmbda``: 0 for TD0, 1 for TD1) the lambda-returns use.

        ``value_type``: ``ValueEstimators.TD0``, ``TD1`` or ``TDLambda`` (default); ``hyperparams``:
        ``gamma`` (default 0.99), ``lmbda`` (0.95).
        """
        if self._ctor_lmbda is not None:
            hyperparams.setdefault("lmbda", self._ctor_lmbda)
        accepted = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
        self._build_value_estimator(value_type, hyperparams, accepted, value_network=None)
        return self

    def _gamma_lmbda(self) -> tuple[Any, Any]:
        estimator = self.value_estimator
        if isinstance(estimator, TD0Estimator):
            return estimator.gamma, 0.0
        if isinstance(estimator, TD1Estimator):
            return estimator.gamma, 1.0
        return estimator.gamma, estimator.lmbda

    # ------------------------------------------------------------------ returns
    def lambda_target(self, reward: _Tensor, value: _Tensor, continuation: _Tensor | None = None) -> _Tensor:
        """The lambda-returns of imagined steps, TorchRL's layout: every input ``[*B, T, 1]`` (``value``:
        the critic's value of each step's next state), the output too.

        ``R_t = r_t + gamma * c_t * ((1 - lmbda) * v_t + lmbda * R_{t+1})``, ``R_T = v_{T-1}``
        (``c_t = 1`` without ``continuation``).
        """
        gamma, lmbda = self._gamma_lmbda()
        reward, value = reward.squeeze(-1), value.squeeze(-1)
        if continuation is not None:
            gamma = continuation.squeeze(-1) * torch.as_tensor(gamma, dtype=reward.dtype, device=reward.device)
        never = torch.zeros(reward.shape, dtype=torch.bool, device=reward.device)
        return vec_td_lambda_return_estimate(gamma, lmbda, value, reward, never, never).unsqueeze(-1)

    def _return_scale(self, returns: _Tensor) -> _Tensor:
        if not self.return_normalization:
            return torch.ones((), dtype=returns.dtype, device=returns.device)
        if self.training:
            self.retnorm.update(returns)
        return self.retnorm.scale().squeeze(-1).to(returns)

    @property
    def return_normalization_rate(self) -> float:
        """The rate of the return percentiles' moving averages (TorchRL's attribute)."""
        return self.retnorm.rate

    @property
    def return_normalization_quantiles(self) -> tuple[float, float]:
        """The low and high return quantiles whose range scales the returns."""
        return self.retnorm.quantiles

    @property
    def return_normalization_min_scale(self) -> float:
        """The smallest return scale (DreamerV3's ``max(1, S)``: returns are never amplified)."""
        return self.retnorm.min_scale

    @property
    def return_low(self) -> _Tensor:
        """The moving average of the low return quantile (0-dim)."""
        return self.retnorm.low.squeeze(-1)

    @property
    def return_high(self) -> _Tensor:
        """The moving average of the high return quantile (0-dim)."""
        return self.retnorm.high.squeeze(-1)

    # ------------------------------------------------------------------ forward
    def _critic(self, data: TensorDictBase, batch: torch.Size) -> _Tensor:
        critic = self.__dict__["value_model"]
        key = self.tensor_keys.value
        out = critic(data.select(*critic.in_keys, strict=False))
        value = out.get(key, None)
        if value is None:
            raise KeyError(f"{type(self).__name__}: the value_model wrote no {unravel_key(key)!r} (the value key).")
        return _decode_value(type(self).__name__, key, value, batch)

    def _continuation(self, data: TensorDictBase, batch: torch.Size) -> _Tensor:
        model = self.__dict__["continuation_model"]
        key = self.tensor_keys.continuation
        out = model(data.select(*model.in_keys, strict=False))
        value = out.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}: the continuation_model wrote no {unravel_key(key)!r} (the continuation key)."
            )
        return _per_step(type(self).__name__, f"the continuation {unravel_key(key)!r}", value, batch)

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDict, TensorDictBase]:
        owner, keys = type(self).__name__, self.tensor_keys
        if tensordict.get(keys.state, None) is None:
            raise KeyError(
                f"{owner}: the input holds no {unravel_key(keys.state)!r} (the state key, the latent imagination starts "
                f"from); it has {sorted(map(str, tensordict.keys(True, True)))}."
            )
        start = tensordict.select(keys.state, keys.belief, strict=False).detach()
        env, actor = self.model_based_env, self.actor_model
        critic, cont_model = self.__dict__["value_model"], self.__dict__["continuation_model"]

        with (
            _held_out(env, getattr(env, "world_model", None), critic, cont_model),
            set_interaction_type(InteractionType.RANDOM),
        ):
            fake_data = env.rollout(
                max_steps=self.imagination_horizon,
                policy=actor,
                auto_reset=False,
                tensordict=env.reset(start.copy()),
                break_when_any_done=False,
            )
            batch = fake_data.batch_size
            next_data = fake_data.get("next")
            next_value = self._critic(next_data, batch)
            reward = fake_data.get(("next", keys.reward), None)
            if reward is None:
                raise KeyError(f"{owner}: the imagined rollout holds no ('next', {keys.reward!r}) (the reward key).")
            reward = _per_step(owner, f"the imagined reward ('next', {keys.reward!r})", reward, batch)
            continuation = root_continuation = None
            if cont_model is not None:
                continuation = self._continuation(next_data, batch)  # c(s_{t+1})
                first = self._continuation(fake_data[..., :1], torch.Size([*batch[:-1], 1]))  # c(s_0)
                root_continuation = torch.cat([first, continuation[..., :-1]], dim=-1)  # c(s_t)
                fake_data.set(keys.continuation, root_continuation.unsqueeze(-1))
                fake_data.set(("next", keys.continuation), continuation.unsqueeze(-1))
            baseline = self._critic(fake_data, batch).detach() if self.use_reinforce else None

        gamma, _ = self._gamma_lmbda()
        lambda_target = self.lambda_target(
            reward.unsqueeze(-1),
            next_value.unsqueeze(-1),
            None if continuation is None else continuation.unsqueeze(-1),
        ).squeeze(-1)
        fake_data.set("lambda_target", lambda_target.unsqueeze(-1))

        if self.discount_loss:
            c = torch.ones_like(lambda_target) if root_continuation is None else root_continuation
            gamma_t = torch.as_tensor(gamma, dtype=c.dtype, device=c.device)
            discount = torch.cat([c[..., :1], gamma_t * c[..., 1:]], dim=-1).cumprod(-1).detach()
        else:
            discount = torch.ones_like(lambda_target).detach()
        fake_data.set(keys.discount_weight, discount.unsqueeze(-1))

        dist = None
        if self.use_reinforce or self.entropy_bonus > 0:
            dist = actor.get_dist(fake_data.select(*actor.in_keys, strict=False).detach())
        return_scale = self._return_scale(lambda_target)
        if self.use_reinforce:
            assert dist is not None and baseline is not None
            action = fake_data.get(keys.action, None)
            if action is None:
                raise KeyError(f"{owner}: the imagined rollout holds no {unravel_key(keys.action)!r} (the action key).")
            log_prob = _to_batch(dist.log_prob(action.detach()), batch)
            advantage = (lambda_target - baseline).detach() / return_scale
            actor_loss = -(discount * log_prob * advantage).mean()
        else:
            actor_loss = -(discount * lambda_target / return_scale).mean()

        if dist is not None and self.entropy_bonus > 0:
            entropy = (discount * _entropy(dist, batch)).mean()
            actor_loss = actor_loss - self.entropy_bonus * entropy
        else:
            entropy = actor_loss.new_zeros(())

        losses = TensorDict.unchecked(
            {
                "loss_actor": actor_loss,
                "actor_entropy": entropy.detach(),
                "return_low": self.return_low.detach().clone(),
                "return_high": self.return_high.detach().clone(),
                "return_scale": return_scale.detach().clone(),
                "continuation_mean": (
                    continuation.mean().detach() if continuation is not None else actor_loss.new_ones(()).detach()
                ),
            },
            torch.Size([]),
            None,
        )
        return losses, fake_data.detach()
