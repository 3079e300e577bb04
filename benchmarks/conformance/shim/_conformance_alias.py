"""Import aliases that let an upstream test suite import our packages under the peers' names.

``install()`` puts a finder first on ``sys.meta_path`` that answers every import of ``tensordict``
and ``torchrl`` (and their submodules) with a proxy module. A proxy looks names up in our modules
(``MODULES``: for each upstream module, ours in the order searched; a submodule without an entry
tries the same path under our first package, then its parent's modules). A public name that none
of them has resolves to a *missing* placeholder: a class that can sit in ``isinstance`` checks
and ``except`` clauses at import time, and raises ``NotImplementedError`` naming the upstream
object the moment a test calls it or reads from it. So one missing name fails the tests that use
it, not the whole file. A private name (a leading underscore) is looked up in the first of our
modules only, unless ``PLUMBING`` maps it: those are the upstream test helpers' own imports
(``_stack`` to build the stacked TensorDicts of the test matrix), mapped to our public equivalents
or to stubs. The peers' process-global switches are stubs (``SWITCHES``, ``GETTERS``), and their
``_has_<library>`` flags answer whether that library is installed, as upstream's do.

Every placeholder that a test touches is counted; with ``CONFORMANCE_MISSING_OUT`` set, the counts
are written there (JSON) when the process exits, and the runner sums them into its report.

Some upstream modules are test helpers, not API (``torchrl.testing``: mock envs and the like): with
``CONFORMANCE_SOURCE_DIRS`` set (``name=folder`` pairs, ``os.pathsep``-separated), those modules
are loaded from the upstream source files in ``folder``, so their own imports of the peers' names
go through the aliases, as the tests' do.

The finder is installed by ``sitecustomize.py`` next to this file, so every Python process started
with this folder on ``PYTHONPATH`` (pytest, and the subprocesses its tests spawn) gets the aliases.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from collections import Counter
from typing import Any

ROOTS = ("tensordict", "torchrl")

# upstream module -> our modules, searched in order
MODULES: dict[str, list[str]] = {
    "tensordict": ["tdict", "tdict.base", "tdict.tensorclass", "tdict.nn"],
    "tensordict.base": ["tdict.base", "tdict"],
    "tensordict._td": ["tdict.tensordict", "tdict"],
    "tensordict._lazy": ["tdict.lazy", "tdict"],
    "tensordict._unbatched": ["tdict.unbatched", "tdict"],
    "tensordict.utils": ["tdict", "tdict.base"],
    "tensordict.functional": ["tdict"],
    "tensordict._torch_func": ["tdict"],
    "tensordict.tensorclass": ["tdict.tensorclass", "tdict.non_tensor", "tdict.non_tensor_stack", "tdict"],
    "tensordict.typedtensordict": ["tdict.typed", "tdict"],
    "tensordict.memmap": ["tdict.memmap", "tdict"],
    "tensordict.persistent": ["tdict"],
    "tensordict.nn": ["tdict.nn"],
    "tensordict.nn.params": ["tdict.nn.params", "tdict.nn"],
    "tensordict.nn.distributions": ["tdict.nn.distributions", "tdict.nn"],
    "tensordict.nn.functional_modules": ["tdict.nn", "tdict"],
    "tensordict.nn.utils": ["tdict.nn"],
    "tensordict.nn.common": ["tdict.nn.common", "tdict.nn"],
    "tensordict.nn.probabilistic": ["tdict.nn.probabilistic", "tdict.nn"],
    "tensordict.nn.sequence": ["tdict.nn.sequence", "tdict.nn"],
    "tensordict.nn.ensemble": ["tdict.nn.ensemble", "tdict.nn"],
    "tensordict.nn.cudagraphs": ["tdict.nn.cudagraphs", "tdict.nn"],
    "torchrl": ["rl_envs", "rl_collect", "rl_objectives", "rl_replay", "tdict.specs"],
    "torchrl.data": ["tdict.specs", "rl_replay"],
    "torchrl.data.tensor_specs": ["tdict.specs"],
    "torchrl.data.replay_buffers": ["rl_replay"],
    "torchrl.data.replay_buffers.storages": ["rl_replay"],
    "torchrl.data.replay_buffers.samplers": ["rl_replay"],
    "torchrl.data.replay_buffers.writers": ["rl_replay"],
    "torchrl.data.replay_buffers.replay_buffers": ["rl_replay"],
    "torchrl.data.replay_buffers.utils": ["rl_replay"],
    "torchrl.data.utils": ["tdict.specs", "rl_replay", "rl_collect"],  # CloudpickleWrapper lives in rl_collect
    "torchrl.envs": ["rl_envs"],
    "torchrl.envs.transforms": ["rl_envs.transforms", "rl_envs"],
    "torchrl.envs.utils": ["rl_envs.utils", "rl_envs"],
    "torchrl.envs.libs.gym": ["rl_envs"],
    "torchrl.envs.libs.dm_control": ["rl_envs"],
    "torchrl.collectors": ["rl_collect"],
    "torchrl.modules": ["rl_objectives.modules", "tdict.nn"],
    "torchrl.modules.tensordict_module": ["rl_objectives.modules", "tdict.nn"],
    "torchrl.modules.distributions": ["rl_objectives.modules"],
    "torchrl.modules.models": ["rl_objectives.modules"],
    "torchrl.objectives": ["rl_objectives"],
    "torchrl.objectives.value": ["rl_objectives.value"],
    "torchrl.objectives.value.functional": ["rl_objectives.value.functional", "rl_objectives.value"],
    "torchrl.objectives.utils": ["rl_objectives", "rl_objectives.value.registry"],
    "torchrl.trainers": ["rl_objectives.trainers"],
}

# (upstream module, private name) -> our object (a dotted path), for the upstream test helpers
PLUMBING: dict[tuple[str, str], str] = {
    ("tensordict._torch_func", "_stack"): "tdict.stack",
    ("tensordict._lazy", "LazyStackedTensorDict"): "tdict.LazyStackedTensorDict",
    # the same test matrix on both sides: the HDF5 TensorDict type is built where h5py is installed
    ("tensordict.persistent", "_has_h5"): "_conformance_alias._HAS_H5",
    # the test helpers' check of tensordict's internal metadata invariants (every factory of the
    # test matrix runs it): not API, a stub that checks nothing
    ("tensordict.utils", "_check_recursive_properties"): "_conformance_alias._no_check",
    # tensordict's version-dispatch decorator, used by the tests to pick an implementation
    ("tensordict.utils", "implement_for"): "_conformance_alias.implement_for",
    # the test of which leaves batch ops carry over whole (UnbatchedTensor, non-tensor data)
    ("tensordict.utils", "_pass_through"): "tdict.unbatched._pass_through",
    # the fixed opening of the locked-write errors, which the tests match against: ours is public
    ("tensordict.utils", "_LOCK_ERROR"): "tdict.errors.LOCKED",
    # a public name TorchRL re-exports from several modules, ours lives in one package (rl_envs)
    ("torchrl.modules", "RandomPolicy"): "rl_envs.RandomPolicy",
    ("torchrl.collectors", "RandomPolicy"): "rl_envs.RandomPolicy",
    # TorchRL's private profiler hook class is our public one
    ("torchrl.collectors._base", "_ProfilerHook"): "rl_collect.ProfilerHook",
}
_HAS_H5 = importlib.util.find_spec("h5py") is not None


def _no_check(*args: Any, **kwargs: Any) -> bool:
    return True


class implement_for:
    """``@implement_for("module", "from_version", "to_version")``: the decorated function is the
    implementation used when the installed ``module`` version is in ``[from, to)``; several may
    share a name (the first matching one is called)."""

    _registry: dict[str, list] = {}

    def __init__(self, module_name: Any, from_version: str | None = None, to_version: str | None = None, **kw: Any):
        self.module_name, self.from_version, self.to_version = module_name, from_version, to_version

    def _in_range(self) -> bool:
        from packaging.version import parse

        name = self.module_name() if callable(self.module_name) else self.module_name
        try:
            version = parse(importlib.import_module(name).__version__)
        except Exception:
            return False
        low = self.from_version is None or version >= parse(self.from_version)
        high = self.to_version is None or version < parse(self.to_version)
        return low and high

    def __call__(self, fn: Any) -> Any:
        impls = self._registry.setdefault(f"{fn.__module__}.{fn.__qualname__}", [])
        impls.append((self, fn))

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            for spec, impl in impls:
                if spec._in_range():
                    return impl(*args, **kwargs)
            raise ModuleNotFoundError(f"no implementation of {fn.__qualname__} for the installed {self.module_name}")

        dispatch.__name__, dispatch.__qualname__ = fn.__name__, fn.__qualname__
        return dispatch


# the peers' process-global behaviour switches, which our packages do not copy (DESIGN 2): each is a
# stub that accepts the calls (decorator, context manager, ``.set()``) and changes nothing; the
# getters report the one behaviour ours has (tensordict 0.14's defaults)
SWITCHES = frozenset(
    {
        "set_lazy_legacy",
        "set_list_to_stack",
        "set_capture_non_tensor_stack",
        "set_composite_lp_aggregate",
        "set_printoptions",
        "set_get_defaults_to_none",
        "set_auto_unwrap_transformed_env",
    }
)
GETTERS = {
    "lazy_legacy": False,
    "list_to_stack": True,
    "capture_non_tensor_stack": False,
    "composite_lp_aggregate": False,
    "get_defaults_to_none": False,  # td.get(missing) raises KeyError here (DESIGN 2)
    "auto_unwrap_transformed_env": False,  # batched envs keep a TransformedEnv sub-env as it is
}

MISSING: Counter = Counter()


class _SwitchStub:
    """Stands for a process-global switch: usable as decorator, context manager or ``.set()``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, fn: Any) -> Any:
        return fn

    def __enter__(self) -> _SwitchStub:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set(self) -> None:
        return None

    def unset(self) -> None:
        return None


