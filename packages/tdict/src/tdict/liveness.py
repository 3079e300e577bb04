"""Worker liveness for the process pools of the sibling packages (rl-envs' ParallelEnv, rl-collect's
multi-process collectors): workers die with their parent, and prove with heartbeats that they
make progress.

A heartbeat thread in each worker samples the CPU time that the worker's other threads have used,
and writes a heartbeat only when it has grown (by ``_WORK`` seconds) since the last one: a
heartbeat means "this worker did work", not merely "this process is scheduled". What counts as
hung (the rule the parent applies while it waits for a reply):

- a worker whose process exits is detected at once (its process sentinel);
- a worker whose reply is due and that has sent no heartbeat for ``heartbeat_timeout`` seconds
  (counted from the later of its last heartbeat and the request) is hung: stopped (SIGSTOP, a
  debugger), sleeping, deadlocked or blocked on I/O inside its step. A slow step that computes
  keeps beating and is waited for however long it takes (a 60 s step is not a hang);
- a worker whose reply takes longer than ``worker_timeout`` (when one is set) is hung too, busy
  or not (catches a step that spins forever).

A step that legitimately waits for minutes without using CPU (a remote simulator, a human) needs
``heartbeat_timeout=None`` (or a larger value).

Workers die with their parent: on Linux the kernel kills them (``PR_SET_PDEATHSIG``) the moment
the thread that started them ends, and the heartbeat thread (everywhere) ends the worker within
one heartbeat interval once the parent process is gone, even mid-step.

Example (the parent's side; a worker calls ``die_with_parent`` and ``start_heartbeat(board.beats, i, ...)``):
    >>> import time
    >>> board = HeartbeatBoard(2, interval=1.0, timeout=20.0)  # board.beats goes to the workers
    >>> board.asked(0)  # a request was sent to worker 0
    >>> board.hung([0, 1])
    []
    >>> round(board.next_check([0]) - time.monotonic())  # when to look again if nothing comes
    20
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable

import torch

__all__ = ["HeartbeatBoard", "check_heartbeat_args", "die_with_parent", "start_heartbeat"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# CPU seconds of work that earn a heartbeat: far above the clocks' noise (the two reads below are not
# simultaneous), far below what any computing step uses in one heartbeat interval.
_WORK = 1e-3


def die_with_parent(parent_pid: int, kernel_signal: bool) -> None:
    """In a worker: asks the kernel to SIGKILL this process when its parent thread ends (Linux, when
    ``kernel_signal``: the parent started it from its main thread), then exits if the parent is already gone."""
    if kernel_signal and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the watchdog thread still covers it
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _work_done() -> float:
    """CPU seconds used by every thread of this process but the calling one."""
    return time.process_time() - time.thread_time()


def start_heartbeat(beats: torch.Tensor | None, index: int, interval: float, parent_pid: int) -> None:
    """In a worker: a daemon thread that, every ``interval`` seconds, ends the process if the parent
    process is gone (nobody would read its results), and writes the time into ``beats[index]`` if
    the worker did work since the last heartbeat (``beats=None``: it only watches the parent)."""

    def beat() -> None:
        last = _work_done()
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            if beats is not None:
                work = _work_done()
                if work - last >= _WORK:
                    beats[index] = time.monotonic()
                    last = work
            time.sleep(interval)

    if beats is not None:
        beats[index] = time.monotonic()
    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


class HeartbeatBoard:
    """The parent's side: one shared slot per worker holding the time of its last heartbeat.

    ``time.monotonic`` reads the system-wide monotonic clock, so parent and workers compare the same clock.
    """

    def __init__(self, n: int, interval: float, timeout: float | None) -> None:
        self.interval = interval
        self.timeout = timeout
        self.beats = torch.full((n,), time.monotonic(), dtype=torch.float64).share_memory_()
        self._asked = [time.monotonic()] * n

    def asked(self, index: int) -> None:
        """A reply of worker ``index`` is now due (it was just started or sent a request): an idle
        worker sends no heartbeats, so its silence counts from now at the earliest."""
        self._asked[index] = time.monotonic()

    def _quiet_since(self, index: int) -> float:
        return max(float(self.beats[index]), self._asked[index])

    def next_check(self, indices: Iterable[int]) -> float | None:
        """When the first of ``indices`` would be hung if it sent no more heartbeats (``None``: never)."""
        if self.timeout is None:
            return None
        return min(self._quiet_since(i) for i in indices) + self.timeout

    def hung(self, indices: Iterable[int]) -> list:
        """The workers of ``indices`` without a heartbeat for ``timeout`` seconds since their reply was due."""
        if self.timeout is None:
            return []
        now = time.monotonic()
        return [i for i in indices if now - self._quiet_since(i) >= self.timeout]


def check_heartbeat_args(owner: str, interval: float, timeout: float | None) -> None:
    """Argument checks of ``heartbeat_interval`` and ``heartbeat_timeout``."""
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        raise ValueError(f"{owner}: heartbeat_interval must be a number of seconds > 0, got {interval!r}.")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > interval
    ):
        raise ValueError(
            f"{owner}: heartbeat_timeout must be None or a number of seconds > heartbeat_interval={interval}, got {timeout!r}."
        )
