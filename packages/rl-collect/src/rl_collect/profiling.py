"""ProfileConfig and ProfilerHook: ``torch.profiler`` traces of a collector's batches (TorchRL's ``enable_profile``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["ProfileConfig", "ProfilerHook"]


@dataclasses.dataclass
class ProfileConfig:
    """What to profile: which workers, how many batches (``num_rollouts``, the first
    ``warmup_rollouts`` of them left out of the trace) and where the Chrome trace goes.

    Args:
        workers: the worker indices to profile (multi-process collectors; a single collector is worker 0).
        num_rollouts: batches covered, warm-up included; then profiling stops and the trace is written.
        warmup_rollouts: batches collected before the profiler starts.
        save_path: the trace file; ``{worker_idx}`` is replaced by the worker's index. Default
            ``./collector_profile_{worker_idx}.json``.
        activities: ``"cpu"`` and/or ``"cuda"`` (CUDA only where available).
        record_shapes, profile_memory, with_stack, with_flops: passed to ``torch.profiler.profile``.
        on_trace_ready: called with the profiler instead of writing the trace file.

    Raises:
        ValueError: ``num_rollouts <= warmup_rollouts`` or ``warmup_rollouts < 0``.

    Examples:
        >>> config = ProfileConfig(workers=[0, 2], num_rollouts=4, warmup_rollouts=1, save_path="t_{worker_idx}.json")
        >>> config.should_profile_worker(2), str(config.get_save_path(2))
        (True, 't_2.json')
    """

    workers: list[int] = dataclasses.field(default_factory=lambda: [0])
    num_rollouts: int = 3
    warmup_rollouts: int = 1
    save_path: str | Path | None = None
    activities: list[str] = dataclasses.field(default_factory=lambda: ["cpu", "cuda"])
    record_shapes: bool = True
    profile_memory: bool = False
    with_stack: bool = True
    with_flops: bool = False
    on_trace_ready: Callable | None = None

    def __post_init__(self) -> None:
        if self.num_rollouts <= self.warmup_rollouts:
            raise ValueError(
                f"ProfileConfig: num_rollouts ({self.num_rollouts}) must be greater than warmup_rollouts "
                f"({self.warmup_rollouts})."
            )
        if self.warmup_rollouts < 0:
            raise ValueError(f"ProfileConfig: warmup_rollouts must be >= 0, got {self.warmup_rollouts}.")

    def get_save_path(self, worker_idx: int) -> Path:
        """Where worker ``worker_idx``'s trace is written."""
        if self.save_path is None:
            return Path(f"./collector_profile_{worker_idx}.json")
        return Path(str(self.save_path).format(worker_idx=worker_idx))

    def get_activities(self) -> list:
        """The ``torch.profiler.ProfilerActivity`` values asked for (CUDA only when available)."""
        found = []
        for name in self.activities:
            name = name.lower()
            if name == "cpu":
                found.append(torch.profiler.ProfilerActivity.CPU)
            elif name == "cuda" and torch.cuda.is_available():
                found.append(torch.profiler.ProfilerActivity.CUDA)
        return found

    def should_profile_worker(self, worker_idx: int) -> bool:
        """Whether worker ``worker_idx`` is profiled."""
        return worker_idx in self.workers


class ProfilerHook:
    """A post-collect hook that profiles batches: after ``warmup_rollouts`` batches it starts a
    ``torch.profiler.profile``, and once ``num_rollouts`` batches have passed it stops it and writes
    the trace (or calls ``on_trace_ready``). Picklable before it starts (it travels to workers).

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "trace_{worker_idx}.json")
        >>> hook = ProfilerHook(ProfileConfig(num_rollouts=2, warmup_rollouts=1, save_path=path, activities=["cpu"]))
        >>> for _ in range(3):
        ...     hook(None)
        >>> os.path.exists(path.format(worker_idx=0)), hook.done
        (True, True)
    """

    def __init__(self, config: ProfileConfig, worker_idx: int = 0, inner: Callable[[Any], Any] | None = None) -> None:
        self.config = config
        self.worker_idx = worker_idx
        self.inner = inner  # the hook this one stands in front of (still called with every batch)
        self.seen = 0
        self.done = False
        self._profiler: Any = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_profiler"] = None  # a running profiler stays in its process
        return state

    def __call__(self, batch: Any) -> None:
        if self.inner is not None:
            self.inner(batch)
        if self.done:
            return
        self.seen += 1
        config = self.config
        if self._profiler is None and self.seen >= config.warmup_rollouts:
            if self.seen >= config.num_rollouts:  # nothing left to profile
                self.done = True
                return
            self._profiler = torch.profiler.profile(
                activities=config.get_activities(),
                record_shapes=config.record_shapes,
                profile_memory=config.profile_memory,
                with_stack=config.with_stack,
                with_flops=config.with_flops,
            )
            self._profiler.__enter__()
        elif self._profiler is not None and self.seen >= config.num_rollouts:
            self.stop()

    def stop(self) -> None:
        """Stops profiling now and writes what was recorded (nothing when it had not started)."""
        profiler, self._profiler = self._profiler, None
        self.done = True
        if profiler is None:
            return
        profiler.__exit__(None, None, None)
        if self.config.on_trace_ready is not None:
            self.config.on_trace_ready(profiler)
            return
        path = self.config.get_save_path(self.worker_idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(path))
