"""TensorDictSequential: run key-addressed modules one after the other on one TensorDict."""

from __future__ import annotations

import collections
from collections.abc import Mapping, MutableSequence
from typing import Any, Callable, Iterable, Iterator

from torch import nn
from torch.nn.modules import module as _nn_module

from .._core.utils import NestedKey
from ..tensordict import TensorDict
from .common import (
    TensorDictModule,
    TensorDictModuleBase,
    WrapModule,
    _EMPTY_SIZE,
    _parse_key_list,
    dispatch,
    _made_for,
)

__all__ = ["TensorDictSequential"]


def _as_step(module: Any) -> TensorDictModuleBase:
    if TensorDictModuleBase.is_tdmodule_compatible(module):
        return module
    if not callable(module):
        raise ValueError(f"TensorDictSequential: step {module!r} is neither a TensorDict module nor a callable.")
    return WrapModule(module)


def _keys_of(modules: Iterable) -> tuple[list, list]:
    """in_keys: the keys needed that no earlier step produces; out_keys: all outputs, last occurrence kept."""
    in_keys: list = []
    out_keys: list = []
    for module in modules:
        for key in module.in_keys:
            if key not in out_keys and key not in in_keys:
                in_keys.append(key)
        out_keys += module.out_keys
    out_keys = [key for i, key in enumerate(out_keys) if key not in out_keys[i + 1 :]]
    return in_keys, out_keys


def _global_hooks() -> bool:
    m = _nn_module
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def _raw_forward(step: Any) -> Any:
    cls = type(step)
    if (
        cls.forward not in _RAW_OK
        or cls.__call__ is not nn.Module.__call__
        or cls._call_impl is not nn.Module._call_impl
    ):
        return None
    return cls.forward.__wrapped__


