"""Transforms that step the parent env themselves: no-op starts (NoopResetEnv) and action repeat
(FrameSkipTransform). Exported from :mod:`rl_envs.transforms.episode`."""

from __future__ import annotations

import torch
from tdict import TensorDictBase
from tdict.seeding import make_generator, next_seed

from ..mdp import step_mdp
from .._generator_state import GeneratorState
from .base import Compose, Transform  # noqa: F401  (Compose: used by the doctests)

__all__ = ["NoopResetEnv", "FrameSkipTransform"]


# ---------------------------------------------------------------------- NoopResetEnv
class NoopResetEnv(GeneratorState, Transform):
    """After each reset, takes a random number of random-action steps in the parent env (Atari-style
    no-op starts) and returns the state reached.

    The number of steps is drawn from ``[0, noops)`` (``random=True``), or is ``noops``; it and the
    random actions come from the transform's own generator (``seed``: one random stream, which a
    transformed env seeds after its base env). If the env is done during the no-ops it is reset and the
    no-ops start again (at most 10 tries). Like TorchRL, only envs with a single instance (batch
    ``[]`` or one element) are supported: a batched env cannot step only the sub-envs being reset.

    Args:
        noops: upper bound (or exact number) of no-op steps.
        random: draw the number of steps.
        seed: seed of the generator used to draw it (``None``: drawn from torch's global generator).

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(), NoopResetEnv(3, random=False)))
        >>> int(env.reset()["step_count"])
        3
    """

    _MAX_TRIALS = 10

    def __init__(self, noops: int = 30, random: bool = True, *, seed: int | None = None) -> None:
        if int(noops) < (1 if random else 0):
            raise ValueError(f"NoopResetEnv: noops must be >= 1 (>= 0 with random=False), got {noops}.")
        super().__init__()
        self.noops, self.random = int(noops), random
        self.generator = make_generator(seed, owner="NoopResetEnv")

    def set_seed(self, seed: int | None) -> int | None:
        """Seeds the transform's generator with ``seed`` (one stream); returns ``seed + 1``."""
        self.generator = make_generator(seed, owner="NoopResetEnv.set_seed")
        return None if seed is None else next_seed(seed)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError("NoopResetEnv.parent not found. Make sure that the parent is set (a TransformedEnv).")
        if parent.batch_size.numel() > 1:
            raise ValueError(
                f"NoopResetEnv: The parent environment batch-size is non-null ({list(parent.batch_size)}); only "
                "single envs are supported (a batched env cannot step only the sub-envs being reset)."
            )
        noops = int(torch.randint(self.noops, (), generator=self.generator)) if self.random else self.noops
        keys = parent._keys()
        td = tensordict_reset
        for _ in range(self._MAX_TRIALS):
            td = tensordict_reset.copy()
            done = False
            for _ in range(noops):
                td = parent.step(parent.rand_action(td, generator=self.generator))
                done = any(
                    bool(td.get(("next", k) if isinstance(k, str) else ("next", *k)).any()) for k in keys.stop_keys
                )
                td = step_mdp(td, reward_keys=keys.reward_keys, done_keys=keys.done_keys, action_keys=keys.action_keys)
                if done:
                    tensordict_reset = parent.reset()
                    break
            if not done:
                return td
        raise RuntimeError(
            f"NoopResetEnv: the env was done before {noops} no-op steps in {self._MAX_TRIALS} tries; lower noops."
        )

    def __repr__(self) -> str:
        return f"NoopResetEnv(noops={self.noops}, random={self.random})"


# ---------------------------------------------------------------------- FrameSkipTransform
class FrameSkipTransform(Transform):
    """Repeats each action ``frame_skip`` times in the parent env and sums the rewards.

    Repetition stops at the first done; in a batched env the sub-envs that are done keep the output
    of the step where they finished (their later rewards are not added) while the others go on.

    Args:
        frame_skip: number of env steps per action.

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(), FrameSkipTransform(3)))
        >>> env.rollout(2)["next", "step_count"].tolist()
        [3, 6]
    """

    def __init__(self, frame_skip: int = 1) -> None:
        if int(frame_skip) < 1:
            raise ValueError(
                f"FrameSkipTransform: frame_skip should have a value greater or equal to one, got {frame_skip}."
            )
        super().__init__()
        self.frame_skip = int(frame_skip)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.frame_skip == 1:
            return next_tensordict
        parent = self.parent
        if parent is None:
            raise RuntimeError("parent not found for FrameSkipTransform: use it inside a TransformedEnv.")
        keys = parent._keys()
        batch = next_tensordict.batch_size
        actions = [(k, tensordict.get(k)) for k in keys.action_keys]
        rewards = {k: next_tensordict.get(k) for k in keys.reward_keys}

        def done_of(td: TensorDictBase) -> torch.Tensor:
            flag = None
            for k in keys.stop_keys:
                v = td.get(k)
                v = v.reshape(*batch, -1).any(-1) if v.ndim > len(batch) else v
                flag = v if flag is None else flag | v
            assert flag is not None  # every env has a done key (EnvBase fills the default done spec)
            return flag

        finished = done_of(next_tensordict)
        for _ in range(self.frame_skip - 1):
            if bool(finished.all()):
                break
            step_in = tensordict.copy()
            step_in.set("next", next_tensordict)
            step_in = keys.shift(step_in)
            for k, a in actions:
                step_in.set(k, a)
            new = parent.step(step_in).get("next")
            live = ~finished
            for k in keys.reward_keys:
                r = new.get(k)
                rewards[k] = rewards[k] + torch.where(
                    live.reshape(tuple(live.shape) + (1,) * (r.ndim - live.ndim)), r, torch.zeros_like(r)
                )
            # torch.where takes TensorDicts through __torch_function__ (the torch stubs only know tensors)
            next_tensordict = new if not bool(finished.any()) else torch.where(finished, next_tensordict, new)  # pyright: ignore[reportCallIssue, reportArgumentType]
            finished = finished | done_of(next_tensordict)
        for k, r in rewards.items():
            next_tensordict.set(k, r)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "FrameSkipTransform can only be used when appended to a transformed env: it steps the parent env, "
            "which a plain TensorDict does not have."
        )

    def __repr__(self) -> str:
        return f"FrameSkipTransform(frame_skip={self.frame_skip})"
