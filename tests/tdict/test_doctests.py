"""The runnable examples in tdict's docstrings stay runnable."""

import doctest
import importlib
import pkgutil

import tdict


def test_docstring_examples_run():
    attempted, failures = 0, []
    for info in pkgutil.walk_packages(tdict.__path__, "tdict."):  # sub-packages (nn, specs) too
        module = importlib.import_module(info.name)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        attempted += result.attempted
        if result.failed:
            failures.append(f"{info.name}: {result.failed} of {result.attempted}")
    assert not failures, failures
    assert attempted >= 100, f"only {attempted} docstring examples found"  # the public classes carry examples
