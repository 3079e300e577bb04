"""BaseCollector: what every collector shares (hooks, progress stats, background collection into a
replay buffer, remote-style helpers), TorchRL's ``BaseCollector``."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

from .profiling import ProfileConfig, ProfilerHook

__all__ = ["BaseCollector"]


def resolve_attr(obj: Any, path: str) -> Any:
    """``obj.a.b`` for ``path="a.b"``."""
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def call_path(obj: Any, path: str, args: Sequence[Any] = (), kwargs: dict | None = None) -> Any:
    """Calls the method at ``path`` (``"replay_buffer.__len__"``) of ``obj`` with ``args``/``kwargs``."""
    return resolve_attr(obj, path)(*args, **(kwargs or {}))


class _Runner:
    """A daemon thread that iterates a collector (which writes into its replay buffer) until told to
    stop; it can be paused between batches. An exception in the thread is kept and re-raised by
    :meth:`check` (every public call of :meth:`BaseCollector.pause`/``async_shutdown`` checks)."""

    def __init__(self, collector: Any) -> None:
        self.stop = threading.Event()
        self.resume = threading.Event()
        self.resume.set()
        self.idle = threading.Event()  # set while paused between batches (or once finished)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(collector,), name="rl_collect-runner", daemon=True)
        self.thread.start()

    def _run(self, collector: Any) -> None:
        try:
            while not self.stop.is_set():
                for _ in collector:
                    if not self.resume.is_set():
                        self.idle.set()
                        self.resume.wait()
                        self.idle.clear()
                    if self.stop.is_set():
                        return
                # an iteration also ends when a call made while paused dropped the batches in flight
                # (async collectors): collection goes on until the frame budget is spent
                if 0 <= collector.total_frames <= collector.frames:
                    return
        except BaseException as exc:  # surfaced in the caller's thread by check()
            self.error = exc
        finally:
            self.idle.set()

    def check(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError("rl_collect: background collection (start()) failed") from error

    def join(self, timeout: float | None) -> None:
        self.stop.set()
        self.resume.set()
        self.thread.join(timeout)


class BaseCollector:
    """The part every collector shares (TorchRL's ``BaseCollector``).

    * ``pre_collect_hook()`` runs before each batch is collected and ``post_collect_hook(batch)``
      after (with the batch as yielded); multi-process collectors run them in their workers.
    * :meth:`stats` is a JSON-serialisable snapshot of the progress counters.
    * :meth:`start` collects in a background thread into the ``replay_buffer`` until
      :meth:`async_shutdown`; :meth:`pause` holds it between two batches.
    * :meth:`map_fn` / :meth:`get_distant_attr` call a method / read an attribute (dotted paths)
      on the collector, or on every worker's collector for multi-process ones.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> from rl_collect import Collector
        >>> seen = []
        >>> collector = Collector(PendulumEnv, frames_per_batch=8, total_frames=16, post_collect_hook=seen.append)
        >>> _ = list(collector)
        >>> len(seen), collector.stats()["frames"], collector.stats()["completed"]
        (2, 16, True)
        >>> collector.shutdown()
    """

    profile_config: ProfileConfig | None = None
    _pre_collect_hook: Callable[[], Any] | None = None
    _post_collect_hook: Callable[[Any], Any] | None = None
    _runner: _Runner | None = None
    _frames: int = 0
    _iter: int = 0
    frames_per_batch: int
    total_frames: int

    # ------------------------------------------------------------------ hooks
    @property
    def pre_collect_hook(self) -> Callable[[], Any] | None:
        """Called with no argument before each batch is collected (``None``: none)."""
        return self._pre_collect_hook

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook: Callable[[], Any] | None) -> None:
        self._set_hook("pre_collect_hook", hook)

    @property
    def post_collect_hook(self) -> Callable[[Any], Any] | None:
        """Called with each batch after it is collected and post-processed (``None``: none)."""
        return self._post_collect_hook

    @post_collect_hook.setter
    def post_collect_hook(self, hook: Callable[[Any], Any] | None) -> None:
        self._set_hook("post_collect_hook", hook)

    def _set_hook(self, name: str, hook: Any) -> None:
        if hook is not None and not callable(hook):
            raise TypeError(f"{type(self).__name__}: {name} must be callable or None, got {type(hook).__name__}.")
        setattr(self, f"_{name}", hook)

    # ------------------------------------------------------------------ profiling
    def enable_profile(
        self,
        *,
        workers: Sequence[int] | None = None,
        num_rollouts: int = 3,
        warmup_rollouts: int = 1,
        save_path: Any = None,
        activities: Sequence[str] | None = None,
        **options: Any,
    ) -> ProfileConfig:
        """Profiles batches ``warmup_rollouts + 1`` to ``num_rollouts`` with ``torch.profiler`` and writes a
        Chrome trace (see :class:`~rl_collect.ProfileConfig`; ``workers`` only matters for multi-process
        collectors). Returns the config (also :attr:`profile_config`).

        Raises:
            RuntimeError: called once collection has started.
        """
        if self._frames > 0 or self._iter > 0:
            raise RuntimeError(f"{type(self).__name__}: Cannot enable profiling after iteration has started.")
        config = ProfileConfig(
            workers=list(workers) if workers is not None else [0],
            num_rollouts=num_rollouts,
            warmup_rollouts=warmup_rollouts,
            save_path=save_path,
            activities=list(activities) if activities is not None else ["cpu", "cuda"],
            **options,
        )
        self._install_profiler(config)
        self.profile_config = config
        return config

    def disable_profile(self) -> None:
        """Stops profiling (writing what was recorded) and puts the previous post-collect hook back."""
        if self.profile_config is not None:
            self._uninstall_profiler()
        self.profile_config = None

    def _install_profiler(self, config: ProfileConfig) -> None:
        prior = self._post_collect_hook
        self._post_collect_hook = ProfilerHook(config, getattr(self, "worker_idx", None) or 0, inner=prior)

    def _uninstall_profiler(self) -> None:
        hook = self._post_collect_hook
        if isinstance(hook, ProfilerHook):
            hook.stop()
            self._post_collect_hook = hook.inner

    # ------------------------------------------------------------------ progress
    @property
    def requested_frames_per_batch(self) -> int:
        """The frames asked for per batch."""
        return self.frames_per_batch

    def stats(self) -> dict[str, Any]:
        """Progress counters as plain numbers: ``frames``, ``batches``, ``total_frames`` and
        ``completed`` (when the collector has a frame budget), ``requested_frames_per_batch`` and
        ``policy_version`` (when versions are tracked)."""
        stats: dict[str, Any] = {"frames": int(self._frames), "batches": int(self._iter)}
        if self.total_frames >= 0:
            stats["total_frames"] = int(self.total_frames)
            stats["completed"] = bool(self._frames >= self.total_frames)
        stats["requested_frames_per_batch"] = int(self.requested_frames_per_batch)
        version = getattr(self, "_tracked_version", lambda: None)()
        if version is not None:
            stats["policy_version"] = int(version)
        return stats

    # ------------------------------------------------------------------ iteration helpers
    def next(self) -> Any:
        """The next batch (a fresh iterator's first batch when none is running)."""
        iterator = getattr(self, "_next_iter", None)
        if iterator is None:
            iterator = self._next_iter = iter(self)
        try:
            return next(iterator)
        except StopIteration:
            self._next_iter = None
            return None

    def __iter__(self) -> Iterator[Any]:  # pragma: no cover - every collector defines it
        raise NotImplementedError

    def iterator(self) -> Iterator[Any]:
        """The batches (``iter(collector)``)."""
        return iter(self)

    def __len__(self) -> int:
        """How many batches iteration yields: ``ceil(total_frames / frames_per_batch)``.

        Raises:
            TypeError: the collector is endless (``total_frames=-1``); a ``TypeError``, as for any object
                without a length, so that ``list(collector)`` does not fail on its size hint.
        """
        if self.total_frames < 0:
            raise TypeError(f"{type(self).__name__}: an endless collector (total_frames=-1) has no length.")
        return -(-self.total_frames // self.frames_per_batch)

    def __bool__(self) -> bool:
        return True  # a collector is an object, never empty (``__len__`` would decide otherwise)

    # ------------------------------------------------------------------ background collection
    def start(self) -> None:
        """Collects in a background thread, writing every batch into the replay buffer, until
        :meth:`async_shutdown` (or ``total_frames``).

        Raises:
            RuntimeError: the collector has no replay buffer, or is already running.
        """
        if getattr(self, "replay_buffer", None) is None:
            raise RuntimeError(f"{type(self).__name__}.start: a replay_buffer is needed to collect in the background.")
        if self._runner is not None and self._runner.thread.is_alive():
            raise RuntimeError(f"{type(self).__name__}.start: already running.")
        self._runner = _Runner(self)

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Holds background collection (:meth:`start`) after the batch in progress, until the block exits.

        Raises:
            RuntimeError: the collector is not collecting in the background.
        """
        runner = self._runner
        if runner is None or not runner.thread.is_alive():
            if runner is not None:
                runner.check()
            raise RuntimeError(f"{type(self).__name__}.pause: the collector is not running (call start() first).")
        runner.resume.clear()
        try:
            while not runner.idle.wait(0.05):
                if not runner.thread.is_alive():
                    break
            runner.check()
            yield None
        finally:
            runner.resume.set()

    def async_shutdown(self, timeout: float | None = None) -> None:
        """Stops background collection (waits up to ``timeout`` seconds for the batch in progress),
        then shuts the collector down; an error raised in the background is re-raised here."""
        runner, self._runner = self._runner, None
        try:
            if runner is not None:
                runner.join(timeout)
        finally:
            self.shutdown()
        if runner is not None:
            runner.check()

    def shutdown(self) -> None:  # pragma: no cover - every collector overrides it
        """Stops the collector and releases its envs and workers (each collector implements it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ remote-style helpers
    def get_distant_attr(self, attr: str) -> Any:
        """The attribute at dotted path ``attr`` (``"env.batch_size"``)."""
        return resolve_attr(self, attr)

    def map_fn(
        self, fn: str, list_of_args: Sequence[Sequence[Any]] | None = None, list_of_kwargs: Sequence[dict] | None = None
    ) -> list[Any]:
        """Calls the method at dotted path ``fn`` once per entry of ``list_of_args`` /
        ``list_of_kwargs`` (one call with no argument when both are ``None``); returns the results.

        Raises:
            ValueError: ``list_of_args`` and ``list_of_kwargs`` differ in length.
        """
        calls = _calls(type(self).__name__, list_of_args, list_of_kwargs, None)
        return [call_path(self, fn, args, kwargs) for args, kwargs in calls]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._runner is not None:
            self.async_shutdown()
        else:
            self.shutdown()


def _calls(
    owner: str, list_of_args: Sequence[Sequence[Any]] | None, list_of_kwargs: Sequence[dict] | None, n: int | None
) -> list[tuple[tuple, dict]]:
    """``(args, kwargs)`` pairs; ``n`` (workers) fixes how many when given."""
    if list_of_args is not None and list_of_kwargs is not None and len(list_of_args) != len(list_of_kwargs):
        raise ValueError(
            f"{owner}.map_fn: list_of_args and list_of_kwargs must have the same length, got "
            f"{len(list_of_args)} and {len(list_of_kwargs)}."
        )
    count = len(list_of_args) if list_of_args is not None else len(list_of_kwargs) if list_of_kwargs is not None else n
    if n is not None and count != n:
        raise ValueError(f"{owner}.map_fn: Expected {n} argument entries (one per worker), got {count}.")
    count = 1 if count is None else count
    args = [tuple(a) for a in list_of_args] if list_of_args is not None else [()] * count
    kwargs = [dict(k) for k in list_of_kwargs] if list_of_kwargs is not None else [{}] * count
    return list(zip(args, kwargs))