class _MissingMeta(type):
    """Metaclass of the placeholders: calling one, or reading from it, raises."""

    _upstream: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        MISSING[cls._upstream] += 1
        raise NotImplementedError(f"conformance: our packages have no {cls._upstream}")

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith(("_", "pytest")):  # probes by pytest's collection and by inspection
            raise AttributeError(attr)
        MISSING[cls._upstream] += 1
        raise NotImplementedError(f"conformance: our packages have no {cls._upstream} (read .{attr})")

    def __getitem__(cls, item: Any) -> Any:
        if isinstance(item, int):  # iteration by index (no __iter__) must not run forever
            MISSING[cls._upstream] += 1
            raise NotImplementedError(f"conformance: our packages have no {cls._upstream} (indexed)")
        return cls  # ``Missing[T]`` at import (a generic base, an annotation): fails when used

    def __iter__(cls) -> Any:
        MISSING[cls._upstream] += 1
        raise NotImplementedError(f"conformance: our packages have no {cls._upstream} (iterated)")

    def __bool__(cls) -> bool:
        return False  # ``if missing:`` at import (an availability flag): not available

    def __len__(cls) -> int:
        MISSING[cls._upstream] += 1
        raise NotImplementedError(f"conformance: our packages have no {cls._upstream} (len)")