class TensorDictSequential(TensorDictModule):
    """A chain of TensorDict modules, each reading what the previous ones wrote.

    Args:
        *modules: TensorDict modules or plain callables ``TensorDict -> TensorDict`` (wrapped in a
            :class:`~tdict.nn.WrapModule`, whose keys are not tracked); or a single ``OrderedDict``
            (or dict) of named steps; or a single list of steps.

    Keyword Args:
        partial_tolerant: if ``True``, a step whose in-keys are not all present is skipped (and, for
            a lazy stack, run on the members that hold them) instead of raising.
        selected_out_keys: keep only these out-keys in the result (see :meth:`select_out_keys`).
        inplace: ``None`` (default) returns what the steps return; ``True`` the input; ``False`` a
            new TensorDict holding the out-keys; ``"empty"`` ``input.empty()`` holding them. Unlike
            tensordict 0.14, ``False`` and ``"empty"`` leave the input unmodified.

    ``in_keys`` are the keys some step reads that no earlier step writes; ``out_keys`` all the keys
    the steps write. The sequence can be indexed (``seq[0]`` is a step, ``seq[1:]`` a new
    TensorDictSequential), has a ``len`` and iterates over its steps.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq
        >>> seq = Seq(
        ...     Mod(lambda x: x + 1, in_keys=["x"], out_keys=["y"]),
        ...     lambda td: td.set("z", td["y"] * 2),
        ...     Mod(lambda z, y: z - y, in_keys=["z", "y"], out_keys=["out"]),
        ... )
        >>> seq.in_keys, seq.out_keys
        (['x', 'z'], ['y', 'out'])
        >>> seq(TensorDict(x=torch.ones(())))["out"]
        tensor(2.)
        >>> len(seq), type(seq[1:]).__name__
        (3, 'TensorDictSequential')
    """

    _handles_selection = True
    module: nn.ModuleList | nn.ModuleDict  # the steps (a dict when they were given by name)

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        selected_out_keys: Iterable[NestedKey] | None = None,
        inplace: bool | str | None = None,
    ) -> None:
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            steps = collections.OrderedDict((name, _as_step(m)) for name, m in modules[0].items())
            container: nn.Module = nn.ModuleDict(steps)
            step_list = list(steps.values())
        else:
            if len(modules) == 1 and isinstance(modules[0], MutableSequence):
                modules = tuple(modules[0])
            step_list = [_as_step(m) for m in modules]
            container = nn.ModuleList(step_list)
        in_keys, out_keys = _keys_of(step_list)
        super().__init__(container, in_keys=in_keys, out_keys=out_keys, inplace=inplace)
        self.partial_tolerant = partial_tolerant
        self._complete_out_keys = list(out_keys)
        if selected_out_keys:
            self.select_out_keys(*selected_out_keys)

    def _keys_changed(self) -> None:
        super()._keys_changed()
        d = self.__dict__
        modules = d.get("_modules", {}).get("module")
        if modules is not None:
            d["_steps"] = tuple(modules.values() if isinstance(modules, nn.ModuleDict) else modules)
            d["_names"] = tuple(modules.keys()) if isinstance(modules, nn.ModuleDict) else tuple(range(len(modules)))
            # steps whose forward is one of ours can be run without nn.Module.__call__ and dispatch when
            # they carry no hooks (checked per call): that halves a step's overhead
            d["_raw"] = tuple(_raw_forward(step) for step in d["_steps"])

    def __getstate__(self) -> dict:
        # the raw forwards are functions pickle cannot name (their decorated versions hold the names)
        state = super().__getstate__()
        state.pop("_raw", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        steps = self.__dict__.get("_steps")
        if steps is not None:
            self.__dict__["_raw"] = tuple(_raw_forward(step) for step in steps)

    def select_out_keys(self, *out_keys: NestedKey) -> "TensorDictSequential":
        """Keep only ``out_keys`` in the result: intermediate outputs are not written to the input.

        Unlike :meth:`TensorDictModule.select_out_keys`, the other keys of the input are kept.

        Raises:
            ValueError: when a key is not one of the sequence's ``out_keys``.
        """
        keys = _parse_key_list(list(out_keys), "select_out_keys")
        for key in keys:
            if key not in self.out_keys:
                raise ValueError(
                    f"select_out_keys: Can't select non existent key {key!r}, it is not one of the out_keys {self.out_keys}."
                )
        self._out_keys_apparent = keys
        self._keys_changed()
        return self

    def reset_out_keys(self) -> "TensorDictSequential":
        """Undo :meth:`select_out_keys`."""
        self._out_keys_apparent = self._out_keys = list(self._complete_out_keys)
        self._keys_changed()
        return self

    def _run_partial(self, module: TensorDictModuleBase, tensordict: Any) -> Any:
        if all(key in tensordict for key in module.in_keys):
            return module(tensordict)
        members = getattr(tensordict, "tensordicts", None)
        if members is not None:
            for member in members:
                if all(key in member for key in module.in_keys):
                    module(member)
        return tensordict

    def _run_steps(self, current: Any, stop: int, partial: bool = False) -> Any:
        """Run the first ``stop`` steps on ``current`` and return what the last one returns; a
        failure gets a note naming its step. Steps whose forward is one of ours run without
        ``nn.Module.__call__`` and dispatch when no hook is set (checked per call)."""
        i = -1
        try:
            if partial:
                for i in range(stop):
                    current = self._run_partial(self._steps[i], current)
            elif _global_hooks():
                for i in range(stop):
                    current = self._steps[i](current)
            else:
                for raw, module in zip(self._raw[:stop], self._steps[:stop]):
                    i += 1
                    if (
                        raw is None
                        or module._forward_hooks
                        or module._forward_pre_hooks
                        or module._backward_hooks
                        or module._backward_pre_hooks
                    ):
                        current = module(current)
                    else:
                        current = raw(module, current)
        except Exception as err:
            if i >= 0 and hasattr(err, "add_note"):
                err.add_note(f"Failed while executing module {self._names[i]!r}.")  # pyright: ignore[reportAttributeAccessIssue]  (3.11+)
            raise
        return current

    def tensor_function(self, batch_dims: int = 0) -> Callable[..., tuple] | None:
        """The steps on tensors: ``f(*inputs)`` takes the :attr:`in_keys` entries (plain tensors, in
        that order) and returns the values of :attr:`out_keys`, each step reading what the earlier
        ones produced, without building a TensorDict (see
        :meth:`TensorDictModule.tensor_function`).

        ``None`` when a step has no tensor function, or the sequence does more than run its steps
        (``partial_tolerant``, :meth:`select_out_keys`, hooks, a subclass with its own ``forward``).

        Examples:
            >>> import torch
            >>> from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq
            >>> seq = Seq(Mod(lambda x: x + 1, in_keys=["x"], out_keys=["y"]),
            ...           Mod(lambda x, y: x * y, in_keys=["x", "y"], out_keys=["z"]))
            >>> seq.tensor_function()(torch.tensor(2.0))
            (tensor(3.), tensor(6.))
        """
        cls = type(self)
        if (
            cls.forward is not TensorDictSequential.forward
            and cls.tensor_function is TensorDictSequential.tensor_function
        ):
            return None
        if self.partial_tolerant or self._select or self._forward_hooks or self._forward_pre_hooks:
            return None
        if self._backward_hooks or self._backward_pre_hooks:
            return None
        runs = _step_functions(self._steps, batch_dims)
        if runs is None:
            return None
        steps = self._steps

        def make() -> Callable[..., tuple]:
            chain, out_keys = _tensor_chain(steps, runs, tuple(self.in_keys)), tuple(self.out_keys)
            return lambda *inputs: chain(inputs, out_keys)

        return _made_for(self, ("tensor_function", batch_dims), runs, make)

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
        """Run every step on ``tensordict`` (see the class docstring)."""
        if kwargs:
            raise RuntimeError(
                f"TensorDictSequential takes no keyword arguments other than tensordict_out or its in_keys {self.in_keys}; "
                f"got {sorted(kwargs)}."
            )
        select = self._select
        # a shallow copy keeps the input untouched when the result goes elsewhere (tensordict 0.14 writes the
        # intermediates into the input even with inplace=False; we do not)
        if select or tensordict_out is not None or (self.inplace is not None and self.inplace is not True):
            current = tensordict.copy()
        else:
            current = tensordict
        current = self._run_steps(current, len(self._steps), self.partial_tolerant)
        if tensordict_out is None:
            inplace = self.inplace
            if inplace is True:
                tensordict_out = tensordict
            elif inplace is False:
                tensordict_out = TensorDict._new_unsafe({}, _EMPTY_SIZE)
            elif inplace == "empty":
                tensordict_out = tensordict.empty()
        if tensordict_out is not None:
            if tensordict_out is not current:
                for key in self.out_keys:
                    if key in current:
                        tensordict_out.set(key, current.get(key))
            return tensordict_out
        if select:
            # write back the selected outputs and whatever the steps changed among the input's own keys
            keys = list(self.out_keys) + [
                k for k in tensordict.keys(include_nested=True, leaves_only=True) if k not in self.out_keys
            ]
            for key in keys:
                if key in current:
                    tensordict.set(key, current.get(key))
            return tensordict
        return current

    def select_subsequence(
        self, in_keys: Iterable[NestedKey] | None = None, out_keys: Iterable[NestedKey] | None = None
    ) -> "TensorDictSequential":
        """A new sequence of only the steps that depend on ``in_keys`` and that ``out_keys`` depend on.

        Args:
            in_keys: keep only the steps whose inputs are all available from ``in_keys`` (and the
                outputs of earlier kept steps). Defaults to the sequence's ``in_keys``.
            out_keys: then keep only the steps whose outputs lead to ``out_keys``. Defaults to the
                sequence's ``out_keys``.

        Raises:
            ValueError: when no step is left.

        Examples:
            >>> from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq
            >>> seq = Seq(Mod(abs, in_keys=["a"], out_keys=["b"]), Mod(abs, in_keys=["b"], out_keys=["c"]),
            ...           Mod(abs, in_keys=["a"], out_keys=["d"]))
            >>> seq.select_subsequence(out_keys=["c"]).out_keys
            ['b', 'c']
            >>> seq.select_subsequence(in_keys=["b"]).in_keys
            ['b']
        """
        in_keys = list(self.in_keys) if in_keys is None else _parse_key_list(list(in_keys), "in_keys")
        out_keys = list(self.out_keys) if out_keys is None else _parse_key_list(list(out_keys), "out_keys")
        steps = list(self._steps)
        keep = set(range(len(steps)))
        for i, module in enumerate(steps):
            if type(module) is TensorDictSequential:
                try:
                    module = steps[i] = module.select_subsequence(in_keys=in_keys)
                except ValueError:
                    keep.discard(i)
                    continue
            if all(key in in_keys for key in module.in_keys):
                in_keys.extend(module.out_keys)
            else:
                keep.discard(i)
        for i in reversed(range(len(steps))):
            if i not in keep:
                continue
            module = steps[i]
            if any(key in out_keys for key in module.out_keys):
                if type(module) is TensorDictSequential:
                    module = steps[i] = module.select_subsequence(out_keys=out_keys)
                out_keys.extend(module.in_keys)
            else:
                keep.discard(i)
        kept = sorted(keep)
        if not kept:
            raise ValueError(
                "select_subsequence: no module left after selection; make sure in_keys and out_keys are coherent."
            )
        if isinstance(self.module, nn.ModuleDict):
            return type(self)(collections.OrderedDict((self._names[i], steps[i]) for i in kept))
        return type(self)(*[steps[i] for i in kept])

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[TensorDictModuleBase]:
        return iter(self._steps)

    def __setitem__(self, index: int | str, module: Any) -> None:
        """Replace a step; the sequence's keys are inferred again."""
        # int for a list of steps, a name for a dict of them (the container raises otherwise)
        self.module[index] = _as_step(module)  # pyright: ignore[reportArgumentType]
        self._steps_changed()

    def __delitem__(self, index: int | slice | str) -> None:
        """Remove a step (or a slice of steps); the sequence's keys are inferred again."""
        del self.module[index]  # pyright: ignore[reportArgumentType]  (as in __setitem__)
        self._steps_changed()

    def _steps_changed(self) -> None:
        modules = self.module
        in_keys, out_keys = _keys_of(modules.values() if isinstance(modules, nn.ModuleDict) else modules)
        self._complete_out_keys = list(out_keys)
        self._in_keys = in_keys
        self.out_keys = out_keys  # drops any selection and rebuilds the call plan

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, (int, str)):
            return self.module[index]  # pyright: ignore[reportArgumentType, reportCallIssue]  (as in __setitem__)
        if isinstance(index, slice):
            if isinstance(self.module, nn.ModuleDict):
                names = self._names[index]
                return type(self)(collections.OrderedDict((name, self.module[name]) for name in names))
            return type(self)(*self._steps[index])
        raise TypeError(f"TensorDictSequential indices are ints, slices or step names, got {index!r}.")


