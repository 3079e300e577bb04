"""The method-to-module table in ``TensorDictBase``'s docstring matches where the methods live."""

import inspect
import re
from pathlib import Path

import tdict
from tdict import LazyStackedTensorDict, TensorDict, TensorDictBase

ROOT = Path(tdict.__file__).parent
ROW = re.compile(r"^\s*\| `([^`]+\.py)`[^|]*\| (.*) \|$")


def _rows() -> list[tuple[str, list[str]]]:
    rows = []
    for line in TensorDictBase.__doc__.splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", match.group(2))))
    return rows


def _defining_file(name: str) -> Path | None:
    """The file of the first class defining ``name``: the base's hierarchy first, then TensorDict."""
    for cls in TensorDictBase.__mro__ + (TensorDict,):
        if name in vars(cls):
            return Path(inspect.getfile(cls)).resolve()
    return None


def test_every_listed_method_is_defined_in_its_row_module():
    rows = _rows()
    assert len(rows) >= 12
    checked = 0
    for module, names in rows:
        assert (ROOT / module).is_file(), module
        for name in names:
            where = _defining_file(name)
            if where is None or name in ("TensorDict", "LazyStackedTensorDict"):
                continue  # a class name or a word of the description, not a method
            if module == "tensordict.py" and name == "from_module":
                continue  # attached to TensorDict from _core/functional.py (the row says so)
            assert where == (ROOT / module).resolve(), f"{name} is listed under {module} but defined in {where}"
            checked += 1
    assert checked >= 70


def test_every_mixin_of_the_base_is_in_the_table():
    listed = {module for module, _ in _rows()}
    for cls in TensorDictBase.__mro__[1:-1]:
        path = Path(inspect.getfile(cls)).resolve().relative_to(ROOT.resolve()).as_posix()
        assert path in listed, f"{cls.__name__} ({path}) is missing from TensorDictBase's method table"
    assert LazyStackedTensorDict.__module__ == "tdict.lazy"