def _missing(upstream: str) -> type:
    return _MissingMeta(upstream.rsplit(".", 1)[-1], (Exception,), {"_upstream": upstream})


def _resolve_dotted(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _our_modules(upstream: str) -> list[str]:
    if upstream in MODULES:
        return MODULES[upstream]
    root, _, rest = upstream.partition(".")
    guess = f"{MODULES[root][0]}.{rest}" if rest else MODULES[root][0]
    parent = upstream.rpartition(".")[0]
    return [guess, *(_our_modules(parent) if parent else [])]


class AliasModule(types.ModuleType):
    """An upstream module name whose attributes come from our modules (see the module docstring)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package: its submodules go through the finder too
        self._ours: list[types.ModuleType] = []
        for our in _our_modules(name):
            with contextlib.suppress(ImportError):
                self._ours.append(importlib.import_module(our))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        plumbing = PLUMBING.get((self.__name__, attr))
        if plumbing is not None:
            return _resolve_dotted(plumbing)
        special = attr.startswith("_has_") or attr in SWITCHES or attr in GETTERS
        if special and not any(hasattr(m, attr) for m in self._ours):
            if attr in SWITCHES:
                return _SwitchStub
            if attr in GETTERS:
                value = GETTERS[attr]
                return lambda *args, **kwargs: value
            # the upstream's "is this optional library installed" flags: the same answer as upstream's
            name = attr[len("_has_") :]
            candidates = {"gym": ["gymnasium", "gym"], "h5": ["h5py"], "dmc": ["dm_control"]}.get(name, [name])
            return any(importlib.util.find_spec(c) is not None for c in candidates)
        sub = f"{self.__name__}.{attr}"
        for module in self._ours:
            if attr.startswith("_") and module.__name__ != self._ours[0].__name__:
                break  # a private name comes only from the primary module
            if hasattr(module, attr):
                value = getattr(module, attr)
                if not isinstance(value, types.ModuleType):
                    return value  # a function or class wins over a submodule of the same name
                return importlib.import_module(sub)  # a submodule: its alias, with the fallbacks
        if sub in sys.modules or sub in MODULES or any(key.startswith(sub + ".") for key in MODULES):
            return importlib.import_module(sub)
        value = _missing(sub)
        setattr(self, attr, value)  # one placeholder per name
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        # the import system sets a loaded submodule on its parent; where the parent's name means a
        # function or class (``tensordict.tensorclass`` is the decorator), that name is kept
        if isinstance(value, AliasModule) and any(
            not isinstance(getattr(m, attr, None), (types.ModuleType, type(None)))
            for m in self.__dict__.get("_ours", [])
        ):
            return
        super().__setattr__(attr, value)

    def __dir__(self) -> list[str]:
        return sorted({name for module in self._ours for name in dir(module) if not name.startswith("_")})


def _source_dirs() -> dict[str, str]:
    pairs = [p for p in os.environ.get("CONFORMANCE_SOURCE_DIRS", "").split(os.pathsep) if p]
    return dict(p.split("=", 1) for p in pairs)


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.sources = _source_dirs()

    def _source_spec(self, fullname: str) -> Any:
        for name, folder in self.sources.items():
            if fullname == name and folder.endswith(".py"):  # a single-file module
                return importlib.util.spec_from_file_location(fullname, folder)
            if fullname == name or fullname.startswith(name + "."):
                rel = fullname[len(name) :].lstrip(".").replace(".", os.sep)
                base = os.path.join(folder, rel) if rel else folder
                if os.path.isdir(base):
                    init = os.path.join(base, "__init__.py")
                    return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[base])
                if os.path.isfile(base + ".py"):
                    return importlib.util.spec_from_file_location(fullname, base + ".py")
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in ROOTS:
            return None
        source = self._source_spec(fullname)
        if source is not None:
            return source
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        return AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None  # nothing to run: the proxy resolves names on demand


def _write_missing() -> None:
    out = os.environ.get("CONFORMANCE_MISSING_OUT")
    if out and MISSING:
        path = f"{out}.{os.getpid()}.json"
        with open(path, "w") as f:
            json.dump(dict(MISSING), f)


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        for name in [n for n in sys.modules if n.partition(".")[0] in ROOTS]:
            del sys.modules[name]
        sys.meta_path.insert(0, AliasFinder())
        atexit.register(_write_missing)
