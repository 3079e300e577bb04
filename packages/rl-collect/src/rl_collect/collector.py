"""Collector: runs an env with a policy and yields batches of ``frames_per_batch`` frames."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterator, cast

import tdict
import torch
from torch import nn
from tdict import TensorDict, TensorDictBase
from tdict.nn import InteractionType, TensorDictModule, TensorDictModuleBase, set_interaction_type
from tdict.seeding import chain_seeds, check_seed, make_generator, next_seed, use_generator
from tdict.validation import check_positive_int

from ._buffer import write
from ._options import check_unsupported, policy_scheme
from ._policy import make_env, make_policy, policy_only_entries, weights_of, wrap_policy
from ._state import CollectorState
from .assembly import TrajectoryAssembler, check_traj_format, write_trajectories
from .base import BaseCollector
from .trajectories import split_trajectories

__all__ = ["Collector"]

_TRAJ = ("collector", "traj_ids")
_VERSION = ("collector", "policy_version")


class Collector(CollectorState, BaseCollector):
    """Turns an env and a policy into an iterator of ``[*env.batch_size, T]`` batches (TorchRL's ``Collector``).

    Every batch holds ``frames_per_batch`` frames (``T = frames_per_batch / env batch numel``), with
    ``("collector", "traj_ids")`` (a trajectory id per step, unique across sub-envs and batches) and
    ``("collector", "policy_version")`` (how many weight updates preceded the step). Done sub-envs are
    reset in place, so trajectories continue across batches.

    Args:
        create_env_fn: an env (anything with ``reset``/``step``/``batch_size`` and specs) or a callable
            returning one.
        policy: ``td -> td`` (a TensorDictModule, any callable) or a plain ``nn.Module`` (wired to the
            env's observation and action keys). ``None``: random actions from the action spec. A
            policy with ``set_action_spec_from_env`` (a ``RandomPolicy()`` without a spec) gets the env's.
        policy_factory: a callable returning the policy (instead of ``policy``).
        frames_per_batch: frames per yielded batch (rounded up to a multiple of the env's batch numel).
        total_frames: stop after this many frames (``-1`` or ``None``: never). The last batch is cut so
            that the total is exact (rounded up to a multiple of the env's batch numel, with a warning).
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
        trajs_per_batch: yield batches of this many complete trajectories instead of a fixed frame
            count (``frames_per_batch`` frames are collected at a time until enough have ended). With a
            replay buffer, every completed trajectory is written, flat (``traj_format="cat"``).
        traj_format: ``"padded"`` (``[n, T_max]`` with a ``("collector", "mask")``, the default) or
            ``"cat"`` (the trajectories one after the other, flat) for ``trajs_per_batch``.
        trajs_per_write: with ``trajs_per_batch`` and a replay buffer, write this many trajectories
            per ``extend`` (default: all those completed).
        extend_buffer: ``False`` writes the replay buffer one time step at a time.
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        progress_bar: show a tqdm progress bar over ``total_frames``.
        track_traj_ids: write the ``("collector", ...)`` entries (``False``: none).
        track_policy_version: also write the policy version as ``"policy_version"`` and
            ``("next", "policy_version")``, TorchRL's layout, and report it in :meth:`stats`.
        set_truncated: mark the last step of each batch truncated (and done) in ``"next"``; the env
            itself continues the trajectory.
        pre_collect_hook, post_collect_hook: see :class:`~rl_collect.BaseCollector`.
        weight_sync_schemes: ``{"policy": scheme}``: accepted for symmetry with the multi-process
            collectors (a single-process collector loads new weights directly).
        worker_idx: this collector's index among several (set by multi-process collectors).
        backend: ``None`` or ``"direct"`` (this class); TorchRL's other backends build other classes,
            which this constructor never returns: use :class:`~rl_collect.MultiSyncCollector`,
            :class:`~rl_collect.MultiAsyncCollector`, :class:`~rl_collect.RayCollector` or
            :class:`~rl_collect.DistributedCollector` directly.
        backend_options, num_collectors, sync: for ``backend``; only their defaults are accepted.
        use_buffers, trust_policy, no_cuda_sync, return_same_td: TorchRL performance hints, accepted
            and without effect here.
        reset_when_done, compile_policy, cudagraph_policy, weight_updater, weight_recv_schemes: only
            TorchRL's defaults are accepted (likewise ``interruptor`` and ``auto_register_policy_transforms``).

    Examples:
        >>> from rl_envs import PendulumEnv  # any env with the rl-envs contract
        >>> collector = Collector(PendulumEnv, None, frames_per_batch=50, total_frames=120)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([50]), torch.Size([50]), torch.Size([20])]
        >>> collector.shutdown()
    """

    #: drop root entries whose names start with ``"_"`` from the batches (TorchRL does the same)
    exclude_private_keys: bool = True

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        policy_factory: Callable[[], Any] | None = None,
        backend: str | None = None,
        backend_options: dict | None = None,
        num_collectors: int | None = None,
        sync: bool | None = None,
        frames_per_batch: int,
        total_frames: int | None = -1,
        device: Any = None,
        storing_device: Any = None,
        policy_device: Any = None,
        env_device: Any = None,
        create_env_kwargs: dict | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable | None = None,
        split_trajs: bool | None = None,
        track_traj_ids: bool = True,
        exploration_type: Any = InteractionType.RANDOM,
        return_same_td: bool = False,
        reset_when_done: bool = True,
        interruptor: Any = None,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trust_policy: bool | None = None,
        compile_policy: Any = None,
        cudagraph_policy: Any = None,
        no_cuda_sync: bool = False,
        weight_updater: Any = None,
        weight_sync_schemes: dict | None = None,
        weight_recv_schemes: dict | None = None,
        track_policy_version: bool = False,
        worker_idx: int | None = None,
        trajs_per_batch: int | None = None,
        trajs_per_write: int | None = None,
        traj_format: str | None = None,
        auto_register_policy_transforms: bool | None = None,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[Any], Any] | None = None,
        compact_obs: bool = False,
        progress_bar: bool = False,
    ) -> None:
        if backend not in (None, "direct") or backend_options or sync is not None or num_collectors not in (None, 1):
            raise ValueError(
                f"Collector: backend={backend!r}, backend_options, num_collectors={num_collectors!r} and sync={sync!r} "
                "select another collector class in TorchRL, which this constructor never returns; build "
                "MultiSyncCollector, MultiAsyncCollector, RayCollector or DistributedCollector directly."
            )
        check_positive_int("Collector", "frames_per_batch", frames_per_batch)
        total_frames = -1 if total_frames is None else total_frames
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"Collector: total_frames must be a positive int or -1, got {total_frames!r}.")
        init_random_frames = 0 if init_random_frames is None else int(init_random_frames)
        if max_frames_per_traj is not None and max_frames_per_traj < 1:
            raise ValueError(f"Collector: max_frames_per_traj must be >= 1 or None, got {max_frames_per_traj}.")
        if trajs_per_batch is not None and trajs_per_batch < 1:
            raise ValueError(f"Collector: trajs_per_batch must be >= 1 or None, got {trajs_per_batch}.")
        if trajs_per_write is not None and (trajs_per_batch is None or replay_buffer is None or trajs_per_write < 1):
            raise ValueError(
                f"Collector: trajs_per_write={trajs_per_write!r} must be >= 1 and needs trajs_per_batch and a replay_buffer."
            )
        if replay_buffer is not None and not extend_buffer and (postproc is not None or split_trajs):
            raise ValueError(
                "Collector: with extend_buffer=False the replay buffer gets one step at a time; postproc and "
                "split_trajs need whole batches (set extend_buffer=True)."
            )
        if trajs_per_batch is not None and not track_traj_ids:
            raise ValueError(
                "Collector: trajs_per_batch assembles trajectories by their ids; it needs track_traj_ids=True."
            )
        check_unsupported(
            "Collector",
            reset_when_done=reset_when_done,
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
            weight_updater=weight_updater,
            weight_recv_schemes=weight_recv_schemes,
            interruptor=interruptor,
            auto_register_policy_transforms=auto_register_policy_transforms,
        )
        self.weight_sync_scheme = policy_scheme("Collector", weight_sync_schemes)
        self.traj_format = check_traj_format("Collector", traj_format, trajs_per_batch, replay_buffer)
        policy = make_policy("Collector", policy, policy_factory, weight_sync_schemes)
        self.env = make_env(create_env_fn, create_env_kwargs)
        self._create_env_fn = create_env_fn
        if max_frames_per_traj is not None and "step_count" in list(getattr(self.env, "observation_keys", [])):
            raise ValueError(
                f"Collector: max_frames_per_traj={max_frames_per_traj} with an env that already counts its steps (a "
                "'step_count' entry, e.g. a StepCounter transform): cut trajectories there (StepCounter(max_steps=...)) "
                "or drop max_frames_per_traj."
            )
        if device is not None:
            env_device = env_device if env_device is not None else device
            policy_device = policy_device if policy_device is not None else device
            storing_device = storing_device if storing_device is not None else device
        self.env_device = torch.device(env_device) if env_device is not None else None
        self.policy_device = torch.device(policy_device) if policy_device is not None else None
        self.storing_device = torch.device(storing_device) if storing_device is not None else None
        # TorchRL's device rules where only env_device is given: a policy without a device gets its input
        # without one, and batches without a storing device keep the env's only when the policy shares it
        self._policy_without_device = self.policy_device is None and self.env_device is not None
        self._batch_without_device = self.storing_device is None and self.env_device not in (None, self.policy_device)
        if hasattr(policy, "set_action_spec_from_env"):  # a RandomPolicy() waiting for the env's spec
            policy.set_action_spec_from_env(self.env)
        self._given_policy = policy
        self.policy = wrap_policy(policy, self.env)
        if self.policy is not None and self.policy_device is not None and isinstance(self.policy, nn.Module):
            self.policy = self.policy.to(self.policy_device)
        self._random_policy = self.env.rand_action  # the env contract's random action from its spec
        self._random_fill = policy_only_entries(self.policy, self.env, init_random_frames > 0, self.policy_device)
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
        self._truncated_keys: list = []
        if set_truncated:
            done_keys = list(getattr(self.env, "done_keys", ["done"]))
            self._truncated_keys = [k for k in done_keys if (k[-1] if isinstance(k, tuple) else k) == "truncated"]
            if not self._truncated_keys:
                raise RuntimeError(
                    f"Collector: set_truncated=True needs a 'truncated' entry among the env's done keys {done_keys} "
                    "(add one to the env, e.g. with rl_envs' add_truncated_keys())."
                )
        done_keys = [k if isinstance(k, tuple) else (k,) for k in getattr(self.env, "done_keys", ["done"])]
        # trajectory ids follow the root "done"; envs without one (nested done flags) aggregate theirs
        self._done_keys = None if ("done",) in done_keys else [k for k in done_keys if k[-1] == "done"]
        self._steps_per_batch = steps
        self.total_frames = total_frames
        self.init_random_frames = init_random_frames
        self.max_frames_per_traj = max_frames_per_traj
        self.reset_at_each_iter = reset_at_each_iter
        self.split_trajs = bool(split_trajs)
        self.postproc = postproc
        self.exploration_type = exploration_type
        self.replay_buffer = replay_buffer
        self.extend_buffer = extend_buffer
        self.compact_obs = compact_obs
        self.trajs_per_batch = trajs_per_batch
        self.trajs_per_write = trajs_per_write
        self.progress_bar = progress_bar
        self.track_traj_ids = track_traj_ids
        self.track_policy_version = track_policy_version
        self.set_truncated = set_truncated
        self.worker_idx = worker_idx
        self.pre_collect_hook = pre_collect_hook
        self.post_collect_hook = post_collect_hook
        self.policy_version = 0
        self._frames = 0
        self._iter = 0
        self._traj_count = 0
        self._td: TensorDictBase | None = None
        self._traj_ids: torch.Tensor | None = None
        self._reserved_ids: torch.Tensor | None = None  # ids taken by load_state_dict for the next _start
        self._traj_steps: torch.Tensor | None = None
        self._done_ndim = 0  # dims of the env's "done" flag (set by _start)
        self._add_truncated = False  # set by _start (max_frames_per_traj on an env without "truncated")
        self._assembler = TrajectoryAssembler(self.traj_format) if trajs_per_batch is not None else None
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
        """Restarts every trajectory (the frame count is kept); trajectories being assembled are dropped."""
        self._td = None
        if self._assembler is not None:
            self._assembler.clear()

    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True) -> None:
        """Closes the env (nothing of a single-process collector keeps running); ``close_env=False`` leaves it open."""
        if self._runner is not None:  # collecting in the background (start()): stop that first
            runner, self._runner = self._runner, None
            runner.join(timeout)
        if not self._shut:
            self._shut = True
            close = getattr(self.env, "close", None)
            if close is not None and close_env:
                try:
                    close()
                except Exception:
                    if raise_on_error:
                        raise

    def _user_policy_module(self) -> nn.Module:
        """The module that stands for the policy the user gave (the wrapped module for a plain one)."""
        policy = self.policy
        if isinstance(policy, TensorDictModule) and not isinstance(self._given_policy, TensorDictModuleBase):
            return cast(nn.Module, policy.module)  # _wrap_policy wrapped the nn.Module given
        return policy

    def update_policy_weights_(
        self, policy_or_weights: Any = None, *, worker_ids: Any = None, weights: Any = None
    ) -> None:
        """Makes the next batch use new weights: re-reads the policy given (no argument) or loads
        ``policy_or_weights`` (a TensorDict from ``TensorDict.from_module`` of the policy given, or a
        module of the same structure). Bumps :attr:`policy_version`. ``worker_ids`` is accepted for
        symmetry with the multi-process collectors and ignored."""
        weights = weights_of("Collector.update_policy_weights_", policy_or_weights if weights is None else weights)
        if isinstance(weights, dict):  # {worker_id: weights}: this collector is the only worker
            if len(weights) != 1:
                raise ValueError(
                    f"Collector.update_policy_weights_: one collector takes one set of weights, got a dict for workers "
                    f"{sorted(weights)}."
                )
            weights = weights_of("Collector.update_policy_weights_", next(iter(weights.values())))
        if weights is not None:
            if not isinstance(self.policy, nn.Module):
                raise TypeError("update_policy_weights_: the policy has no parameters to update.")
            # collecting in the background (start()): copy into the tensors the running policy reads,
            # never swap them out under it
            with torch.no_grad():
                weights.to_module(self._user_policy_module(), inplace=True if self._runner is not None else None)
        elif isinstance(self._given_policy, nn.Module):
            target = self._user_policy_module()
            if target is not self._given_policy:  # the collector runs a copy (moved to another device)
                with torch.no_grad():
                    TensorDict.from_module(self._given_policy).to_module(
                        target, inplace=True if self._runner is not None else None
                    )
        self.policy_version += 1

    # ------------------------------------------------------------------ collection
    def _start(self) -> None:
        td = self.env.reset()
        self._td = td
        ids, self._reserved_ids = self._reserved_ids, None
        self._traj_ids = ids if ids is not None else self._take_ids()
        self._traj_steps = torch.zeros(self.env.batch_size, dtype=torch.int64)
        done = td.get("done", None)
        self._done_ndim = self._traj_steps.ndim if done is None else done.ndim
        # an env without a "truncated" flag gets one from max_frames_per_traj, at the root and in
        # "next" of every step, so that every batch has the same keys (TorchRL adds a StepCounter)
        self._add_truncated = self.max_frames_per_traj is not None and "truncated" not in td.keys()
        if self._add_truncated:
            td.set("truncated", torch.zeros_like(td.get("done")))

    def _take_ids(self) -> torch.Tensor:
        """The next ``n_envs`` trajectory ids, shaped like the env's batch (they are counted as given out)."""
        n = self._n_envs
        ids = torch.arange(self._traj_count, self._traj_count + n).reshape(self.env.batch_size)
        self._traj_count += n
        return ids

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
            leaf = None if back is not None else next(iter(td.values(True, True)), None)
            out = policy(td.to(self.policy_device))
            if back is None:  # a device-less env: its data goes back to where its leaves were, device-less
                if leaf is not None:
                    out = out.to(leaf.device)
                if out.device is not None:
                    out.clear_device_()
            elif out.device != back:
                out = out.to(back)
            return out
        if self._policy_without_device:
            out = policy(_clear_device(td))
            return (td if out is None else out).to(self.env_device)
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
                track = self.track_traj_ids
                for _ in range(steps):
                    td = self._act(td)
                    if track:
                        td.set(_TRAJ, self._traj_ids)
                        td.set(_VERSION, version)
                    if self.max_frames_per_traj is not None:  # TorchRL's StepCounter: the count before the step
                        td.set("step_count", self._step_counts())
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
        elif self._batch_without_device:
            _clear_device(batch)
        return batch

    def _truncate_long_trajectories(self, env: Any, stepped: TensorDictBase, root: TensorDictBase) -> TensorDictBase:
        """Marks sub-envs that reached ``max_frames_per_traj`` truncated and resets them."""
        assert self._traj_steps is not None and self.max_frames_per_traj is not None  # _start set the counts
        self._traj_steps += 1
        nxt = stepped.get("next")
        done = nxt.get("done")
        steps = self._step_counts()
        nxt.set("step_count", steps)
        over = (steps >= self.max_frames_per_traj) & ~done
        if self._add_truncated:
            nxt.set("truncated", over)
            root.set("truncated", torch.zeros_like(over))  # the next root is never truncated: cut ones are reset
        if bool(over.any()):
            if not self._add_truncated:
                nxt.set("truncated", nxt.get("truncated") | over)
            nxt.set("done", done | over)
            root.set("done", root.get("done") | over)
            batch_shape = self._traj_steps.shape
            root.set("_reset", over if over.ndim == len(batch_shape) else over.reshape(*batch_shape, -1).any(-1))
            root = env.reset(root)
        return root

    def _step_counts(self) -> torch.Tensor:
        """The steps of each sub-env's trajectory so far, shaped like the env's ``"done"`` flag (a
        ``[*batch, 1]`` flag gets a ``[*batch, 1]`` count)."""
        steps = self._traj_steps
        assert steps is not None  # set by _start
        extra = self._done_ndim - steps.ndim
        return (steps.reshape(*steps.shape, *(1,) * extra) if extra > 0 else steps).clone()

    def _advance_traj_ids(self, stepped: TensorDictBase) -> None:
        if self._done_keys is None:
            done = stepped.get(("next", "done"))
        else:  # no root "done" (nested envs): any sub-env's done flag ends its trajectory
            done = torch.stack([_per_env(stepped.get(("next", *k)), self.env.batch_size) for k in self._done_keys]).any(
                0
            )
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

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled batch with the shape, names and keys of the batches iteration yields (without
        ``split_trajs``, ``postproc`` or ``trajs_per_batch``): the env's keys, the policy's outputs and
        the collector's entries. Neither the env nor the collector's state is touched."""
        step = self.env.fake_tensordict()
        with torch.no_grad():
            if self.policy is None:
                step = self._random_policy(step)
            else:
                out = self.policy(step.to(self.policy_device) if self.policy_device is not None else step)
                step = step if out is None else out
        step = step.apply(torch.zeros_like)
        if self.track_traj_ids:
            step.set(_TRAJ, torch.zeros(self.env.batch_size, dtype=torch.int64))
            step.set(_VERSION, torch.zeros(self.env.batch_size, dtype=torch.int64))
        batch = self._mark(
            step.unsqueeze(len(self.env.batch_size)).expand(*self.env.batch_size, self._steps_per_batch).clone()
        )
        batch.names = [None] * len(self.env.batch_size) + ["time"]
        if self.compact_obs:
            batch = self._compact(batch)
        if self._batch_without_device:
            _clear_device(batch)
        return batch if self.storing_device is None else batch.to(self.storing_device)

    def _tracked_version(self) -> int | None:
        return self.policy_version if self.track_policy_version else None

    def rollout_frames(self, frames: int, stop: Callable[[], bool] | None = None) -> TensorDictBase:
        """Collects about ``frames`` frames now (whole steps of every sub-env) and counts them.

        ``stop`` is asked between steps; when it returns True the batch ends early (at least one step
        is taken). Returns the raw ``[*env_batch, T]`` batch; :meth:`finish_batch` gives it the form
        iteration yields. (What multi-process workers run.)
        """
        if self._pre_collect_hook is not None:
            self._pre_collect_hook()
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
        """What iteration yields for a raw batch: split, postprocessed, or written to the replay buffer
        (then ``None``); the post-collect hook sees it."""
        out = self._finish(batch)
        if self._post_collect_hook is not None:
            self._post_collect_hook(out)
        return out

    def _mark(self, batch: TensorDictBase) -> TensorDictBase:
        """``set_truncated`` and ``track_policy_version`` entries of a raw ``[*env_batch, T]`` batch,
        without its private root entries (names starting with ``"_"``: control keys, scratch outputs)."""
        if self.exclude_private_keys:
            private = [key for key in batch.keys() if key.startswith("_")]
            if private:
                batch = batch.exclude(*private)
        if self._truncated_keys:
            nxt = batch.get("next")
            last = (slice(None),) * (batch.ndim - 1) + (-1,)
            for key in self._truncated_keys:
                done_key = (*key[:-1], "done") if isinstance(key, tuple) else "done"
                truncated = nxt.get(key).clone()
                truncated[last] = True
                nxt.set(key, truncated)
                if done_key in nxt.keys(True):
                    nxt.set(done_key, nxt.get(done_key) | truncated)
        if self.track_policy_version:
            if self.track_traj_ids:
                version = batch.get(_VERSION)
            else:
                version = torch.full(batch.batch_size, self.policy_version, dtype=torch.int64)
            batch.set("policy_version", version)
            batch.set(("next", "policy_version"), version)
        return batch

    def _finish(self, batch: TensorDictBase) -> Any:
        batch = self._mark(batch)
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.compact_obs and not self.split_trajs:
            batch = self._compact(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        return self._write(batch)

    def _write(self, batch: TensorDictBase) -> Any:
        """``batch``, or None once written to the replay buffer (whole, or one time step at a time)."""
        if self.replay_buffer is None:
            return batch
        write(self.replay_buffer, batch, whole=self.extend_buffer)
        return None

    def _steps_now(self) -> int:
        steps = self._steps_per_batch
        if self.total_frames > 0:
            steps = min(steps, -(-(self.total_frames - self._frames) // self._n_envs))
        return steps

    def _frame_batches(self) -> Iterator[tuple[int, Any]]:
        while self.total_frames < 0 or self._frames < self.total_frames:
            if self._pre_collect_hook is not None:
                self._pre_collect_hook()
            steps = self._steps_now()
            batch = self._rollout(steps)
            self._frames += steps * self._n_envs
            yield steps * self._n_envs, self._finish(batch)

    def _traj_batches(self) -> Iterator[tuple[int, Any]]:
        """``trajs_per_batch``: polls of ``frames_per_batch`` frames until enough trajectories ended;
        with a replay buffer, each poll writes the trajectories completed so far and yields ``None``."""
        assembler = self._assembler
        assert assembler is not None and self.trajs_per_batch is not None  # the caller checked
        while True:
            if self.replay_buffer is None and assembler.complete >= self.trajs_per_batch:
                out = assembler.pop(self.trajs_per_batch)
                yield 0, out if self.postproc is None else self.postproc(out)
                continue
            if 0 < self.total_frames <= self._frames:
                return
            if self._pre_collect_hook is not None:
                self._pre_collect_hook()
            steps = self._steps_now()
            assembler.add(self._mark(self._rollout(steps)))
            self._frames += steps * self._n_envs
            if self.replay_buffer is not None:
                write_trajectories(assembler, self.replay_buffer, self.trajs_per_write, self.postproc)
                yield steps * self._n_envs, None

    def __iter__(self) -> Iterator[Any]:
        if self._shut:
            raise RuntimeError("Collector: iterating after shutdown().")
        bar = None
        if self.progress_bar and self.total_frames > 0:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.total_frames, initial=self._frames, unit="frames")
        try:
            batches = self._traj_batches() if self._assembler is not None else self._frame_batches()
            for frames, out in batches:
                self._iter += 1
                if bar is not None:
                    bar.update(frames)
                if self._post_collect_hook is not None:
                    self._post_collect_hook(out)
                yield out
        finally:
            if bar is not None:
                bar.close()

    def __repr__(self) -> str:
        return (
            f"Collector(env={type(self.env).__name__}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )


def _per_env(flag: torch.Tensor, batch_size: torch.Size) -> torch.Tensor:
    """A done flag reduced to one value per sub-env (any over its extra dims)."""
    return flag.reshape(*batch_size, -1).any(-1) if flag.ndim > len(batch_size) else flag


def _clear_device(td: Any) -> Any:
    """``td`` (and its sub-collections) without a device, in place; the leaves stay where they are."""
    return td.clear_device_()
