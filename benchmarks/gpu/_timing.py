"""Timing and memory probes shared by the GPU benchmarks (``bench_*.py`` beside this file).

On CUDA: CUDA events around each call, after a warm-up, median in milliseconds; peak memory is the
high-water mark above what was allocated before the call. On CPU (the dry run): ``perf_counter``,
and no memory figure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def median_ms(fn: Callable[[], object], cuda: bool, warmup: int, repeats: int) -> float:
    """Median time of one ``fn()`` call in milliseconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    if cuda:
        torch.cuda.synchronize()
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_mb(fn: Callable[[], object], cuda: bool) -> float | None:
    """Peak CUDA memory allocated while ``fn()`` runs, above what was allocated before (MiB); ``None`` on CPU."""
    if not cuda:
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20
