"""CartPoleEnv: Gymnasium's CartPole-v1 in pure torch, vectorised over a batch dimension."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import make_generator
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded

from ..env_base import EnvBase

__all__ = ["CartPoleEnv"]

# Gymnasium's CartPole-v1 constants (classic_control/cartpole.py)
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds per step (euler integration)
THETA_THRESHOLD = 12 * 2 * math.pi / 360  # 12 degrees
X_THRESHOLD = 2.4
RESET_BOUND = 0.05


class _Constants:
    """The step's constants as tensors on the env's device: tensor-tensor ops skip the scalar wrapping."""

    def __init__(self, device: Any) -> None:
        def t(x: Any) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.float32, device=device)

        # force / total_mass for action 1 (push right) and any other action (push left), as Gymnasium
        self.force_right, self.force_left = t(FORCE_MAG / TOTAL_MASS), t(-FORCE_MAG / TOTAL_MASS)
        self.gravity, self.four_thirds_length = t(GRAVITY), t(LENGTH * 4.0 / 3.0)
        # |x| and |theta| limits; the velocities never terminate
        self.limits = t([X_THRESHOLD, math.inf, THETA_THRESHOLD, math.inf])


def cartpole_step(obs: torch.Tensor, action: torch.Tensor, c: _Constants) -> tuple[torch.Tensor, torch.Tensor]:
    """One CartPole-v1 euler step: ``(next_obs, terminated)``, Gymnasium's formulas in few tensor ops.

    ``obs`` is ``[*batch, 4]`` (x, x_dot, theta, theta_dot), ``action`` an integer tensor of the batch
    shape: 1 pushes right, anything else left (Gymnasium's rule; an action is never a force scale).
    Inputs are not modified: in-place ops only touch tensors allocated here.
    """
    _, x_dot, theta, theta_dot = obs.unbind(-1)
    force = torch.where(action == 1, c.force_right, c.force_left)  # already divided by total_mass
    sin, cos = torch.sin(theta), torch.cos(theta)
    # temp = (force + polemass_length * theta_dot² * sin) / total_mass
    temp = torch.addcmul(force, torch.mul(theta_dot, theta_dot), sin, value=POLEMASS_LENGTH / TOTAL_MASS)
    # thetaacc = (g sin - cos temp) / (length (4/3 - masspole cos² / total_mass))
    denom = torch.addcmul(c.four_thirds_length, cos, cos, value=-LENGTH * MASSPOLE / TOTAL_MASS)
    thetaacc = torch.mul(sin, c.gravity).addcmul_(cos, temp, value=-1.0).div_(denom)
    # xacc = temp - polemass_length * thetaacc * cos / total_mass
    xacc = temp.addcmul_(thetaacc, cos, value=-POLEMASS_LENGTH / TOTAL_MASS)
    # euler: every coordinate moves by tau times its derivative at the old state
    next_obs = torch.add(obs, torch.stack((x_dot, xacc, theta_dot, thetaacc), -1), alpha=TAU)
    terminated = (next_obs.abs() > c.limits).any(-1)
    return next_obs, terminated


class CartPoleEnv(EnvBase):
    """The cart-pole balancing task of Gymnasium's ``CartPole-v1``, in torch.

    Observation ``"observation"`` (float32, ``[*batch, 4]``): cart position, cart velocity, pole angle
    (0 = upright) and pole angular velocity. Action ``"action"``, int64, encoded as ``GymEnv`` encodes a
    ``Discrete(2)`` space (TorchRL's rule): one-hot by default (``OneHot(2)``, ``[*batch, 2]``:
    ``[1, 0]`` pushes the cart left, ``[0, 1]`` right, read with ``argmax``), or with
    ``categorical_action_encoding=True`` an index of the batch shape (``Categorical(2)``: 0 left,
    1 right). Either way the action spec equals ``GymEnv("CartPole-v1")``'s with the same argument.
    Reward: 1.0 on every step, including the terminating one. The episode terminates when the cart
    leaves ``|x| <= 2.4`` or the pole leaves ``|theta| <= 12°``; ``truncated`` is always ``False``,
    because CartPole-v1's 500-step limit comes from Gymnasium's ``TimeLimit`` wrapper: add
    ``StepCounter(max_steps=500)`` to get it. Resets draw every state entry uniformly in
    ``(-0.05, 0.05)`` from the env's own generator; the encoding does not change the dynamics.

    Args:
        batch_size: the number of cart-poles (``[]`` for one).
        device: where the tensors live.
        seed: seeds the env's random generator.
        validate_actions: raise a ``ValueError`` naming the action and the allowed values (0 and 1,
            or the one-hot rows ``[1, 0]`` and ``[0, 1]``) when a step gets anything else (default
            ``True``, as Gymnasium's CartPole-v1 asserts its action space on every step). ``False``
            skips the check (one host sync per step); an invalid index then pushes left, as in
            Gymnasium, and an invalid one-hot row acts as its ``argmax`` (the first on ties, as
            ``GymEnv`` decodes it). An action is never a force scale.
        categorical_action_encoding: index actions (``Categorical(2)``) instead of one-hot ones
            (``OneHot(2)``, the default, as ``GymEnv``'s).

    Raises:
        TypeError: ``categorical_action_encoding`` is not a bool.

    Examples:
        >>> from rl_envs import StepCounter, TransformedEnv
        >>> env = TransformedEnv(CartPoleEnv(batch_size=[4], seed=0), StepCounter(max_steps=500))
        >>> rollout = env.rollout(100, break_when_any_done=False)
        >>> rollout.batch_size, rollout["observation"].shape, rollout["action"].shape
        (torch.Size([4, 100]), torch.Size([4, 100, 4]), torch.Size([4, 100, 2]))
        >>> bool(rollout["next", "reward"].eq(1.0).all()), bool(rollout["next", "done"].any())
        (True, True)
        >>> CartPoleEnv(categorical_action_encoding=True).action_spec
        Categorical(shape=(), device=cpu, dtype=torch.int64, n=2)
    """

    def __init__(
        self,
        batch_size: Sequence[int] | None = None,
        device: Any = None,
        seed: int | None = None,
        validate_actions: bool = True,
        categorical_action_encoding: bool = False,
    ) -> None:
        if not isinstance(categorical_action_encoding, bool):
            raise TypeError(
                f"CartPoleEnv: categorical_action_encoding must be a bool, got {categorical_action_encoding!r} "
                f"({type(categorical_action_encoding).__name__})."
            )
        super().__init__(device=device, batch_size=batch_size, validate_actions=validate_actions)
        self.categorical_action_encoding = categorical_action_encoding
        self._rng = make_generator(seed, self.device, owner="CartPoleEnv")
        self._consts = _Constants(self.device)
        self._make_specs()

    @property
    def resumable(self) -> bool:
        return True  # the state is the observation in the tensordict, the generator is in state_dict

    def to(self, *args: Any, **kwargs: Any) -> "CartPoleEnv":
        old = self.device
        super().to(*args, **kwargs)
        if self.device != old:  # constants and generator follow; the new generator continues the old stream
            self._consts = _Constants(self.device)
            seed = int(torch.randint(0, 2**62, (), generator=self._rng, device=self._rng.device))
            self._rng = torch.Generator(device=self.device or "cpu")
            self._rng.manual_seed(seed)
        return self

    def _make_specs(self) -> None:
        shape, device = self.batch_size, self.device
        # Gymnasium's observation space: twice the termination limits, so a terminating state still fits
        high = torch.tensor([2 * X_THRESHOLD, math.inf, 2 * THETA_THRESHOLD, math.inf], dtype=torch.float32)
        self.observation_spec = Composite(
            observation=Bounded(
                -high.expand(*shape, 4), high.expand(*shape, 4), shape=(*shape, 4), device=device, dtype=torch.float32
            ),
            shape=shape,
        )
        if self.categorical_action_encoding:
            self.action_spec = Categorical(2, shape=shape, device=device)
        else:  # GymEnv's spec of a Discrete(2) space
            self.action_spec = OneHot(2, shape=(*shape, 2), device=device, dtype=torch.int64)
        self.reward_spec = Unbounded(shape=shape, device=device, dtype=torch.float32)
        flag = Categorical(2, shape=shape, dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDict:
        if kwargs:
            raise TypeError(f"CartPoleEnv.reset: unexpected keyword arguments {sorted(kwargs)}.")
        batch = self.batch_size
        obs = torch.empty((*batch, 4), dtype=torch.float32, device=self.device).uniform_(
            -RESET_BOUND, RESET_BOUND, generator=self._rng
        )
        done = torch.zeros((3, *batch), dtype=torch.bool, device=self.device)
        return TensorDict.unchecked(
            {"observation": obs, "done": done[0], "terminated": done[1], "truncated": done[2]}, batch, self.device
        )

    def _validate_actions(self, tensordict: TensorDictBase, keys: Any) -> None:
        # one fused test and one host sync instead of the generic spec check
        action = tensordict.get("action")
        if self.categorical_action_encoding:
            # only 0 and 1 have no bit above the first
            if action.bitwise_and(-2).count_nonzero():
                bad = action[(action != 0) & (action != 1)].unique().tolist()
                raise ValueError(f"CartPoleEnv: action 'action' must be 0 (push left) or 1 (push right), got {bad}.")
            return
        # a row (a0, a1) is one-hot iff a1 is 0 or 1 and a0 is its complement: (a0 ^ a1 ^ 1) | (a1 & ~1) == 0
        left, right = action.unbind(-1)
        wrong = torch.bitwise_xor(left, right).bitwise_xor_(1).bitwise_or_(right.bitwise_and(-2))
        if wrong.count_nonzero():
            bad = action.reshape(-1, 2)[wrong.reshape(-1) != 0].unique(dim=0).tolist()
            raise ValueError(
                f"CartPoleEnv: action 'action' must be one-hot, [1, 0] (push left) or [0, 1] (push right), got {bad} "
                f"(pass categorical_action_encoding=True for index actions)."
            )

    def _step(self, tensordict: TensorDictBase) -> TensorDict:
        action = tensordict.get("action")
        if not self.categorical_action_encoding:
            action = action.argmax(-1)  # GymEnv's decoding of a one-hot action
        next_obs, terminated = cartpole_step(tensordict.get("observation"), action, self._consts)
        batch = tensordict.batch_size
        device = self.device
        return TensorDict.unchecked(
            {
                "observation": next_obs,
                "reward": torch.ones(batch, dtype=torch.float32, device=device),
                "done": terminated.clone(),
                "terminated": terminated,
                "truncated": torch.zeros(batch, dtype=torch.bool, device=device),
            },
            batch,
            device,
        )

    def _set_seed(self, seed: int | None) -> None:
        self._rng = make_generator(seed, self._rng.device)  # None: a seed drawn from torch's global generator
