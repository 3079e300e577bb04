"""SerialEnv: several copies of an env stepped one after the other in this process, as one batched env."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import chain_seeds

from ..env_base import EnvBase
from ..env_creator import EnvCreator
from ._forward import follow
from ._shared import BatchedEnvBase
from ._worker import BufferLayout, EnvRunner

__all__ = ["SerialEnv"]


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-envs in turn in this process; batch size ``[num_workers, *sub_batch]``.

    The specs are the sub-env's expanded over the workers. Each step copies the root entries the
    sub-envs read (actions, states, observations) into a preallocated buffer, steps every sub-env
    on its slice, and returns a copy of the buffer's ``"next"`` entries: only the keys the specs
    declare come back. A ``"_reset"`` mask resets only the flagged sub-envs. The sub-envs are built
    on first use (or by :meth:`start`); :meth:`close` closes them and a later call builds new ones.

    Sub-envs whose class can step many instances as one (``EnvBase._fuse_serial``: plain
    ``GymEnv`` s) are stepped in a single loop that writes into the buffer directly, and
    :meth:`rollout` then writes into the arrays it returns (with no policy, replayed actions or a
    TensorDict module as the policy, and no callback): the same data, without a TensorDict per
    sub-env and per step.

    Args:
        num_workers: the number of sub-envs.
        create_env_fn: a callable returning an env (an env class, a function, an
            :class:`~rl_envs.EnvCreator`), or a list of ``num_workers`` of them whose envs have the
            same batch size and specs.
        create_env_kwargs: keyword arguments for the factory: a dict, or one dict per worker.
        serial_for_single: accepted for TorchRL compatibility (a SerialEnv always runs in-process).
        device: the sub-envs' device, restated (``"cpu"`` also pins device-free sub-envs); another
            device raises ``ValueError`` (build the sub-envs there instead).
        share_individual_td: accepted for TorchRL compatibility: the sub-envs write into one
            stacked buffer either way, and the data returned is the same.
        use_buffers: ``True`` (default): the data go through a preallocated buffer (tensors whose shapes
            the specs fix; gymnasium sub-envs step fused). ``False``: each sub-env steps on its row of
            the input and the outputs are stacked, non-tensor entries (strings, metadata) included, lazily
            where the sub-envs' outputs differ in shape.

    Seeding (:mod:`tdict.seeding`): the sub-envs are seeded in turn, each with the seed the previous
    one's ``set_seed`` returned: with one random stream per sub-env, worker ``i`` gets ``seed + i`` and
    ``set_seed(seed)`` returns ``seed + num_workers``.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> env = SerialEnv(3, PendulumEnv)
        >>> env.set_seed(0)
        3
        >>> rollout = env.rollout(5)
        >>> rollout.batch_size, rollout["next", "reward"].shape
        (torch.Size([3, 5]), torch.Size([3, 5]))
        >>> env.close()
    """

    # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)
    _runners: list[EnvRunner]
    _fused: Any  # the sub-envs' fused stepper (EnvBase._fuse_serial), or None
    _fused_next: dict  # the buffer's "next" entries as numpy arrays (the shapes a fused step writes)
    _fused_root: dict  # its reset outputs: the buffer's root entries as numpy arrays
    _fused_action_key: Any  # the action a fused step reads
    _fused_stop_key: Any  # the flag whose sub-envs maybe_reset resets
    _fused_written: tuple  # the "next" keys a fused step writes, in the buffer's order
    _fused_reset_written: tuple  # the root keys a fused reset writes, in the buffer's order

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]] | EnvCreator,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        serial_for_single: bool = False,
        device: Any = None,
        use_buffers: bool = True,
        share_individual_td: bool | None = None,
    ) -> None:
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            serial_for_single=serial_for_single,
            device=device,
            use_buffers=use_buffers,
        )
        self.__dict__["_runners"] = []
        self.__dict__["_fused"] = None

    def _start_runners(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        runners = self._runners
        for i, creator in enumerate(self._creators):
            runners.append(EnvRunner(creator(), *((buffer[i], layout) if self._use_buffers else (None, None))))
        self.__dict__["_fused"] = self._fuse(buffer, layout) if self._use_buffers else None

    def _fuse(self, buffer: TensorDictBase, layout: BufferLayout) -> Any:
        """The sub-envs' fused stepper, with the buffer views it writes, or None."""
        envs = [runner.env for runner in self._runners]
        cls = type(envs[0])
        fused = cls._fuse_serial(envs) if all(type(env) is cls for env in envs) else None
        action_keys = self._keys().action_keys
        if (
            fused is None
            or set(fused.step_keys) != set(layout.next_keys)
            or set(fused.reset_keys) != set(layout.reset_out_keys)
            or len(action_keys) != 1
        ):
            return None
        nxt = buffer.get("next")
        self.__dict__["_fused_next"] = {key: nxt.get(key).numpy() for key in fused.step_keys}
        self.__dict__["_fused_root"] = {key: buffer.get(key).numpy() for key in fused.reset_keys}
        self.__dict__["_fused_action_key"] = action_keys[0]
        self.__dict__["_fused_stop_key"] = self._keys().stop_keys[0]
        self.__dict__["_fused_written"] = tuple(layout.next_keys)
        self.__dict__["_fused_reset_written"] = tuple(layout.reset_out_keys)
        return fused

    def _stop_runners(self) -> None:
        runners, self.__dict__["_runners"] = self._runners, []
        self.__dict__["_fused"] = None
        errors = []
        for runner in runners:
            try:
                runner.env.close()
            except Exception as err:  # every sub-env gets closed even when one fails
                errors.append(err)
        if errors:
            raise errors[0]

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._buffer is None:
            self.start()
        fused = self._fused
        if fused is None:
            return super()._step(tensordict)
        # fresh arrays, written by the sub-envs and returned as they are (no copy through the buffer)
        out = {key: like.copy() for key, like in self._fused_next.items()}
        fused.step(tensordict.get(self._fused_action_key), out)
        return TensorDict.unchecked(
            {key: torch.from_numpy(out[key]) for key in self._fused_written}, self.batch_size, self.device
        )

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Resets the done sub-envs (see :meth:`EnvBase.maybe_reset`); fused sub-envs in one loop
        that writes their rows into copies of the root's observation and flags."""
        fused = self._fused
        if fused is None:
            return super().maybe_reset(tensordict)
        done = tensordict.get(self._fused_stop_key, None)
        rows = [tensordict.get(key, None) for key in fused.reset_keys]
        if done is None or any(value is None for value in rows):  # not a step's root: the generic path
            return super().maybe_reset(tensordict)
        if not done.any():
            return tensordict
        out = {key: value.numpy().copy() for key, value in zip(fused.reset_keys, rows)}
        fused.reset(done.nonzero().flatten().tolist(), out)
        for key in fused.reset_keys:
            tensordict.set(key, torch.from_numpy(out[key]))
        return tensordict

    def _my_runners(self) -> list[EnvRunner]:
        """The runners of the sub-envs this env drives (a view's are some of its parent's)."""
        runners = self._owner._runners
        return runners if self._parent is None else [runners[i] for i in self._ids]

    def _run_step(self, keys: tuple, extras: list | None, positions: list | None = None) -> tuple[tuple, list]:
        written: tuple = ()
        runners = self._my_runners()
        chosen = range(len(runners)) if positions is None else positions
        extra = []
        for i in chosen:
            written, out = runners[i].step(keys, None if extras is None else extras[i])
            extra.append(out)
        return written, extra

    def _run_reset(self, need: list, keys: tuple, with_mask: bool, kwargs: dict, extras: list | None) -> tuple:
        if self._fused is not None and not kwargs:
            self._fused.reset([i for i, flag in enumerate(need) if flag], self._fused_root)
            return self._fused_reset_written, [None] * len(need)
        written: tuple = ()
        runners = self._my_runners()
        extra: list = [None] * len(runners)
        for i, (runner, flag) in enumerate(zip(runners, need)):
            if flag:
                written, extra[i] = runner.reset(keys, with_mask, kwargs, None if extras is None else extras[i])
        return written, extra

    def _run_seed(self, seed: int | None) -> int | None:
        return chain_seeds(seed, [runner.seed for runner in self._my_runners()])

    def _run_step_tds(self, parts: list, positions: list | None = None) -> list:
        runners = self._my_runners()
        chosen = range(len(runners)) if positions is None else positions
        return [runners[i].step_td(part) for i, part in zip(chosen, parts)]

    def _run_reset_tds(self, positions: list, parts: list, kwargs: dict) -> list:
        runners = self._my_runners()
        return [runners[i].reset_td(part, kwargs) for i, part in zip(positions, parts)]

    def _sub_env_has(self, name: str) -> bool:
        return hasattr(self._my_runners()[0].env, name)

    def _sub_env_values(self, path: tuple) -> list:
        return [follow(runner.env, path) for runner in self._my_runners()]

    def _sub_env_call(self, path: tuple, args: tuple, kwargs: dict) -> list:
        return [follow(runner.env, path)(*args, **kwargs) for runner in self._my_runners()]

    def _rollout_fused(self, max_steps: int, policy: Callable, break_any: bool) -> TensorDictBase | None:
        """The rollout written straight into its output arrays, or None when the sub-envs do not fuse
        (:func:`rl_envs.rollout.rollout` then runs the generic loop)."""
        if self._buffer is None:
            self.start()
        if self._fused is None:
            return None
        assert self._buffer is not None  # started above
        from ._fused import fused_rollout  # numpy: there only with the sub-envs that fuse (gymnasium)

        return fused_rollout(self, self._fused, self._buffer.get("next"), max_steps, policy, break_any)
