"""The runnable examples in the docstrings of rl_envs, rl_replay, rl_collect, rl_objectives, rl_llm and rl_kernels
stay runnable (tdict's are checked, with a count, in tests/tdict/test_doctests.py)."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("rl_envs", "rl_replay", "rl_collect", "rl_objectives", "rl_llm", "rl_kernels")
# modules that import an optional library only inside their functions, whose examples need it
EXAMPLES_NEED = {"rl_envs.libs.atari": "ale_py", "rl_envs.libs.brax": "brax"}


def _modules():
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as err:  # an optional third-party library (gymnasium, h5py, ray...) is missing
        pytest.skip(f"{name}: {err}")
    if name in EXAMPLES_NEED:
        pytest.importorskip(EXAMPLES_NEED[name], reason=f"{name}'s examples need {EXAMPLES_NEED[name]}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert not result.failed, f"{name}: {result.failed} of {result.attempted} examples failed"
