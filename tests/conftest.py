"""Repository-wide pytest configuration: determinism, marker policy and Hypothesis profiles."""

from __future__ import annotations

import os
import random

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ModuleNotFoundError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


# Without a GPU, rl-kernels' Triton kernels run in Triton's CPU interpreter. triton.jit reads
# TRITON_INTERPRET when a kernel is defined, and collection already imports every module (the
# docstring checks in tests/integration), so it is set here, before any test module is imported.
if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:  # Hypothesis is a dev dependency; keep collection working without it.
    from hypothesis import HealthCheck, settings
except ModuleNotFoundError:  # pragma: no cover
    settings = None

if settings is not None:
    # "ci" (default) is derandomized: the same examples on every run and every machine, no
    # deadline flakiness on a loaded 2-core box. "dev" explores with fresh random examples.
    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run tests marked `slow` (long learning runs); they are skipped by default",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--run-slow") or os.environ.get("RUN_SLOW") == "1"
    skip_slow = pytest.mark.skip(reason="slow test: pass --run-slow (or RUN_SLOW=1) to run it")
    has_cuda = None
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords:
            if has_cuda is None:
                import torch

                has_cuda = torch.cuda.is_available()
            if not has_cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
    # JAX (Brax's and MJX's tests and doctests) starts threads that a later os.fork() may copy in the
    # middle of holding a lock: run them after every test that forks (collectors, ParallelEnv, shared buffers)
    items.sort(key=lambda item: "brax" in item.nodeid or "mjx" in item.nodeid)


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    """Every test starts from the same RNG state, with torch's distribution argument checks on and
    subnormal floats kept (the recipes switch both off for speed), whatever ran before it."""
    random.seed(0)
    try:
        import numpy as np
    except ModuleNotFoundError:  # pragma: no cover
        pass
    else:
        np.random.seed(0)
    try:
        import torch
    except ModuleNotFoundError:  # pragma: no cover
        pass
    else:
        torch.manual_seed(0)
        torch.distributions.Distribution.set_default_validate_args(True)
        torch.set_flush_denormal(False)  # the recipes' start_run turns it on for the process
