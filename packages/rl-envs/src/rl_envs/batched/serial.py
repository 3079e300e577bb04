"""SerialEnv: several copies of an env stepped one after the other in this process, as one batched env."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tdict import TensorDictBase
from tdict.seeding import chain_seeds

from ..env_base import EnvBase
from ..env_creator import EnvCreator
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
        use_buffers: only ``True`` (the sub-envs always exchange data through preallocated buffers).

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

    _runners: list[EnvRunner]  # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

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

    def _start_runners(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        runners = self._runners
        for i, creator in enumerate(self._creators):
            runners.append(EnvRunner(creator(), buffer[i], layout))

    def _stop_runners(self) -> None:
        runners, self.__dict__["_runners"] = self._runners, []
        errors = []
        for runner in runners:
            try:
                runner.env.close()
            except Exception as err:  # every sub-env gets closed even when one fails
                errors.append(err)
        if errors:
            raise errors[0]

    def _run_step(self, keys: tuple) -> tuple:
        written: tuple = ()
        for runner in self._runners:
            written = runner.step(keys)
        return written

    def _run_reset(self, need: list, keys: tuple, with_mask: bool, kwargs: dict) -> tuple:
        written: tuple = ()
        for runner, flag in zip(self._runners, need):
            if flag:
                written = runner.reset(keys, with_mask, kwargs)
        return written

    def _run_seed(self, seed: int | None) -> int | None:
        return chain_seeds(seed, [runner.seed for runner in self._runners])
