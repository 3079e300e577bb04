"""Names a package exports without importing their modules until first use (optional dependencies stay optional)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_lazy"]


def load_lazy(package: str, namespace: dict, table: dict[str, str], name: str) -> Any:
    """``package``'s attribute ``name``, imported from its submodule ``table[name]`` and kept in ``namespace``.

    The body of a package's module-level ``__getattr__``: ``return load_lazy(__name__, globals(),
    _LAZY, name)``; later lookups find the name in the package's globals.
    """
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{package}.{module}"), name)
    namespace[name] = value
    return value
