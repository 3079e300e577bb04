"""Functional parameters: a module's parameters and buffers as a TensorDict, and back.

``from_module`` reads a module tree into a nested TensorDict (one sub-TensorDict per submodule
that holds tensors, leaves named like the module's attributes). ``to_module`` swaps a
TensorDict's tensors into a module so that an ordinary call runs with them, and hands back the
tensors it replaced; the returned TensorDict is also a context manager that swaps them back.

A swapped-in tensor lands where the replaced one was: an ``nn.Parameter`` in ``_parameters``, a
tensor replacing a buffer in ``_buffers``, any other tensor as a plain attribute (``__dict__``) so
that a non-leaf tensor (e.g. a vmapped or differentiable one) is used as is. Swapping the original
objects back restores the module exactly.

With ``preserve_module_state=True`` (the default) the module keeps its registrations: a tensor
swapped into a parameter slot is wrapped as an ``nn.Parameter`` carrying the replaced
parameter's ``requires_grad`` (so ``state_dict()`` and ``parameters()`` still list it), and a
parameter swapped into a buffer slot is stored detached (same storage: buffers take no gradient).
A tensor that requires grad or is a ``torch.func`` transform's wrapper is never wrapped: a new
``nn.Parameter`` would cut it off its graph, so it goes in as is, as with
``preserve_module_state=False`` (as does every tensor under ``torch.compile``).

A :class:`~tdict.nn.TensorDictParams` destination (or submodule) has its whole TensorDict swapped:
reads through it see the new tensors (its registered ``parameters()`` stay the old ones until
the swap is undone).
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from torch import nn

from ..errors import InvalidArgumentError

__all__ = ["from_module", "from_modules", "to_module"]


def _module_td(module: nn.Module, filter_empty: bool = True) -> Any:
    """The module's tensors as a TensorDict; ``None`` for a module without any when ``filter_empty``."""
    from ..tensordict import TensorDict

    source: dict = {}
    for name, param in module._parameters.items():
        if param is not None:
            source[name] = param
    for name, buf in module._buffers.items():
        if buf is not None:
            source[name] = buf
    for name, sub in module._modules.items():
        if sub is None:
            continue
        if _is_params_module(sub):
            # a TensorDictParams is itself a TensorDict: nested as is, so that reads follow a swap of its content
            if next(iter(cast(Any, sub).keys()), None) is not None:
                source[name] = sub
            continue
        sub_td = _module_td(sub, filter_empty)
        if sub_td is not None:
            source[name] = sub_td
    if not source and filter_empty:
        return None
    return TensorDict._new_unsafe(source, torch.Size([]))


def from_module(
    module: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    filter_empty: bool = True,
) -> Any:
    """The parameters and buffers of ``module`` as a nested TensorDict with batch size ``[]``.

    Keys mirror the module tree (submodule names, then ``weight``, ``bias``, buffer names);
    submodules without tensors are left out unless ``filter_empty=False`` (then each is an empty
    TensorDict). The leaves are the module's own tensors (no copy).

    Args:
        module: the module to read.
        as_module: return a :class:`~tdict.nn.TensorDictParams` (an ``nn.Module``) instead.
        lock: lock the result.
        use_state_dict: read ``module.state_dict()``: the detached values it gives, with its hooks applied.
        filter_empty: leave out the submodules that hold no tensor.

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> params = TensorDict.from_module(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
        >>> sorted(params.keys(include_nested=True, leaves_only=True))
        [('0', 'bias'), ('0', 'weight'), ('2', 'bias'), ('2', 'weight')]
    """
    from ..tensordict import TensorDict

    if not isinstance(module, nn.Module):
        raise TypeError(f"from_module: expected an nn.Module, got {type(module).__name__}.")
    if use_state_dict:
        flat = module.state_dict()  # detached: a hook that swaps a parameter's data leaves them alone
        td = TensorDict(dict(flat.items())).unflatten_keys(".") if flat else TensorDict()
    else:
        td = _module_td(module, filter_empty)
        if td is None:
            td = TensorDict()
    if as_module:
        from ..nn.params import TensorDictParams

        return TensorDictParams(td, no_convert=True, lock=lock)
    if lock:
        td.lock_()
    return td


def _stack_leaves(values: list, expand_identical: bool) -> torch.Tensor:
    first = values[0]
    if expand_identical and all(v is first for v in values[1:]):
        # the shared tensor itself, expanded: not a new Parameter, its gradient reaches the original
        return first.expand((len(values),) + first.shape)
    stacked = torch.stack([v.data for v in values])
    if isinstance(first, nn.Parameter):
        return nn.Parameter(stacked, requires_grad=first.requires_grad)
    return stacked


