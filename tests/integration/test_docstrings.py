"""Every public name is documented: each class and function in a public module's ``__all__`` has a
docstring, and so has each public method and property of those classes (a docstring inherited from
the overridden base method counts). The API reference (docs/api, built by mkdocstrings) shows them.

Public modules are those whose dotted path has no part starting with ``_``.
``python tests/integration/test_docstrings.py`` prints the names that lack a docstring.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

PACKAGES = ["tdict", "rl_envs", "rl_collect", "rl_replay", "rl_objectives", "rl_llm", "rl_kernels"]


def _public_modules(package: str) -> list:
    root = importlib.import_module(package)
    modules = [root]
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            modules.append(importlib.import_module(info.name))
    return modules


def _doc_of_member(cls: type, name: str) -> str | None:
    """The docstring of ``cls.name``, or of the same member in the first base that documents it."""
    for klass in cls.__mro__:
        value = vars(klass).get(name)
        if value is None:
            continue
        # a property's __doc__ is its doc= argument, else its getter's docstring
        target = value if isinstance(value, property) else getattr(value, "__func__", value)
        if getattr(target, "__doc__", None):
            return target.__doc__
    return None


def _ours(obj: object, package: str) -> bool:
    """Defined in ``package`` (a re-export of another package's name is checked there)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] == package


def _undocumented(package: str) -> list[str]:
    try:
        modules = _public_modules(package)
    except ImportError as err:  # an optional dependency of a wrapper module
        pytest.skip(f"{package}: {err}")
    missing, seen = [], set()
    for module in modules:
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)) or not _ours(obj, package):
                continue
            seen.add(id(obj))
            if not obj.__doc__:
                missing.append(f"{obj.__module__}.{obj.__qualname__}")
            if not inspect.isclass(obj):
                continue
            for klass in obj.__mro__:  # the methods it inherits from our (private) mixins too
                if klass is not obj and (not _ours(klass, package) or id(klass) in seen):
                    continue
                seen.add(id(klass))
                for attr, value in vars(klass).items():
                    member = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                    if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(value, property)):
                        continue
                    if not _doc_of_member(klass, attr):
                        missing.append(f"{klass.__module__}.{klass.__qualname__}.{attr}")
    return missing


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_have_docstrings(package: str) -> None:
    missing = sorted(set(_undocumented(package)))
    assert not missing, f"{len(missing)} public names of {package} have no docstring:\n" + "\n".join(missing)


if __name__ == "__main__":
    for package in PACKAGES:
        print("\n".join(sorted(_undocumented(package))))
