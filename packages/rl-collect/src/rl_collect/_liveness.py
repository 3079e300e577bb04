"""Worker liveness: collector workers die with their parent and prove with heartbeats that they live.

What counts as hung (the rule the multi-process collectors apply while they wait for a reply):

- a worker whose process exits is detected at once (its process sentinel);
- a worker that stops beating for ``heartbeat_timeout`` seconds is frozen: stopped (SIGSTOP, a
  debugger), or stuck in native code that holds the GIL. A heartbeat thread proves that the
  process is scheduled, not that its step progresses, so
- a worker that beats but whose reply takes longer than ``worker_timeout`` (when one is set) is
  hung too. Without ``worker_timeout`` a live step may take any time (a 60 s step is not a hang).

Workers die with their parent: on Linux the kernel kills them (``PR_SET_PDEATHSIG``) the moment
the thread that started them ends, and a watchdog thread (the heartbeat thread, everywhere) ends
the worker within one heartbeat interval once the parent process is gone, even mid-step.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

import torch

__all__ = ["HeartbeatBoard", "check_heartbeat_args", "die_with_parent", "start_heartbeat"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


def start_heartbeat(beats: torch.Tensor | None, index: int, interval: float, parent_pid: int) -> None:
    """In a worker: a daemon thread writes the time into ``beats[index]`` every ``interval`` seconds
    (``beats=None``: it only watches), and ends the process as soon as the parent process is gone
    (nobody would read its results)."""
    def beat() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            if beats is not None:
                beats[index] = time.monotonic()
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

    def started(self, index: int) -> None:
        """A worker was just started: it has ``timeout`` seconds to send its first heartbeat."""
        self.beats[index] = time.monotonic()

    def next_check(self, indices) -> float | None:
        """When the first of ``indices`` would be frozen if it sent no more heartbeats (``None``: never)."""
        if self.timeout is None:
            return None
        return float(self.beats[list(indices)].min()) + self.timeout

    def frozen(self, indices) -> list:
        """The workers of ``indices`` silent for ``timeout`` seconds or more."""
        if self.timeout is None:
            return []
        now = time.monotonic()
        return [i for i in indices if now - float(self.beats[i]) >= self.timeout]


def check_heartbeat_args(owner: str, interval: float, timeout: float | None) -> None:
    """The checks of the heartbeat arguments, shared by the collectors."""
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        raise ValueError(f"{owner}: heartbeat_interval must be a number of seconds > 0, got {interval!r}.")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > interval):
        raise ValueError(
            f"{owner}: heartbeat_timeout must be None or a number of seconds > heartbeat_interval={interval}, got {timeout!r}."
        )