def _stack_tds(tds: list, expand_identical: bool) -> Any:
    from ..tensordict import TensorDict

    keys = list(tds[0].keys())
    for i, td in enumerate(tds[1:], 1):
        if set(td.keys()) != set(keys):
            raise ValueError(f"from_modules: module {i} holds keys {sorted(td.keys())}, module 0 holds {sorted(keys)}.")
    source = {}
    for key in keys:
        values = [td.get(key) for td in tds]
        if isinstance(values[0], torch.Tensor):
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) != 1:
                raise ValueError(f"from_modules: entry {key!r} has different shapes across modules: {sorted(shapes)}.")
            source[key] = _stack_leaves(values, expand_identical)
        else:
            source[key] = _stack_tds(values, expand_identical)
    return TensorDict._new_unsafe(source, torch.Size([len(tds)]))


def from_modules(
    *modules: nn.Module,
    as_module: bool = False,
    lock: bool = True,
    use_state_dict: bool = False,
    lazy_stack: bool = False,
    expand_identical: bool = False,
) -> Any:
    """The parameters of several same-structured modules stacked along a new dim 0.

    Stacked parameters are new leaf ``nn.Parameter`` s (a model ensemble trains them); stacked
    buffers are plain tensors.

    Args:
        *modules: modules with the same parameter names and shapes.
        as_module: return a :class:`~tdict.nn.TensorDictParams`.
        lock: lock the result.
        use_state_dict: read each module through its ``state_dict``.
        lazy_stack: return a lazy stack of the per-module TensorDicts (the leaves stay the
            modules' own tensors) instead of a dense stack.
        expand_identical: a tensor shared by every module (the same object) is expanded instead
            of copied: the entry is a view of the shared tensor (a plain tensor, not a new
            ``nn.Parameter``) through which gradients reach it.

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> params = TensorDict.from_modules(nn.Linear(2, 3), nn.Linear(2, 3), nn.Linear(2, 3))
        >>> params.batch_size, params["weight"].shape
        (torch.Size([3]), torch.Size([3, 3, 2]))
    """
    if not modules:
        raise ValueError("from_modules: pass at least one module.")
    tds = [from_module(m, lock=False, use_state_dict=use_state_dict) for m in modules]
    if lazy_stack:
        from ..lazy import lazy_stack as _lazy_stack

        out = _lazy_stack(tds, 0)
        if as_module:
            raise InvalidArgumentError(
                "from_modules: as_module=True needs a dense stack (lazy_stack=False): a lazy stack cannot be held "
                "within a TensorDictParams."
            )
    else:
        out = _stack_tds(tds, expand_identical)
    if as_module:
        from ..nn.params import TensorDictParams

        return TensorDictParams(out, no_convert=True, lock=lock)
    if lock:
        out.lock_()
    return out


def _swap_tensor(module: nn.Module, name: str, tensor: Any, slot: str | None = None, pos: int | None = None) -> tuple:
    """Put ``tensor`` in ``module`` under ``name``; return what was there, where, and at which position.

    ``slot`` forces where ``tensor`` goes (``"param"``, ``"buffer"``, ``"attr"``) and ``pos`` its
    position in that dict: restoring puts a tensor back exactly where it came from, so the order
    of ``named_parameters()``/``state_dict()`` is unchanged.
    """
    d = module.__dict__
    dicts = {"param": module._parameters, "buffer": module._buffers, "attr": d}
    if module._parameters.get(name) is not None:
        old_slot = "param"
    elif module._buffers.get(name) is not None:
        old_slot = "buffer"
    elif name in d:
        old_slot = "attr"
    else:
        raise KeyError(f"to_module: {type(module).__name__} has no parameter, buffer or attribute {name!r}.")
    if slot is None:
        # A buffer slot stays a buffer even for a Parameter (TensorDictParams turns float buffers into
        # Parameters): moving it to _parameters would break the round trip and state_dict.
        if old_slot == "buffer":
            slot = "buffer"
        else:
            slot = "param" if isinstance(tensor, nn.Parameter) else "attr"
    src = dicts[old_slot]
    old = src[name]
    if slot == old_slot:
        src[name] = tensor  # in place: the dict keeps its order
        return old, old_slot, None
    old_pos = list(src).index(name)
    del src[name]
    dest = dicts[slot]
    if slot == "attr" or pos is None or pos >= len(dest):
        dest[name] = tensor
    else:
        items = list(dest.items())
        items.insert(pos, (name, tensor))
        dest.clear()
        dest.update(items)
    return old, old_slot, old_pos


_PRESERVE_NONE_WARNING = (
    "to_module(preserve_module_state=None) is deprecated: it replaces a module's nn.Parameter with a plain "
    "tensor, which drops it from state_dict() and parameters(). Pass preserve_module_state=True (the default) "
    "to keep the module's registrations, or False to swap the tensors in as they are."
)