# the forwards that _raw_forward may unwrap: their dispatch wrapper only matters for tensor arguments
_RAW_OK = (TensorDictModule.forward, TensorDictSequential.forward)


def _step_functions(steps: Iterable[Any], batch_dims: int) -> tuple | None:
    """Each step's ``tensor_function(batch_dims)``; ``None`` when one has none."""
    runs = []
    for step in steps:
        tensor_function = getattr(step, "tensor_function", None)
        run = None if tensor_function is None else tensor_function(batch_dims)
        if run is None:
            return None
        runs.append(run)
    return tuple(runs)


def _tensor_chain(steps: Iterable[Any], runs: tuple, in_keys: tuple) -> Callable[[tuple, tuple], tuple]:
    """``run(inputs, wanted)``: ``steps`` run on tensors one after the other (``runs``: their tensor
    functions), starting from ``inputs`` (the ``in_keys`` entries, in that order); returns the values
    of the keys ``wanted`` (a ``"_"`` key: the last value a step discarded)."""
    plan = [(run, tuple(step.in_keys), tuple(step.out_keys_source)) for step, run in zip(steps, runs)]

    def chain(inputs: tuple, wanted: tuple) -> tuple:
        values = dict(zip(in_keys, inputs))
        for run, reads, writes in plan:
            values.update(zip(writes, run(*[values[key] for key in reads])))
        return tuple(values[key] for key in wanted)

    return chain
