"""The scan's CPU path: a sequential C++ loop over time, built once per machine and called with ctypes.

The library is built with the system's C++ compiler (``$CXX``, else ``c++``) into a cache folder
(``$RL_KERNELS_CACHE``, else ``$XDG_CACHE_HOME/rl_kernels``, else ``~/.cache/rl_kernels``) under a
name that hashes the source, the flags and the compiler, so a process only builds it when no earlier
one did (a fraction of a second) and otherwise just loads it. A build is written under a temporary
name and renamed into place: concurrent processes never load a partial file. Without a compiler (or
when the build or its self-check fails) :func:`cpu_kernel` returns ``None`` and the caller uses the
doubling scan.

Why not torch.compile's C++ toolchain: it probes the CPU's vector instruction sets with subprocesses
in every new process (about a second, measured), which a short training run pays in full.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["cpu_kernel"]

_SOURCE = r"""
#include <cstdint>

template <typename S, bool FULL_COEF, bool HAS_DONE>
static void scan_rows(const S* x, const S* c, const bool* done, S* y, int64_t rows, int64_t steps) {
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r * steps;
        S acc = 0;
        for (int64_t t = steps - 1; t >= 0; --t) {
            if (HAS_DONE && done[o + t]) acc = 0;
            acc = x[o + t] + (FULL_COEF ? c[o + t] : c[0]) * acc;
            y[o + t] = acc;
        }
    }
}

template <typename S>
static void scan(const S* x, const S* c, const bool* done, S* y, int64_t rows, int64_t steps, int64_t full,
                 int64_t has_done) {
    if (full && has_done) scan_rows<S, true, true>(x, c, done, y, rows, steps);
    else if (full) scan_rows<S, true, false>(x, c, done, y, rows, steps);
    else if (has_done) scan_rows<S, false, true>(x, c, done, y, rows, steps);
    else scan_rows<S, false, false>(x, c, done, y, rows, steps);
}

extern "C" void scan_float(const float* x, const float* c, const bool* done, float* y, int64_t rows,
                           int64_t steps, int64_t full, int64_t has_done) {
    scan<float>(x, c, done, y, rows, steps, full, has_done);
}

extern "C" void scan_double(const double* x, const double* c, const bool* done, double* y, int64_t rows,
                            int64_t steps, int64_t full, int64_t has_done) {
    scan<double>(x, c, done, y, rows, steps, full, has_done);
}
"""
_FLAGS = ["-O3", "-shared", "-fPIC", "-std=c++17"]
_SYMBOLS = {torch.float32: "scan_float", torch.float64: "scan_double"}

# (x [R, T], coef [R, T] or [1], done [R, T] bool or None), contiguous, one dtype -> y [R, T]
RawScan = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def _cache_dir() -> Path:
    if os.environ.get("RL_KERNELS_CACHE"):
        return Path(os.environ["RL_KERNELS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rl_kernels"


def _build() -> Path | None:
    """The compiled library (built now if the cache does not hold it), or ``None`` without a compiler."""
    compiler = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        return None
    key = hashlib.sha256("\0".join([_SOURCE, *_FLAGS, compiler]).encode()).hexdigest()[:16]
    folder = _cache_dir()
    target = folder / f"reverse_scan_{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        source, built = Path(tmp) / "reverse_scan.cpp", Path(tmp) / "reverse_scan.so"
        source.write_text(_SOURCE)
        subprocess.run([compiler, *_FLAGS, str(source), "-o", str(built)], check=True, capture_output=True, timeout=120)
        os.replace(built, target)  # atomic: a reader sees the whole library or none
    return target


@functools.cache
def _symbol(dtype: torch.dtype) -> Callable[..., None] | None:
    """The C function for ``dtype`` (float32/float64), checked on a two-step example; ``None`` if unavailable."""
    try:
        path = _build()
        if path is None:
            return None
        fn = getattr(ctypes.CDLL(str(path)), _SYMBOLS[dtype])
    except (OSError, subprocess.SubprocessError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4
    fn.restype = None
    x, coef = torch.ones(1, 2, dtype=dtype), torch.full((1,), 0.5, dtype=dtype)
    y = torch.empty_like(x)
    fn(x.data_ptr(), coef.data_ptr(), None, y.data_ptr(), 1, 2, 0, 0)
    return fn if y.tolist() == [[1.5, 1.0]] else None


def cpu_kernel(dtype: torch.dtype) -> RawScan | None:
    """The scan over contiguous ``[R, T]`` CPU rows of ``dtype`` (float32/float64) by the C++ loop, or
    ``None`` when it cannot be built here.

    Examples:
        >>> import torch
        >>> raw = cpu_kernel(torch.float32)
        >>> raw is None or raw(torch.ones(1, 3), torch.tensor([0.5]), None).tolist() == [[1.75, 1.5, 1.0]]
        True
    """
    fn = _symbol(dtype) if dtype in _SYMBOLS else None
    if fn is None:
        return None

    def raw(x: torch.Tensor, coef: torch.Tensor, done: torch.Tensor | None) -> torch.Tensor:
        rows, steps = x.shape
        y = torch.empty_like(x)
        done_ptr = None if done is None else done.data_ptr()
        fn(
            x.data_ptr(),
            coef.data_ptr(),
            done_ptr,
            y.data_ptr(),
            rows,
            steps,
            int(coef.numel() > 1),
            int(done is not None),
        )
        return y

    return raw