def _is_functorch_wrapped(tensor: torch.Tensor) -> bool:
    if torch.compiler.is_compiling():
        return True  # dynamo cannot trace the check; under compile, tensors go in as they are
    check = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
    return bool(check is not None and check(tensor))


def _keep_registration(module: nn.Module, name: str, tensor: torch.Tensor) -> tuple:
    """``tensor`` adapted to the slot it replaces in ``module`` (see the module docstring), and that slot.

    Returns ``(tensor, slot)`` with ``slot`` ``"param"``, ``"buffer"`` or ``None`` (the default placement).
    """
    old_param = module._parameters.get(name)
    if old_param is not None:
        if isinstance(tensor, nn.Parameter) and tensor.requires_grad == old_param.requires_grad:
            return tensor, "param"
        if tensor.requires_grad or _is_functorch_wrapped(tensor):
            return tensor, None  # a Parameter wrapper would detach it from its graph
        return nn.Parameter(tensor, requires_grad=old_param.requires_grad), "param"
    if module._buffers.get(name) is not None and isinstance(tensor, nn.Parameter):
        # buffers take no gradient: a plain tensor on the same storage (in-place updates, e.g. running
        # stats, reach the parameter)
        return tensor.detach(), "buffer"
    return tensor, None


def _to_module(
    td: Any,
    module: nn.Module,
    inplace: bool,
    swap: dict | None,
    non_blocking: bool,
    memo: dict,
    undo: list,
    preserve: bool | None = False,
) -> None:
    if id(module) in memo:
        return
    memo[id(module)] = module
    for key in td.keys():
        value = td.get(key)
        if isinstance(value, torch.Tensor):
            if inplace:
                current = getattr(module, key)
                if swap is not None:
                    swap[key] = current.detach().clone()
                with torch.no_grad():
                    current.copy_(value, non_blocking=non_blocking)
            else:
                slot = None
                if preserve:
                    value, slot = _keep_registration(module, key, value)
                elif (
                    preserve is None
                    and not isinstance(value, nn.Parameter)
                    and module._parameters.get(key) is not None
                    and not memo.get("_preserve_warned")
                ):
                    memo["_preserve_warned"] = True
                    warnings.warn(_PRESERVE_NONE_WARNING, FutureWarning, stacklevel=4)
                old, old_slot, pos = _swap_tensor(module, key, value, slot)
                undo.append((module, key, old, old_slot, pos))
                if swap is not None:
                    swap[key] = old
        elif not getattr(value, "_is_non_tensor", False):
            sub = module._modules.get(key)
            if sub is None:
                raise KeyError(f"to_module: {type(module).__name__} has no submodule {key!r}.")
            if _is_params_module(sub) and not inplace:
                old_td = _swap_param_td(sub, value, undo)
                if swap is not None:
                    swap[key] = old_td
                continue
            sub_swap = {} if swap is not None else None
            _to_module(value, sub, inplace, sub_swap, non_blocking, memo, undo, preserve)
            if swap is not None:
                swap[key] = sub_swap


def _is_params_module(module: nn.Module) -> bool:
    return "_param_td" in getattr(module, "__dict__", {})  # a TensorDictParams (tdict.nn.params), without importing it


def _swap_param_td(module: nn.Module, td: Any, undo: list) -> Any:
    """Make ``td`` the TensorDict a ``TensorDictParams`` reads (whole, any batch size); return the previous one."""
    old = module.__dict__["_param_td"]
    inner = getattr(td, "__dict__", {}).get("_param_td")  # td may itself be a TensorDictParams
    module.__dict__["_param_td"] = td if inner is None else inner
    undo.append((module, "_param_td", old, "param_td", None))
    return old


def _undo(undo: list) -> None:
    for mod, key, old, slot, pos in reversed(undo):
        if slot == "param_td":
            mod.__dict__["_param_td"] = old
        else:
            _swap_tensor(mod, key, old, slot, pos)


def _dict_to_td(d: dict) -> Any:
    from ..tensordict import TensorDict

    return TensorDict._new_unsafe(
        {k: _dict_to_td(v) if isinstance(v, dict) else v for k, v in d.items()}, torch.Size([])
    )


def _check_inlined_nn_modules() -> None:
    """Under torch.compile (where torch._dynamo is loaded: reading it elsewhere would import it,
    about a second), refuse a config whose compiled graph would not see the swapped parameters."""
    if not torch._dynamo.config.inline_inbuilt_nn_modules:  # pyright: ignore[reportAttributeAccessIssue]
        raise RuntimeError(
            "to_module under torch.compile needs torch._dynamo.config.inline_inbuilt_nn_modules = True (the default): "
            "without it the compiled graph would not see the swapped parameters."
        )


