"""The runnable examples in rl_collect's docstrings stay runnable."""
import doctest
import importlib
import pkgutil

import pytest

import rl_collect


def _modules():
    for info in pkgutil.walk_packages(rl_collect.__path__, "rl_collect."):
        yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as err:  # an optional third-party library (ray...) is missing
        pytest.skip(f"{name}: {err}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert not result.failed, f"{name}: {result.failed} of {result.attempted} examples failed"
