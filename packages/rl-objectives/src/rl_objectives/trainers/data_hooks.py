"""Trainer hooks that shape the data: replay buffer, sub-trajectory sampling, reward normalisation and
key selection (``torchrl.trainers`` names).

Batches follow the data contract: a collector batch has batch shape ``[*B, T]`` with time last, and
per-step scalars (``("next", "reward")``, ...) have exactly that shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tdict import TensorDictBase, unravel_key
from tdict.validation import check_non_negative_int, check_positive_int

from .hooks import TrainerHookBase

__all__ = ["BatchSubSampler", "ReplayBufferTrainer", "RewardNormalizer", "SelectKeys"]


def _check_td(owner: str, batch: Any) -> TensorDictBase:
    if not isinstance(batch, TensorDictBase):
        raise TypeError(f"{owner}: expected a TensorDict batch, got {type(batch).__name__}.")
    return batch


class ReplayBufferTrainer(TrainerHookBase):
    """Feeds collected batches into a replay buffer and trains on samples from it.

    Registers three operations: ``extend`` at ``"batch_process"`` (every collected batch goes into the
    buffer), ``sample`` at ``"process_optim_batch"`` (every optimisation step trains on a sample) and
    ``update_priority`` at ``"post_loss"`` (when the loss wrote a priority, e.g. DQN's ``"td_error"``,
    and the buffer is prioritized, the sampled items get it as their new priority; a buffer whose
    ``sampler`` has no ``alpha``/``beta`` exponents, e.g. a uniform one, is left alone).

    The buffer is duck-typed: it needs ``extend(td)`` and ``sample(batch_size)`` (or ``sample()``);
    priorities go through ``update_tensordict_priority(td)`` when the buffer has it (rl_replay's
    TensorDict buffers), else through ``update_priority(td["index"], td[priority_key])``.

    Args:
        replay_buffer: the buffer.
        batch_size: items per sample; ``None``: the buffer's own default.
        memmap: move every batch to memory-mapped storage before writing it.
        device: move every batch (and every sample) to this device.
        flatten_tensordicts: write the ``[*B, T]`` batch as ``B * T`` single steps (default); with
            ``False`` the batch is written as it is (one item per leading index, e.g. trajectories).
        iterate: sample by iterating the buffer (epochs without replacement, restarted when one
            ends) instead of calling ``sample``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import ReplayBufferTrainer
        >>> class ListBuffer:
        ...     def __init__(self):
        ...         self.items = []
        ...     def extend(self, td):
        ...         self.items.extend(td.unbind(0))
        ...     def sample(self, batch_size):
        ...         return torch.stack(self.items[:batch_size], 0)
        >>> hook = ReplayBufferTrainer(ListBuffer(), batch_size=4)
        >>> hook.extend(TensorDict(obs=torch.arange(6.0).reshape(2, 3), batch_size=[2, 3]))
        >>> hook.sample(None)["obs"]
        tensor([0., 1., 2., 3.])
    """

    def __init__(
        self,
        replay_buffer: Any,
        batch_size: int | None = None,
        memmap: bool = False,
        device: Any = None,
        flatten_tensordicts: bool = True,
        iterate: bool = False,
    ) -> None:
        needed = ["extend"] + (["__iter__"] if iterate else ["sample"])
        missing = [m for m in needed if not callable(getattr(replay_buffer, m, None))]
        if missing:
            raise TypeError(
                f"ReplayBufferTrainer: replay_buffer must have {needed}, got {type(replay_buffer).__name__} without {missing}."
            )
        if batch_size is not None:
            check_positive_int("ReplayBufferTrainer", "batch_size", batch_size)
        if iterate and batch_size is not None:
            raise ValueError(
                "ReplayBufferTrainer: iterate=True samples with the buffer's own batch_size; pass batch_size=None."
            )
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        self.memmap = bool(memmap)
        self.device = None if device is None else torch.device(device)
        self.flatten_tensordicts = bool(flatten_tensordicts)
        self.iterate = bool(iterate)
        self.priority_key = unravel_key(getattr(replay_buffer, "priority_key", "td_error"))
        self._iterator = None

    @torch.no_grad()
    def extend(self, batch: TensorDictBase) -> None:
        """Writes ``batch`` into the buffer (returns ``None``: the trainer's batch is unchanged)."""
        batch = _check_td("ReplayBufferTrainer.extend", batch)
        if self.flatten_tensordicts and batch.ndim != 1:
            batch = batch.reshape(-1)
        if self.device is not None:
            batch = batch.to(self.device)
        if self.memmap:
            batch = batch.memmap()  # a memory-mapped copy; the collector's batch is left alone
        self.replay_buffer.extend(batch)

    def sample(self, batch: Any = None) -> TensorDictBase:
        """A sample from the buffer (the trainer's batch is ignored)."""
        if self.iterate:
            if self._iterator is None:
                self._iterator = iter(self.replay_buffer)
            try:
                sample = next(self._iterator)
            except StopIteration:  # an epoch ended: start the next one
                self._iterator = iter(self.replay_buffer)
                sample = next(self._iterator)
        elif self.batch_size is None:
            sample = self.replay_buffer.sample()
        else:
            sample = self.replay_buffer.sample(self.batch_size)
        return sample if self.device is None else sample.to(self.device)

    def _takes_priorities(self) -> bool:
        # as TorchRL: priorities go to prioritized buffers only (SAC, TD3, ... write a TD error into every
        # sample, also with a uniform buffer). A buffer that shows its sampler is prioritized when the
        # sampler has the PER exponents alpha and beta; a duck-typed buffer without one decides itself.
        sampler = getattr(self.replay_buffer, "sampler", None)
        return sampler is None or (hasattr(sampler, "alpha") and hasattr(sampler, "beta"))

    def update_priority(self, batch: TensorDictBase) -> None:
        """Sends the priority the loss wrote into the sample back to the buffer (no-op when absent, or
        when the buffer's sampler has no priorities)."""
        batch = _check_td("ReplayBufferTrainer.update_priority", batch)
        if self.priority_key not in batch.keys(include_nested=True) or not self._takes_priorities():
            return
        if callable(getattr(self.replay_buffer, "update_tensordict_priority", None)):
            self.replay_buffer.update_tensordict_priority(batch)
        elif callable(getattr(self.replay_buffer, "update_priority", None)):
            if "index" not in batch.keys():  # noqa: SIM118  (membership is asked of the keys view)
                raise KeyError(
                    f"ReplayBufferTrainer.update_priority: the sample holds {self.priority_key!r} but no 'index' entry "
                    f"to tell the buffer which items it belongs to; keys: {list(batch.keys())}."
                )
            self.replay_buffer.update_priority(batch.get("index"), batch.get(self.priority_key).detach())

    def state_dict(self) -> dict[str, Any]:
        if callable(getattr(self.replay_buffer, "state_dict", None)):
            return {"replay_buffer": self.replay_buffer.state_dict()}
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if callable(getattr(self.replay_buffer, "load_state_dict", None)):
            if not isinstance(state_dict, Mapping) or "replay_buffer" not in state_dict:
                raise KeyError(
                    f"ReplayBufferTrainer.load_state_dict: expected a mapping with 'replay_buffer', got {state_dict!r}."
                )
            self.replay_buffer.load_state_dict(state_dict["replay_buffer"])
            self._iterator = None
        else:
            super().load_state_dict(state_dict)

    # A buffer that can write itself whole (rl_replay's dumps/loads: items, sampler, writer, generator)
    # is saved whole in the trainer's checkpoint: the Trainer calls these when they are not None.
    @property
    def dumps(self) -> Callable[[Any], None] | None:
        """``dumps(path)`` of the buffer when it has ``dumps`` and ``loads``, else ``None``."""
        return self._dump if self._can_dump() else None

    @property
    def loads(self) -> Callable[[Any], None] | None:
        """``loads(path)`` of the buffer when it has ``dumps`` and ``loads``, else ``None``."""
        return self._load if self._can_dump() else None

    def _can_dump(self) -> bool:
        return callable(getattr(self.replay_buffer, "dumps", None)) and callable(
            getattr(self.replay_buffer, "loads", None)
        )

    def _dump(self, path: Any) -> None:
        self.replay_buffer.dumps(path)

    def _load(self, path: Any) -> None:
        self.replay_buffer.loads(path)
        self._iterator = None

    def register(self, trainer: Any, name: str = "replay_buffer") -> None:
        trainer.register_op("batch_process", self.extend)
        trainer.register_op("process_optim_batch", self.sample)
        trainer.register_op("post_loss", self.update_priority)
        trainer.register_module(name, self)


class BatchSubSampler(TrainerHookBase):
    """Samples ``batch_size`` steps from a collected batch, as ``batch_size // sub_traj_len`` windows
    of ``sub_traj_len`` consecutive steps.

    On a ``[*B, T]`` batch (time last) the leading dims are flattened into trajectories; each window
    picks a trajectory uniformly (with replacement) and a start uniformly among the ``T -
    sub_traj_len + 1`` valid ones. The result has batch shape ``[batch_size // sub_traj_len,
    sub_traj_len]``. ``sub_traj_len=0`` takes whole trajectories. A batch with a single batch dim
    (already flat steps) is sub-sampled without replacement to ``batch_size`` steps.

    Registered at ``"process_optim_batch"``.

    Args:
        batch_size: number of steps per sample.
        sub_traj_len: length of each window; 0: the whole time dim.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import BatchSubSampler
        >>> batch = TensorDict(t=torch.arange(10).expand(4, 10), batch_size=[4, 10])
        >>> sub = BatchSubSampler(batch_size=12, sub_traj_len=3)(batch)
        >>> sub.batch_size
        torch.Size([4, 3])
        >>> bool((sub["t"].diff(dim=-1) == 1).all())  # consecutive steps
        True
    """

    def __init__(self, batch_size: int, sub_traj_len: int = 0) -> None:
        self.batch_size = check_positive_int("BatchSubSampler", "batch_size", batch_size)
        check_non_negative_int("BatchSubSampler", "sub_traj_len", sub_traj_len)
        if sub_traj_len > batch_size:
            raise ValueError(
                f"BatchSubSampler: sub_traj_len={sub_traj_len} exceeds batch_size={batch_size}; no window would fit."
            )
        self.sub_traj_len = sub_traj_len

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        batch = _check_td("BatchSubSampler", batch)
        if batch.ndim == 0:
            raise ValueError("BatchSubSampler: the batch has no batch dims; expected [*B, T] or [N].")
        device = batch.device
        if batch.ndim == 1:
            if self.sub_traj_len not in (0, 1):
                raise ValueError(
                    f"BatchSubSampler: sub_traj_len={self.sub_traj_len} needs a time dim, but the batch has shape {tuple(batch.batch_size)}."
                )
            n = batch.batch_size[0]
            if self.batch_size > n:
                raise ValueError(f"BatchSubSampler: batch_size={self.batch_size} exceeds the {n} steps of the batch.")
            return batch[torch.randperm(n, device=device)[: self.batch_size]]
        steps = batch.batch_size[-1]
        sub_len = self.sub_traj_len or steps
        if sub_len > steps:
            raise ValueError(
                f"BatchSubSampler: sub_traj_len={sub_len} exceeds the batch's time dim {steps} (batch shape {tuple(batch.batch_size)})."
            )
        n_windows = self.batch_size // sub_len
        if n_windows == 0:
            raise ValueError(
                f"BatchSubSampler: batch_size={self.batch_size} is smaller than the window length {sub_len}."
            )
        names = batch.names
        flat = batch.reshape(-1, steps) if batch.ndim > 2 else batch
        traj = torch.randint(flat.batch_size[0], (n_windows, 1), device=device)
        start = torch.randint(steps - sub_len + 1, (n_windows, 1), device=device)
        out = flat[traj, start + torch.arange(sub_len, device=device)]
        if names[-1] is not None:
            out.names = [None, names[-1]]
        return out

    def register(self, trainer: Any, name: str | None = None) -> None:
        trainer.register_op("process_optim_batch", self)


class RewardNormalizer(TrainerHookBase):
    """Normalises the reward of training samples with running (exponentially decayed) statistics.

    ``update_reward_stats`` (at ``"batch_process"``) folds every collected batch's rewards into
    decayed sums: ``S = decay * S + sum(r)``, ``Q = decay * Q + sum(r^2)``, ``N = decay * N + numel(r)``;
    mean ``S / N``, variance ``(Q - S^2 / N) / (N - 1)`` (0 while ``N <= 1``), std ``sqrt(max(var,
    eps))``. ``normalize_reward`` (at ``"process_optim_batch"``, so register it after a replay buffer to
    normalise the sample) returns a shallow copy of its input whose reward is ``scale * (r - mean) /
    std``; the input (and the buffer's data) are left alone.

    Args:
        decay: weight kept by the past statistics per update, in ``(0, 1]``.
        scale: factor applied after normalisation.
        eps: lower bound of the variance.
        log_pbar: kept for TorchRL compatibility (the hook logs nothing).
        reward_key: where the reward is; default ``("next", "reward")``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import RewardNormalizer
        >>> norm = RewardNormalizer(decay=1.0)
        >>> td = TensorDict({"next": {"reward": torch.tensor([1.0, 2.0, 3.0])}}, batch_size=[3])
        >>> norm.update_reward_stats(td)
        >>> norm.normalize_reward(td)["next", "reward"]
        tensor([-1.,  0.,  1.])
        >>> td["next", "reward"]
        tensor([1., 2., 3.])
    """

    def __init__(
        self,
        decay: float = 0.999,
        scale: float = 1.0,
        eps: float = 1e-4,
        log_pbar: bool = False,
        reward_key: Any = None,
    ) -> None:
        if not 0.0 < float(decay) <= 1.0:
            raise ValueError(f"RewardNormalizer: decay must be in (0, 1], got {decay!r}.")
        if not float(eps) > 0.0:
            raise ValueError(f"RewardNormalizer: eps must be > 0, got {eps!r}.")
        self.decay = float(decay)
        self.scale = float(scale)
        self.eps = float(eps)
        self.log_pbar = log_pbar
        self.reward_key = unravel_key(("next", "reward") if reward_key is None else reward_key)
        # float64 accumulators: sums over many batches lose precision in float32
        self._sum = torch.zeros((), dtype=torch.float64)
        self._ssq = torch.zeros((), dtype=torch.float64)
        self._count = torch.zeros((), dtype=torch.float64)
        self._updated = False

    @property
    def mean(self) -> torch.Tensor:
        """The running mean of the rewards."""
        return self._sum / self._count

    @property
    def std(self) -> torch.Tensor:
        """The running standard deviation (``sqrt(max(var, eps))``)."""
        if self._count > 1:
            var = (self._ssq - self._sum.pow(2) / self._count) / (self._count - 1)
        else:
            var = torch.zeros((), dtype=torch.float64)
        return var.clamp_min(self.eps).sqrt()

    def _reward(self, owner: str, batch: Any) -> torch.Tensor:
        batch = _check_td(owner, batch)
        if self.reward_key not in batch.keys(include_nested=True):
            raise KeyError(f"{owner}: no reward at {self.reward_key!r}; keys: {list(batch.keys(include_nested=True))}.")
        return batch.get(self.reward_key)

    @torch.no_grad()
    def update_reward_stats(self, batch: TensorDictBase) -> None:
        """Folds the rewards of ``batch`` into the running statistics."""
        reward = self._reward("RewardNormalizer.update_reward_stats", batch).detach().to("cpu", torch.float64)
        self._sum = self.decay * self._sum + reward.sum()
        self._ssq = self.decay * self._ssq + reward.pow(2).sum()
        self._count = self.decay * self._count + reward.numel()
        self._updated = True

    def normalize_reward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """A shallow copy of ``tensordict`` whose reward is normalised."""
        reward = self._reward("RewardNormalizer.normalize_reward", tensordict)
        if not self._updated:
            raise RuntimeError(
                "RewardNormalizer.normalize_reward: no statistics yet; call update_reward_stats on collected data first."
            )
        mean = self.mean.to(reward.device, reward.dtype)
        std = self.std.to(reward.device, reward.dtype)
        out = tensordict.copy()
        out.set(self.reward_key, (reward - mean) / std * self.scale)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "sum": self._sum.clone(),
            "ssq": self._ssq.clone(),
            "count": self._count.clone(),
            "updated": self._updated,
            "decay": self.decay,
            "scale": self.scale,
            "eps": self.eps,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        names = ("sum", "ssq", "count", "updated", "decay", "scale", "eps")
        if not isinstance(state_dict, Mapping) or any(n not in state_dict for n in names):
            got = sorted(state_dict) if isinstance(state_dict, Mapping) else type(state_dict).__name__
            raise KeyError(f"RewardNormalizer.load_state_dict: expected keys {list(names)}, got {got}.")
        stats = {n: torch.as_tensor(state_dict[n], dtype=torch.float64).reshape(()) for n in ("sum", "ssq", "count")}
        self._sum, self._ssq, self._count = stats["sum"], stats["ssq"], stats["count"]
        self._updated = bool(state_dict["updated"])
        self.decay, self.scale, self.eps = (
            float(state_dict["decay"]),
            float(state_dict["scale"]),
            float(state_dict["eps"]),
        )

    def register(self, trainer: Any, name: str = "reward_normalizer") -> None:
        trainer.register_op("batch_process", self.update_reward_stats)
        trainer.register_op("process_optim_batch", self.normalize_reward)
        trainer.register_module(name, self)


class SelectKeys(TrainerHookBase):
    """Keeps only ``keys`` of every collected batch (registered at ``"batch_process"``).

    Args:
        keys: the keys to keep (strings or tuples of strings for nested keys).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import SelectKeys
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> list(SelectKeys(["a"])(td).keys())
        ['a']
    """

    def __init__(self, keys: Sequence[Any]) -> None:
        if isinstance(keys, (str, tuple)) or not isinstance(keys, Sequence) or not keys:
            raise ValueError(f"SelectKeys: keys must be a non-empty list of keys, got {keys!r}.")
        self.keys = [unravel_key(k) for k in keys]

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        batch = _check_td("SelectKeys", batch)
        present = batch.keys(include_nested=True)
        missing = [k for k in self.keys if k not in present]
        if missing:
            raise KeyError(f"SelectKeys: keys {missing} are not in the batch; keys: {list(present)}.")
        return batch.select(*self.keys)

    def register(self, trainer: Any, name: str | None = None) -> None:
        trainer.register_op("batch_process", self)
