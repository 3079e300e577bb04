"""Exploration modules: put after a policy to perturb its action (torchrl.modules names).

When they act: like TorchRL, an exploration module perturbs the action only while exploring, that is
when :func:`tdict.nn.interaction_type` is ``RANDOM`` **or unset** (``None``); under ``DETERMINISTIC``,
``MODE``, ``MEAN`` or ``MEDIAN`` (evaluation) it returns its input unchanged. The unset case counts as
exploring because a collector run without an explicit interaction type must still explore, as
TorchRL's collectors (whose default is ``RANDOM``) do; evaluate under
``set_interaction_type("deterministic")``.

Annealing: ``step(frames)`` advances a step counter and the annealed factor is computed from it in
closed form, ``max(end, init - count * (init - end) / annealing_num_steps)``, so it carries no
floating-point drift from repeated subtraction (TorchRL subtracts once per frame). In a
:class:`~rl_objectives.trainers.Trainer`, :class:`~rl_objectives.trainers.AnnealExploration` calls
``step`` with the frames of every collected batch and checkpoints the counter.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from tdict.nn import InteractionType, TensorDictModuleBase, dispatch, interaction_type
from tdict.specs import Composite
from tdict.validation import check_non_negative, check_non_negative_int, check_positive, check_positive_int

from .actors import _projector

__all__ = ["AdditiveGaussianModule", "EGreedyModule", "OrnsteinUhlenbeckProcessModule"]

NestedKey = Any


def _exploring() -> bool:
    itype = interaction_type()
    return itype is None or itype is InteractionType.RANDOM


def _leaf_spec(spec: Any, action_key: NestedKey, what: str, required: bool, placeholder_ok: bool = False) -> Any:
    """The action's spec in ``spec``. With ``placeholder_ok``, a Composite holding ``None`` for the
    action (TorchRL's placeholder: the key exists, its spec is unknown) gives ``None``: nothing to project into."""
    if spec is None:
        if required:
            raise ValueError(f"{what}: spec is required (the action spec), got None.")
        return None
    if isinstance(spec, Composite):
        if action_key not in spec:
            raise KeyError(
                f"{what}: the Composite spec has no entry for action_key {action_key!r}; it holds {spec.keys(True, True)}."
            )
        leaf = spec.get(action_key)
        if leaf is None and required and not placeholder_ok:
            raise ValueError(f"{what}: the Composite spec holds no spec (a placeholder) for action_key {action_key!r}.")
        return leaf
    if not getattr(type(spec), "_is_spec", False):
        raise TypeError(f"{what}: spec must be a TensorSpec or a Composite, got {type(spec).__name__}.")
    return spec


def _check_schedule(init: float, end: float, n: int, what: str, names: tuple[str, str]) -> None:
    check_positive_int(what, "annealing_num_steps", n)
    if end > init:
        raise ValueError(
            f"{what}: {names[1]}={end} is larger than {names[0]}={init}; the factor must decrease or stay constant."
        )


def _parent(tensordict: Any, key: NestedKey) -> Any:
    """The TensorDict that directly holds ``key`` (its batch dims are the action's batch dims)."""
    if isinstance(key, tuple) and len(key) > 1:
        return tensordict.get(key[:-1])
    return tensordict


def _get(tensordict: Any, key: NestedKey, what: str) -> torch.Tensor:
    try:
        return tensordict.get(key)
    except KeyError:
        raise KeyError(
            f"{what}: the input misses {key!r}; it holds {sorted(map(str, tensordict.keys(True)))}."
        ) from None


def _right_expand(value: torch.Tensor, ndim: int) -> torch.Tensor:
    """``value`` with trailing singleton dims appended up to ``ndim`` dims (broadcasts on the right)."""
    return value.reshape(value.shape + (1,) * (ndim - value.ndim))


class _Annealed(TensorDictModuleBase):
    """Shared annealing: a factor going linearly from ``init`` to ``end`` in ``annealing_num_steps`` steps."""

    _anneal_count: torch.Tensor  # a buffer (set by _init_schedule)

    _factor_name = "eps"

    def _init_schedule(self, init: float, end: float, n: int, device: Any) -> None:
        self.annealing_num_steps = n
        self.register_buffer(f"{self._factor_name}_init", torch.tensor(float(init), device=device))
        self.register_buffer(f"{self._factor_name}_end", torch.tensor(float(end), device=device))
        self.register_buffer(self._factor_name, torch.tensor(float(init), dtype=torch.float32, device=device))
        self.register_buffer("_anneal_count", torch.zeros((), dtype=torch.int64, device=device))
        self._schedule = (float(init), float(end), n)

    def step(self, frames: int = 1) -> None:
        """Advance the annealing by ``frames`` steps (no change once the end value is reached).

        Raises:
            ValueError: for a negative ``frames``.
        """
        check_non_negative_int(f"{type(self).__name__}.step", "frames", frames)
        self._set_anneal_count(int(self._anneal_count) + frames)

    def _set_anneal_count(self, count: int) -> None:
        """Sets the step counter (capped at ``annealing_num_steps``) and the factor it gives."""
        init, end, n = self._schedule
        count = min(count, n)
        self._anneal_count.fill_(count)
        getattr(self, self._factor_name).fill_(max(end, init - count * (init - end) / n))


class EGreedyModule(_Annealed):
    """Epsilon-greedy exploration: with probability ``eps`` each action is replaced by ``spec.rand()``.

    One Bernoulli draw per element of the batch holding the action (a whole action vector is replaced
    or kept). ``eps`` anneals linearly from ``eps_init`` to ``eps_end`` over ``annealing_num_steps``
    steps counted by :meth:`step` (call it in the training loop with the frames collected, or
    register :class:`~rl_objectives.trainers.AnnealExploration`: with ``annealing_num_steps =
    exploration_fraction * total_timesteps`` this is SB3's DQN schedule). Acts only while exploring
    (see the module docstring).

    Args:
        spec: the action spec random actions are drawn from (a leaf spec, or a Composite holding ``action_key``).
        eps_init: initial epsilon (default 1.0).
        eps_end: final epsilon (default 0.1).
        annealing_num_steps: steps from ``eps_init`` to ``eps_end`` (default 1000).
        action_key: the action entry (default ``"action"``).
        action_mask_key: optional boolean mask entry (``True`` = allowed): random actions are drawn
            among the allowed ones (discrete specs).
        device: device of the buffers.

    Raises:
        ValueError: for ``eps_end > eps_init``, eps outside ``[0, 1]`` or a non-positive ``annealing_num_steps``;
            at call, for an action whose trailing dims do not match the spec shape.
        KeyError: at call, naming a missing action or mask key.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Categorical
        >>> from rl_objectives.modules import EGreedyModule
        >>> explore = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=0.0, annealing_num_steps=10)
        >>> td = explore(TensorDict(action=torch.zeros(100, dtype=torch.long), batch_size=[100]))
        >>> bool((td["action"] != 0).any())
        True
        >>> explore.step(5); explore.eps
        tensor(0.5000)
    """

    eps: torch.Tensor  # the annealed buffer (set by _init_schedule)

    def __init__(
        self,
        spec: Any,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        *,
        action_key: NestedKey = "action",
        action_mask_key: NestedKey | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not (0.0 <= eps_end <= 1.0 and 0.0 <= eps_init <= 1.0):
            raise ValueError(
                f"EGreedyModule: eps_init and eps_end must lie in [0, 1], got eps_init={eps_init}, eps_end={eps_end}."
            )
        _check_schedule(eps_init, eps_end, annealing_num_steps, "EGreedyModule", ("eps_init", "eps_end"))
        self._leaf = _leaf_spec(spec, action_key, "EGreedyModule", required=True)
        self.action_key = action_key
        self.action_mask_key = action_mask_key
        self.in_keys = [action_key] + ([action_mask_key] if action_mask_key is not None else [])
        self.out_keys = [action_key]
        self._spec = Composite({action_key: self._leaf})
        self._init_schedule(eps_init, eps_end, annealing_num_steps, device)

    @property
    def spec(self) -> Composite:
        """The Composite spec holding the action spec under ``action_key``."""
        return self._spec

    def _check_action(self, action: torch.Tensor) -> None:
        spec = self._leaf
        n = spec.ndim
        if action.ndim < n or action.shape[action.ndim - n :] != spec.shape:
            raise ValueError(
                f"EGreedyModule: the action of shape {tuple(action.shape)} does not end with the spec shape {tuple(spec.shape)}."
            )

    def _random_actions(self, action: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        spec = self._leaf
        lead = action.shape[: action.ndim - spec.ndim]
        if mask is None:
            return spec.rand(lead)
        # a per-sample mask: expand the spec to the action's shape and sample among the allowed actions
        full = spec.expand(action.shape)
        full.update_mask(mask)
        return full.rand()

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        if not _exploring():
            return tensordict
        holder = _parent(tensordict, self.action_key)
        action = _get(tensordict, self.action_key, "EGreedyModule")
        mask = None
        if self.action_mask_key is not None:
            mask = _get(tensordict, self.action_mask_key, "EGreedyModule")
            if mask.dtype is not torch.bool:
                raise ValueError(
                    f"EGreedyModule: the action mask {self.action_mask_key!r} must be bool, got {mask.dtype}."
                )
        self._check_action(action)
        cond = torch.rand(holder.batch_size, device=action.device) < self.eps.to(action.device)
        if not cond.any():  # every sample acts greedily: no random actions to draw
            return tensordict
        random = self._random_actions(action, mask).to(device=action.device, dtype=action.dtype)
        tensordict.set(self.action_key, torch.where(_right_expand(cond, action.ndim), random, action))
        return tensordict


class AdditiveGaussianModule(_Annealed):
    """Gaussian exploration noise: ``action + sigma * N(mean, std)``, then projected into the spec.

    ``sigma`` anneals linearly from ``sigma_init`` to ``sigma_end`` over ``annealing_num_steps`` steps
    counted by :meth:`step` (or :class:`~rl_objectives.trainers.AnnealExploration`). Acts only while
    exploring (see the module docstring).

    Args:
        spec: the action spec (a leaf spec, or a Composite holding ``action_key``); required when ``safe``.
        sigma_init: initial noise scale (default 1.0).
        sigma_end: final noise scale (default 0.1).
        annealing_num_steps: steps from ``sigma_init`` to ``sigma_end`` (default 1000).
        mean, std: parameters of the unit noise (default 0 and 1).
        action_key: the action entry (default ``"action"``).
        safe: project the noisy action into ``spec`` (default ``True``; a Composite holding ``None`` for
            the action, TorchRL's placeholder, leaves nothing to project into).
        device: device of the buffers.

    Raises:
        ValueError: for ``sigma_end > sigma_init``, a negative scale, ``std <= 0``, a non-positive
            ``annealing_num_steps``, or ``safe=True`` without a spec.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import AdditiveGaussianModule
        >>> noise = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=5.0, sigma_end=5.0)
        >>> a = noise(TensorDict(action=torch.zeros(50, 2), batch_size=[50]))["action"]
        >>> bool((a.abs() <= 1).all()), bool((a != 0).any())
        (True, True)
    """

    # buffers (set in __init__ and by _init_schedule)
    mean: torch.Tensor
    std: torch.Tensor
    sigma: torch.Tensor

    _factor_name = "sigma"

    def __init__(
        self,
        spec: Any,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        action_key: NestedKey = "action",
        safe: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_non_negative("AdditiveGaussianModule", "sigma_end", sigma_end)
        check_positive("AdditiveGaussianModule", "std", std)
        _check_schedule(
            sigma_init, sigma_end, annealing_num_steps, "AdditiveGaussianModule", ("sigma_init", "sigma_end")
        )
        self._leaf = _leaf_spec(spec, action_key, "AdditiveGaussianModule", required=safe, placeholder_ok=True)
        self.action_key = action_key
        self.in_keys = [action_key]
        self.out_keys = [action_key]
        self._spec = Composite({action_key: self._leaf}) if self._leaf is not None else None
        self._project = None if self._leaf is None else _projector(self._leaf)
        self.safe = bool(safe)
        self.register_buffer("mean", torch.tensor(float(mean), device=device))
        self.register_buffer("std", torch.tensor(float(std), device=device))
        self._init_schedule(sigma_init, sigma_end, annealing_num_steps, device)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec holding the action spec under ``action_key``."""
        return self._spec

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        if not _exploring():
            return tensordict
        action = _get(tensordict, self.action_key, "AdditiveGaussianModule")
        noise = torch.randn_like(action) * self.std.to(action) + self.mean.to(action)
        action = action + self.sigma.to(action) * noise
        if self.safe and self._project is not None:  # None: a placeholder spec, nothing to project into
            action = self._project(action)
        tensordict.set(self.action_key, action)
        return tensordict


class OrnsteinUhlenbeckProcessModule(_Annealed):
    r"""Ornstein-Uhlenbeck exploration noise (DDPG): temporally correlated noise added to the action.

    The noise state lives in the TensorDict, next to the data it belongs to: ``"_ou_prev_noise"``
    (action shape) and ``"_ou_steps"`` (the batch shape of the action's TensorDict, ``int64``), written
    at the root. Each call, with ``x = prev_noise + x0``::

        noise   = x + theta * (mu - x) * dt + sigma_t * sqrt(dt) * N(0, 1)
        sigma_t = max(sigma_min, sigma - (sigma - sigma_min) * n_steps / n_steps_annealing)   # sigma if sigma_min is None
        action  = action + eps * noise;   prev_noise = noise - x0;   n_steps += 1

    Where ``is_init_key`` (``"is_init"``, written by rl_envs' ``InitTracker``) is True, the state is
    reset (``prev_noise = 0``, ``n_steps = 0``) before the update; without that entry the state is never
    reset and a warning is emitted. ``eps`` anneals from ``eps_init`` to ``eps_end`` over
    ``annealing_num_steps`` steps counted by :meth:`step` (or
    :class:`~rl_objectives.trainers.AnnealExploration`). Acts only while exploring (see the module
    docstring).

    Args:
        spec: the action spec (a leaf spec, or a Composite holding ``action_key``); required when ``safe``.
        eps_init, eps_end, annealing_num_steps: the schedule of the noise factor ``eps`` (1.0, 0.1, 1000).
        theta, mu, sigma, dt: parameters of the process (0.15, 0.0, 0.2, 0.01).
        x0: offset of the process (default 0).
        sigma_min: the floor of the annealed ``sigma_t`` (``None``: ``sigma`` stays constant).
        n_steps_annealing: steps (per trajectory) over which ``sigma_t`` goes from ``sigma`` to ``sigma_min``.
        action_key: the action entry (default ``"action"``).
        is_init_key: the reset flag (default ``"is_init"``), batch shape (a trailing 1 is accepted).
        safe: project the noisy action into ``spec`` (default ``True``; a Composite holding ``None`` for
            the action, TorchRL's placeholder, leaves nothing to project into).
        device: device of the buffers.

    Raises:
        ValueError: for a bad schedule, ``n_steps_annealing <= 0``, ``safe=True`` without a spec, or (at
            call) an ``is_init`` entry whose shape does not match the action's batch shape.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import OrnsteinUhlenbeckProcessModule
        >>> ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
        >>> td = TensorDict(action=torch.zeros(3, 2), is_init=torch.ones(3, dtype=torch.bool), batch_size=[3])
        >>> td = ou(td)
        >>> td["_ou_prev_noise"].shape, td["_ou_steps"].tolist()
        (torch.Size([3, 2]), [1, 1, 1])
    """

    # buffers (set in __init__ and by _init_schedule)
    x0: torch.Tensor
    eps: torch.Tensor

    def __init__(
        self,
        spec: Any,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 1e-2,
        x0: torch.Tensor | float | None = None,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        *,
        action_key: NestedKey = "action",
        is_init_key: NestedKey = "is_init",
        safe: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        _check_schedule(
            eps_init, eps_end, annealing_num_steps, "OrnsteinUhlenbeckProcessModule", ("eps_init", "eps_end")
        )
        check_positive_int("OrnsteinUhlenbeckProcessModule", "n_steps_annealing", n_steps_annealing)
        if sigma < 0 or (sigma_min is not None and sigma_min < 0) or dt <= 0:
            raise ValueError(
                f"OrnsteinUhlenbeckProcessModule: sigma and sigma_min must be >= 0 and dt > 0, got sigma={sigma}, sigma_min={sigma_min}, dt={dt}."
            )
        self._leaf = _leaf_spec(spec, action_key, "OrnsteinUhlenbeckProcessModule", required=safe, placeholder_ok=True)
        self.theta, self.mu, self.sigma, self.dt = float(theta), float(mu), float(sigma), float(dt)
        self.sigma_min = float(sigma if sigma_min is None else sigma_min)
        # sigma_t = max(sigma_min, slope * n + sigma); slope 0 keeps sigma constant
        self._slope = 0.0 if sigma_min is None else -(self.sigma - self.sigma_min) / n_steps_annealing
        self.n_steps_annealing = n_steps_annealing
        self.register_buffer(
            "x0", torch.as_tensor(0.0 if x0 is None else x0, dtype=torch.get_default_dtype(), device=device)
        )
        self.action_key = action_key
        self.is_init_key = is_init_key
        self.noise_key = "_ou_prev_noise"
        self.steps_key = "_ou_steps"
        self.in_keys = [action_key]
        self.out_keys = [action_key, self.noise_key, self.steps_key]
        self._spec = Composite({action_key: self._leaf}) if self._leaf is not None else None
        self._project = None if self._leaf is None else _projector(self._leaf)
        self.safe = bool(safe)
        self._warned = False
        self._init_schedule(eps_init, eps_end, annealing_num_steps, device)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec holding the action spec under ``action_key``."""
        return self._spec

    def current_sigma(self, n_steps: torch.Tensor) -> torch.Tensor:
        """``sigma_t`` for per-trajectory step counts ``n_steps``."""
        return (self._slope * n_steps + self.sigma).clamp_min(self.sigma_min)

    def _is_init(self, tensordict: Any, batch_size: torch.Size) -> torch.Tensor | None:
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            if not self._warned:
                warnings.warn(
                    f"OrnsteinUhlenbeckProcessModule: the input has no {self.is_init_key!r} entry, so the noise is never reset "
                    "between trajectories (append rl_envs' InitTracker transform to the env to write it).",
                    stacklevel=3,
                )
                self._warned = True
            return None
        if is_init.ndim == len(batch_size) + 1 and is_init.shape[-1] == 1:
            is_init = is_init.squeeze(-1)
        if is_init.shape != batch_size:
            raise ValueError(
                f"OrnsteinUhlenbeckProcessModule: {self.is_init_key!r} has shape {tuple(is_init.shape)}, expected the action's batch shape {tuple(batch_size)}."
            )
        return is_init.bool()

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        if not _exploring():
            return tensordict
        holder = _parent(tensordict, self.action_key)
        action = _get(tensordict, self.action_key, "OrnsteinUhlenbeckProcessModule")
        batch = holder.batch_size
        is_init = self._is_init(tensordict, batch)
        prev = tensordict.get(self.noise_key, None)
        steps = tensordict.get(self.steps_key, None)
        if prev is None or steps is None:
            prev = torch.zeros_like(action)
            steps = torch.zeros(batch, dtype=torch.int64, device=action.device)
        if is_init is not None:
            prev = prev.masked_fill(_right_expand(is_init, prev.ndim), 0.0)
            steps = steps.masked_fill(is_init, 0)
        x = prev + self.x0.to(action)
        sigma_t = self.current_sigma(_right_expand(steps, x.ndim).to(action.dtype))
        noise = x + self.theta * (self.mu - x) * self.dt + sigma_t * math.sqrt(self.dt) * torch.randn_like(x)
        action = action + self.eps.to(action) * noise
        if self.safe and self._project is not None:  # None: a placeholder spec, nothing to project into
            action = self._project(action)
        tensordict.set(self.noise_key, noise - self.x0.to(action))
        tensordict.set(self.steps_key, steps + 1)
        tensordict.set(self.action_key, action)
        return tensordict