def to_module(
    td: Any,
    module: nn.Module,
    *,
    inplace: bool | None = None,
    return_swap: bool = True,
    swap_dest: Any = None,
    use_state_dict: bool = False,
    non_blocking: bool = False,
    memo: dict | None = None,
    preserve_module_state: bool | None = True,
) -> Any:
    """Swap ``td``'s tensors into ``module``; return the tensors they replaced as a TensorDict.

    The returned TensorDict is a context manager: leaving ``with td.to_module(module):`` puts the
    module's previous tensors back (on an exception too). Gradients flow from the module's outputs
    to ``td``'s leaves, since the very tensors of ``td`` are used.

    Args:
        td: a TensorDict shaped like :func:`from_module`'s output (a subset of keys is fine).
        module: the module to write into.
        inplace: copy the values into the module's existing tensors instead of swapping objects
            (the returned TensorDict then holds copies of the old values).
        return_swap: return the replaced tensors (else ``None``).
        swap_dest: a TensorDict to write the replaced tensors into (it is returned).
        use_state_dict: go through ``module.load_state_dict`` (its hooks apply).
        non_blocking: with ``inplace``, copy asynchronously.
        memo: ids of modules already visited (shared submodules are swapped once).
        preserve_module_state: keep the module's registrations (``True``, the default): a tensor
            replacing a parameter goes in as an ``nn.Parameter`` with the replaced one's
            ``requires_grad`` (unless it requires grad itself or is a ``torch.func`` wrapper, which
            would be cut off its graph), a parameter replacing a buffer as a plain tensor. ``False``
            swaps the very tensors in (a plain tensor replacing a parameter leaves ``state_dict()``).
            ``None`` is the deprecated spelling of ``False`` (it warns). Ignored with ``inplace``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> m = nn.Linear(2, 1)
        >>> zeros = TensorDict.from_module(m).apply(torch.zeros_like)
        >>> with zeros.to_module(m):
        ...     m(torch.ones(2)).tolist(), isinstance(m.weight, nn.Parameter)  # still registered
        ([0.0], True)
        >>> bool(m.weight.abs().sum() > 0)
        True
    """
    from ..tensordict import TensorDict

    if torch.compiler.is_compiling():
        _check_inlined_nn_modules()
    inplace = bool(inplace)
    if preserve_module_state not in (True, False, None):
        raise TypeError(f"to_module: preserve_module_state must be True, False or None, got {preserve_module_state!r}.")
    if use_state_dict:
        flat = dict(td.flatten_keys(".").items())
        old_state = module.state_dict(keep_vars=True)
        swap = (
            {k: (old_state[k].detach().clone() if inplace else old_state[k]) for k in flat if k in old_state}
            if return_swap
            else None
        )
        module.load_state_dict(flat, strict=False, assign=not inplace)
        if swap is None:
            return None
        out = TensorDict(swap).unflatten_keys(".") if swap else TensorDict()
        if not inplace:
            # TensorDict.__init__ sets _lock_ops = None without declaring its type (list of undo callables | None)
            out._lock_ops = [lambda: module.load_state_dict(dict(old_state), strict=False, assign=True) and None]
        return out
    undo: list = []
    if _is_params_module(module) and not inplace:
        # a TensorDictParams holds its tensors in a TensorDict: the whole TensorDict is swapped
        old_td = _swap_param_td(module, td, undo)
        if not return_swap and swap_dest is None:
            return None
        if swap_dest is not None:
            swap_dest.update(old_td)
        out = old_td.copy() if swap_dest is None else swap_dest
        return _push_restore(out, lambda: _undo(undo))
    swap = {} if (return_swap or swap_dest is not None) else None
    try:
        _to_module(td, module, inplace, swap, non_blocking, {} if memo is None else memo, undo, preserve_module_state)
    except BaseException:
        _undo(undo)  # nothing half-swapped
        raise
    if swap is None:
        return None
    if swap_dest is not None:
        swap_dest.update(_dict_to_td(swap))
        out = swap_dest
    else:
        out = _dict_to_td(swap)
    if not inplace:

        def restore() -> None:
            _undo(undo)
    else:

        def restore() -> None:
            to_module(out, module, inplace=True, return_swap=False)

    return _push_restore(out, restore)


def _push_restore(out: Any, restore: Any) -> Any:
    """Register ``restore`` to run when ``out`` leaves a ``with`` block; return ``out``."""
    ops = getattr(out, "_lock_ops", None)
    if ops is None:
        ops = out._lock_ops = []
    ops.append(restore)
    return out
