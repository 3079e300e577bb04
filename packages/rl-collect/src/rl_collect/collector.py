"""Collector: runs an env with a policy and yields batches of ``frames_per_batch`` frames."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterator, cast

import tdict
import torch
from torch.nn.parameter import is_lazy
from torch import nn
from tdict import TensorDict, TensorDictBase
from tdict.nn import InteractionType, TensorDictModule, TensorDictModuleBase, set_interaction_type
from tdict.seeding import chain_seeds, check_seed, make_generator, next_seed, use_generator
from tdict.validation import check_positive_int

from .trajectories import split_trajectories

__all__ = ["Collector"]

_TRAJ = ("collector", "traj_ids")
_VERSION = ("collector", "policy_version")


def _make_env(create_env_fn: Any, kwargs: dict | None) -> Any:
    """An env object: ``create_env_fn`` itself when it already is one (duck-typed), else its product."""
    if not isinstance(create_env_fn, type) and hasattr(create_env_fn, "step") and hasattr(create_env_fn, "reset"):
        if kwargs:
            raise TypeError("Collector: create_env_kwargs given with an env instance (they need a factory).")
        return create_env_fn
    if not callable(create_env_fn):
        raise TypeError(f"Collector: expected an env or a callable returning one, got {type(create_env_fn).__name__}.")
    return create_env_fn(**(kwargs or {}))


def _wrap_policy(policy: Any, env: Any) -> Any:
    """A ``td -> td`` callable: plain modules read the observations and write the actions."""
    if policy is None or isinstance(policy, TensorDictModuleBase) or not isinstance(policy, nn.Module):
        return policy
    obs_keys = list(env.observation_keys)
    if "observation" in obs_keys:  # the conventional key (Gymnasium-style envs)
        obs_keys = ["observation"]
    if len(obs_keys) != 1:
        raise TypeError(
            f"Collector: a plain nn.Module policy reads one observation; the env has {obs_keys} and none is "
            "'observation'. Wrap the module in a tdict.nn.TensorDictModule with explicit in_keys."
        )
    return TensorDictModule(policy, in_keys=obs_keys, out_keys=list(env.action_keys))


def _plain(td: TensorDictBase) -> dict:
    """A TensorDict as plain data (lists, numbers, tensors): batch sizes of the root and of every
    sub-collection, names, and ``(key path, tensor)`` pairs of the tensor leaves. The leaves are
    the tensors themselves, not copies (as ``nn.Module.state_dict`` gives its parameters): their
    strides survive ``torch.save``, and a resumed env computes on the same layouts (an expanded
    parameter and its dense copy take different CPU kernels, which round differently)."""

    def path(key: Any) -> list:
        return list(key) if isinstance(key, tuple) else [key]

    # sorted by key path (a parent before its children): the same data gives the same state, whatever
    # order the entries were written in
    subs = sorted([path(k), list(v.batch_size)] for k, v in td.items(True) if isinstance(v, TensorDictBase))
    return {
        "batch_size": list(td.batch_size),
        "names": list(td.names),
        "collections": subs,
        "leaves": sorted(([path(k), v] for k, v in td.items(True, True)), key=lambda item: item[0]),
    }


def _from_plain(data: dict) -> TensorDictBase:
    td = TensorDict({}, batch_size=data["batch_size"])
    for key, batch_size in data["collections"]:
        td.set(tuple(key), TensorDict({}, batch_size=batch_size))
    for key, value in data["leaves"]:
        td.set(tuple(key), value)
    if any(n is not None for n in data["names"]):
        td.names = data["names"]
    return td


class Collector:
    """Turns an env and a policy into an iterator of ``[*env.batch_size, T]`` batches (TorchRL's ``Collector``).

    Every batch holds ``frames_per_batch`` frames (``T = frames_per_batch / env batch numel``), with
    ``("collector", "traj_ids")`` (a trajectory id per step, unique across sub-envs and batches) and
    ``("collector", "policy_version")`` (how many weight updates preceded the step). Done sub-envs are
    reset in place, so trajectories continue across batches.

    Args:
        create_env_fn: an env (anything with ``reset``/``step``/``batch_size`` and specs) or a callable
            returning one.
        policy: ``td -> td`` (a TensorDictModule, any callable) or a plain ``nn.Module`` (wired to the
            env's observation and action keys). ``None``: random actions from the action spec.
        frames_per_batch: frames per yielded batch (rounded up to a multiple of the env's batch numel).
        total_frames: stop after this many frames (``-1``: never). The last batch is cut so that the
            total is exact (rounded up to a multiple of the env's batch numel, with a warning).
        init_random_frames: the first frames use random actions.
        max_frames_per_traj: truncate (and reset) trajectories after this many steps.
        reset_at_each_iter: reset every sub-env at the start of each batch.
        split_trajs: yield ``[n_traj, T_max]`` batches, one row per trajectory, padded, with a
            ``("collector", "mask")`` of valid steps.
        postproc: applied to each batch before it is yielded.
        exploration_type: the interaction type the policy runs under (``tdict.nn.InteractionType``);
            ``RANDOM`` by default, as in TorchRL (a probabilistic policy samples its actions);
            ``None`` leaves the caller's setting alone.
        device, env_device, policy_device, storing_device: where things live (``device`` sets all three).
        replay_buffer: each batch is written into it (``extend``) and the iterator yields ``None``.
        compact_obs: drop the ``("next", ...)`` observation and state entries (within a trajectory
            they repeat the following step's root; the final observation of a trajectory is lost, as in
            TorchRL). Rewards and done flags stay.
        trajs_per_batch: yield batches of this many complete trajectories (split, padded) instead of a
            fixed frame count.
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        progress_bar: show a tqdm progress bar over ``total_frames``.

    Examples:
        >>> from rl_envs import PendulumEnv  # any env with the rl-envs contract
        >>> collector = Collector(PendulumEnv, None, frames_per_batch=50, total_frames=120)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([50]), torch.Size([50]), torch.Size([20])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        init_random_frames: int = 0,
        max_frames_per_traj: int | None = None,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        postproc: Callable | None = None,
        exploration_type: Any = InteractionType.RANDOM,
        device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        storing_device: Any = None,
        replay_buffer: Any = None,
        compact_obs: bool = False,
        trajs_per_batch: int | None = None,
        create_env_kwargs: dict | None = None,
        progress_bar: bool = False,
    ) -> None:
        check_positive_int("Collector", "frames_per_batch", frames_per_batch)
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"Collector: total_frames must be a positive int or -1, got {total_frames!r}.")
        if max_frames_per_traj is not None and max_frames_per_traj < 1:
            raise ValueError(f"Collector: max_frames_per_traj must be >= 1 or None, got {max_frames_per_traj}.")
        if trajs_per_batch is not None and trajs_per_batch < 1:
            raise ValueError(f"Collector: trajs_per_batch must be >= 1 or None, got {trajs_per_batch}.")
        self.env = _make_env(create_env_fn, create_env_kwargs)
        self._create_env_fn = create_env_fn
        if device is not None:
            env_device = env_device if env_device is not None else device
            policy_device = policy_device if policy_device is not None else device
            storing_device = storing_device if storing_device is not None else device
        self.env_device = torch.device(env_device) if env_device is not None else None
        self.policy_device = torch.device(policy_device) if policy_device is not None else None
        self.storing_device = torch.device(storing_device) if storing_device is not None else None
        self._given_policy = policy
        self.policy = _wrap_policy(policy, self.env)
        if self.policy is not None and self.policy_device is not None and isinstance(self.policy, nn.Module):
            self.policy = self.policy.to(self.policy_device)
        self._random_policy = self.env.rand_action  # the env contract's random action from its spec
        self._random_fill = _policy_only_entries(self.policy, self.env, init_random_frames > 0, self.policy_device)
        batch = self.env.batch_size
        self._n_envs = math.prod(batch)
        steps = -(-frames_per_batch // self._n_envs)
        if steps * self._n_envs != frames_per_batch:
            warnings.warn(
                f"Collector: frames_per_batch={frames_per_batch} is not a multiple of the env's {self._n_envs} "
                f"sub-envs; using {steps * self._n_envs}.",
                stacklevel=2,
            )
        self.frames_per_batch = steps * self._n_envs
        if total_frames > 0 and total_frames % self._n_envs:
            warnings.warn(
                f"Collector: total_frames={total_frames} is not a multiple of the env's {self._n_envs} sub-envs; "
                f"collecting {-(-total_frames // self._n_envs) * self._n_envs}.",
                stacklevel=2,
            )
        self._steps_per_batch = steps
        self.total_frames = total_frames
        self.init_random_frames = init_random_frames
        self.max_frames_per_traj = max_frames_per_traj
        self.reset_at_each_iter = reset_at_each_iter
        self.split_trajs = split_trajs
        self.postproc = postproc
        self.exploration_type = exploration_type
        self.replay_buffer = replay_buffer
        self.compact_obs = compact_obs
        self.trajs_per_batch = trajs_per_batch
        self.progress_bar = progress_bar
        self.policy_version = 0
        self._frames = 0
        self._iter = 0
        self._traj_count = 0
        self._td: TensorDictBase | None = None
        self._traj_ids: torch.Tensor | None = None
        self._traj_steps: torch.Tensor | None = None
        self._add_truncated = False  # set by _start (max_frames_per_traj on an env without "truncated")
        self._traj_pending: TensorDictBase | None = None  # steps not yet yielded (trajs_per_batch)
        self._shut = False
        self._rng: torch.Generator | None = None  # the collector's own random stream (set_seed)

    # ------------------------------------------------------------------ state
    @property
    def frames(self) -> int:
        """Frames collected so far."""
        return self._frames

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the env, then the collector's own generator; returns the next seed (:mod:`tdict.seeding`).

        The env gets ``seed`` and returns ``seed + k`` (its ``k`` random streams); the collector's
        generator gets ``seed + k`` and ``seed + k + 1`` is returned (``seed`` with ``static_seed``).
        From then on every draw from torch's global generator during collection (random actions, the
        policy's sampling and exploration noise) comes from the collector's generator instead
        (:func:`~tdict.seeding.use_generator`, on the env's device): the same seed gives the same
        data, and torch's global generator is neither reseeded nor advanced.
        """
        seed = check_seed("Collector.set_seed", seed)
        following = chain_seeds(seed, [self.env.set_seed, self._seed_generator])
        return seed if static_seed else following

    def _seed_generator(self, seed: int) -> int:
        self._rng = make_generator(seed, getattr(self.env, "device", None))  # where random actions are drawn
        return next_seed(seed)

    def reset(self) -> None:
        """Restarts every trajectory (the frame count is kept)."""
        self._td = None
        self._traj_pending = None

    def shutdown(self) -> None:
        """Closes the env (nothing of a single-process collector keeps running)."""
        if not self._shut:
            self._shut = True
            close = getattr(self.env, "close", None)
            if close is not None:
                close()

    def state_dict(self) -> dict:
        """What a resumed collector needs: counters, the policy's weights and version, the env's
        ``state_dict`` (its generators: the resets it will draw) and, for a ``resumable`` env, the
        step it is at (the carrier TensorDict, trajectory ids and lengths), so that a collector
        built the same way and loaded with it continues the same trajectories. Plain tensors,
        lists and numbers only: ``torch.load(weights_only=True)`` reads a saved copy."""
        state: dict[str, Any] = {
            "frames": self._frames,
            "iter": self._iter,
            "traj_count": self._traj_count,
            "policy_version": self.policy_version,
        }
        if isinstance(self.policy, nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        if isinstance(self.env, nn.Module):
            state["env"] = self.env.state_dict()
        if self._rng is not None:
            state["generator"] = self._rng.get_state()
        if self._td is not None and getattr(self.env, "resumable", False) and self.trajs_per_batch is None:
            assert self._traj_ids is not None  # set with _td by _start
            state["carrier"] = {
                "td": _plain(self._td),
                "traj_ids": self._traj_ids.clone(),
                "traj_steps": None if self._traj_steps is None else self._traj_steps.clone(),
                "add_truncated": self._add_truncated,
            }
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`. Without a carrier (an env that is not ``resumable``, or a
        state saved before the first batch) the next batch starts new trajectories with a reset."""
        carrier = state.get("carrier")
        td = None
        if carrier is not None:
            if not getattr(self.env, "resumable", False):
                raise ValueError(
                    f"Collector.load_state_dict: the state holds the step the env was at, but this collector's env "
                    f"({type(self.env).__name__}) is not resumable: it cannot continue from a saved step."
                )
            td = _from_plain(carrier["td"])
            if tuple(td.batch_size) != tuple(self.env.batch_size):
                raise ValueError(
                    f"Collector.load_state_dict: the saved step has batch size {tuple(td.batch_size)}, the env "
                    f"{tuple(self.env.batch_size)}."
                )
        generator = state.get("generator")
        if generator is not None:
            if not isinstance(generator, torch.Tensor) or generator.dtype is not torch.uint8:
                raise ValueError(
                    "Collector.load_state_dict: state['generator'] must be a uint8 tensor from "
                    f"Generator.get_state(), got {type(generator).__name__}."
                )
            if self._rng is None:
                self._seed_generator(0)
            assert self._rng is not None  # made by _seed_generator
            self._rng.set_state(generator.cpu())
        if "env" in state and isinstance(self.env, nn.Module):
            self.env.load_state_dict(state["env"])
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self._traj_count = int(state["traj_count"])
        self.policy_version = int(state.get("policy_version", 0))
        if "policy_state_dict" in state and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state["policy_state_dict"])
        self._td = td
        self._traj_pending = None
        if carrier is not None:  # td was read from it
            self._traj_ids = carrier["traj_ids"].clone()
            steps = carrier["traj_steps"]
            self._traj_steps = None if steps is None else steps.clone()
            self._add_truncated = bool(carrier["add_truncated"])

    def _user_policy_module(self) -> nn.Module:
        """The module that stands for the policy the user gave (the wrapped module for a plain one)."""
        policy = self.policy
        if isinstance(policy, TensorDictModule) and not isinstance(self._given_policy, TensorDictModuleBase):
            return cast(nn.Module, policy.module)  # _wrap_policy wrapped the nn.Module given
        return policy

    def update_policy_weights_(self, weights: TensorDictBase | None = None) -> None:
        """Makes the next batch use new weights: re-reads the policy given (no argument) or loads
        ``weights`` (a TensorDict from ``TensorDict.from_module`` of the policy given). Bumps
        :attr:`policy_version`."""
        if weights is not None:
            if not isinstance(self.policy, nn.Module):
                raise TypeError("update_policy_weights_: the policy has no parameters to update.")
            weights.to_module(self._user_policy_module())
        elif isinstance(self._given_policy, nn.Module):
            target = self._user_policy_module()
            if target is not self._given_policy:  # the collector runs a copy (moved to another device)
                TensorDict.from_module(self._given_policy).to_module(target)
        self.policy_version += 1

    # ------------------------------------------------------------------ collection
    def _start(self) -> None:
        td = self.env.reset()
        self._td = td
        n = self._n_envs
        self._traj_ids = torch.arange(self._traj_count, self._traj_count + n).reshape(self.env.batch_size)
        self._traj_count += n
        self._traj_steps = torch.zeros(self.env.batch_size, dtype=torch.int64)
        # an env without a "truncated" flag gets one from max_frames_per_traj, at the root and in
        # "next" of every step, so that every batch has the same keys (TorchRL adds a StepCounter)
        self._add_truncated = self.max_frames_per_traj is not None and "truncated" not in td.keys()
        if self._add_truncated:
            td.set("truncated", torch.zeros(self.env.batch_size, dtype=torch.bool, device=td.get("done").device))

    def _act(self, td: TensorDictBase) -> TensorDictBase:
        policy = self.policy
        if policy is None or self._frames < self.init_random_frames:
            td = self._random_policy(td)
            if self._random_fill is not None:  # the policy's other outputs, as zeros (TorchRL's layout)
                td.update(self._random_fill.clone())
            return td
        if self.policy_device is not None:
            # back to env_device, or else to where the env's data came from (a CPU env stepping with a GPU policy)
            back = self.env_device if self.env_device is not None else td.device
            out = policy(td.to(self.policy_device))
            if back is not None and out.device != back:
                out = out.to(back)
            return out
        out = policy(td)
        return td if out is None else out

    def _rollout(self, steps: int) -> TensorDictBase:
        """``steps`` steps of every sub-env, stacked along a new last batch dim."""
        env = self.env
        records = []
        version = torch.full(
            self.env.batch_size, self.policy_version, dtype=torch.int64
        )  # read-only: shared by the steps
        context = set_interaction_type(self.exploration_type) if self.exploration_type is not None else None
        if context is not None:
            context.__enter__()
        try:
            # seeded (set_seed): global draws (random actions, the policy's) come from the collector's generator
            with torch.no_grad(), use_generator(self._rng):
                if self._td is None or self.reset_at_each_iter:
                    self._start()
                td = self._td
                assert td is not None  # set by _start
                for _ in range(steps):
                    td = self._act(td)
                    td.set(_TRAJ, self._traj_ids)
                    td.set(_VERSION, version)
                    stepped, td = env.step_and_maybe_reset(td)
                    if self.max_frames_per_traj is not None:
                        td = self._truncate_long_trajectories(env, stepped, td)
                    records.append(stepped)
                    self._advance_traj_ids(stepped)
        finally:
            if context is not None:
                context.__exit__(None, None, None)
        self._td = td
        # one step (off-policy recipes collect frame by frame): a view, not a stacked copy
        batch = records[0].unsqueeze(len(env.batch_size)) if steps == 1 else tdict.stack(records, len(env.batch_size))
        batch.names = [None] * len(env.batch_size) + ["time"]
        if self.storing_device is not None:
            batch = batch.to(self.storing_device)
        return batch

    def _truncate_long_trajectories(self, env: Any, stepped: TensorDictBase, root: TensorDictBase) -> TensorDictBase:
        """Marks sub-envs that reached ``max_frames_per_traj`` truncated and resets them."""
        assert self._traj_steps is not None and self.max_frames_per_traj is not None  # _start set the counts
        self._traj_steps += 1
        nxt = stepped.get("next")
        done = nxt.get("done")
        over = (self._traj_steps >= self.max_frames_per_traj) & ~done
        if self._add_truncated:
            nxt.set("truncated", over)
            root.set("truncated", torch.zeros_like(over))  # the next root is never truncated: cut ones are reset
        if bool(over.any()):
            if not self._add_truncated:
                nxt.set("truncated", nxt.get("truncated") | over)
            nxt.set("done", done | over)
            root.set("done", root.get("done") | over)
            root.set("_reset", over)
            root = env.reset(root)
        return root

    def _advance_traj_ids(self, stepped: TensorDictBase) -> None:
        done = stepped.get(("next", "done"))
        if done.ndim > len(self.env.batch_size):
            done = done.reshape(*self.env.batch_size, -1).any(-1)
        if bool(done.any()):
            count = int(done.sum())
            new_ids = torch.arange(self._traj_count, self._traj_count + count)
            self._traj_count += count
            assert self._traj_ids is not None  # set by _start
            ids = self._traj_ids.clone()
            ids[done] = new_ids
            self._traj_ids = ids
            if self._traj_steps is not None:
                self._traj_steps = torch.where(done, torch.zeros_like(self._traj_steps), self._traj_steps)

    def _compact(self, batch: TensorDictBase) -> TensorDictBase:
        """Drops ``("next", obs/state)``: within a trajectory they repeat the following step's root
        (TorchRL's ``compact_obs``; rewards and done flags stay)."""
        keys = [*self.env.observation_keys, *getattr(self.env, "state_keys", [])]
        nxt = batch.get("next")
        batch.set("next", nxt.exclude(*[k for k in keys if k in nxt.keys(True)]))
        return batch

    @property
    def n_envs(self) -> int:
        """How many sub-envs step together (the env's batch numel)."""
        return self._n_envs

    def rollout_frames(self, frames: int, stop: Callable[[], bool] | None = None) -> TensorDictBase:
        """Collects about ``frames`` frames now (whole steps of every sub-env) and counts them.

        ``stop`` is asked between steps; when it returns True the batch ends early (at least one step
        is taken). Returns the raw ``[*env_batch, T]`` batch; :meth:`finish_batch` gives it the form
        iteration yields. (What multi-process workers run.)
        """
        steps = max(1, -(-frames // self._n_envs))
        if stop is None:
            batch = self._rollout(steps)
        else:
            chunks = [self._rollout(1)]
            while len(chunks) < steps and not stop():
                chunks.append(self._rollout(1))
            batch = tdict.cat(chunks, -1) if len(chunks) > 1 else chunks[0]
        self._frames += batch.numel()
        self._iter += 1
        return batch

    def finish_batch(self, batch: TensorDictBase) -> Any:
        """What iteration yields for a raw batch: split, postprocessed, or written to the replay buffer."""
        return self._finish(batch)

    def _finish(self, batch: TensorDictBase) -> Any:
        if self.split_trajs or self.trajs_per_batch is not None:
            batch = split_trajectories(batch)
        if self.compact_obs and not self.split_trajs:
            batch = self._compact(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            self.replay_buffer.extend(batch)
            return None
        return batch

    def _collect_trajs(self) -> TensorDictBase:
        """Steps until ``trajs_per_batch`` trajectories are complete; returns their steps (flat).

        Steps of trajectories that are still running, or that finished beyond the batch's count,
        are kept for the next call, so every yielded trajectory is whole.
        """
        pending = self._traj_pending
        while True:
            if pending is not None:
                ids = pending.get(_TRAJ)
                ended = torch.unique(ids[pending.get(("next", "done"))])
                if ended.numel() >= self.trajs_per_batch:
                    break
            chunk = self._rollout(1).reshape(-1)
            self._frames += chunk.numel()
            pending = chunk if pending is None else tdict.cat([pending, chunk])
        chosen = ended[: self.trajs_per_batch]  # the oldest finished trajectories (ids grow with start time)
        keep = torch.isin(pending.get(_TRAJ), chosen)
        self._traj_pending = pending[~keep] if bool((~keep).any()) else None
        return pending[keep]

    def __iter__(self) -> Iterator[Any]:
        if self._shut:
            raise RuntimeError("Collector: iterating after shutdown().")
        bar = None
        if self.progress_bar and self.total_frames > 0:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.total_frames, initial=self._frames, unit="frames")
        try:
            while self.total_frames < 0 or self._frames < self.total_frames:
                if self.trajs_per_batch is not None:
                    batch = self._collect_trajs()
                    frames = batch.numel()
                    out = self._finish_trajs(batch)
                else:
                    steps = self._steps_per_batch
                    if self.total_frames > 0:
                        remaining = self.total_frames - self._frames
                        steps = min(steps, -(-remaining // self._n_envs))
                    batch = self._rollout(steps)
                    frames = steps * self._n_envs
                    self._frames += frames
                    out = self._finish(batch)
                self._iter += 1
                if bar is not None:
                    bar.update(frames)
                yield out
        finally:
            if bar is not None:
                bar.close()

    def _finish_trajs(self, flat: TensorDictBase) -> Any:
        batch = split_trajectories(flat, trajectory_dim=0)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            self.replay_buffer.extend(batch)
            return None
        return batch

    def __repr__(self) -> str:
        return (
            f"Collector(env={type(self.env).__name__}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )


def _policy_only_entries(
    policy: Any, env: Any, dry_run: bool, policy_device: torch.device | None = None
) -> TensorDictBase | None:
    """Run the policy once on a fake step (no grad) when it has lazy layers or ``dry_run`` is set.

    Lazy layers (``nn.LazyLinear``, ``MLP(in_features=None)``) get their shapes before the first
    batch, so an optimizer or a loss built after the collector sees real parameters. With
    ``dry_run``, the entries the policy writes besides the action come back as zeros: random-action
    steps (``init_random_frames``) carry them too, so every batch has the same keys (TorchRL's
    collectors give random steps the policy's layout the same way).
    """
    lazy = isinstance(policy, nn.Module) and any(is_lazy(p) for p in policy.parameters())
    if policy is None or not (lazy or dry_run):
        return None
    fake = env.fake_tensordict()
    before = set(fake.keys(include_nested=True, leaves_only=True))
    with torch.no_grad():
        out = policy(fake.to(policy_device) if policy_device is not None else fake.copy())
    out = fake if out is None else out
    actions = set(env.action_keys)
    written = [k for k in out.keys(include_nested=True, leaves_only=True) if k not in before and k not in actions]
    if not dry_run or not written:
        return None
    zeros = out.select(*written).apply(torch.zeros_like)
    if policy_device is None:
        return zeros
    env_leaf = next(iter(fake.values(include_nested=True, leaves_only=True)), None)
    return zeros.to(env_leaf.device) if env_leaf is not None else zeros  # random steps live on the env's device
