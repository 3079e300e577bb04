"""LossModule: the base of every loss (its networks, their target copies, its keys, its value estimator).

A loss holds each network it trains under a name (``actor_network``, ``qvalue_network``, ...) and the
network's parameters as a :class:`~tdict.nn.TensorDictParams` under ``<name>_params``. Those are the
network's own ``nn.Parameter`` s, so an optimizer over ``loss.parameters()`` trains the network. A
network that needs a target copy also gets ``target_<name>_params``: detached clones registered as
buffers (saved in ``state_dict``, moved by ``.to()``, never seen by optimizers), which
:class:`~rl_objectives.SoftUpdate` / :class:`~rl_objectives.HardUpdate` move towards the trained ones.

With ``expand_dim=n`` a network is trained as an ensemble of ``n`` parameter sets (SAC's and TD3's
twin Q-networks): the sets are stacked along a new leading dim and outputs get that leading dim.
A network of small linear layers runs every set in one batched call (:mod:`.stacked_ensemble`);
others run up to four sets in a loop, more through ``torch.vmap``.

``compare_against`` (TorchRL's ``separate_losses``): the parameters a network shares with another one
(a critic built on the actor's trunk) are trained only through that other network. This network's
``<name>_params`` holds them as detached views of the owner's parameters (an ensemble's expanded
over its sets), registered as buffers: they follow the owner's updates, ``.to()``, copies and
checkpoints, and this network's losses send no gradient into them.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import operator
import warnings
from collections.abc import Iterable, Mapping, Sequence
from copy import deepcopy as _deepcopy
from typing import Any, Callable, ClassVar

import tdict
import torch
from torch import nn
from torch.nn.parameter import is_lazy

from tdict import TensorDict, TensorDictBase
from tdict.nn import TensorDictModuleBase, TensorDictParams, TensorKeysMixin
from tdict.validation import check_one_of, check_positive_int, check_unit_interval

from .._stack import user_stacklevel as _user_stacklevel
from .loss_mask import check_loss_mask_key, combine_masks, masked_reduce, read_loss_mask
from .stacked_ensemble import LinearStack, transformed
from .tensor_calls import _TensorCalls

__all__ = ["LossModule", "total_loss"]

# a reduction over every position, unweighted
_PLAIN_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean": torch.mean,
    "sum": torch.sum,
    "none": lambda loss: loss,
}
_data_ptr = torch.Tensor.data_ptr
_requires_grad = operator.attrgetter("requires_grad")
_LOOP_MAX_SETS = 4  # measured crossover: a loop beats torch.vmap for 2 to 4 small networks
_MAX_STACK_VERDICTS = 256  # input signatures remembered per loss (see LossModule._stacked_sets)


def total_loss(losses: TensorDictBase, components: Sequence[str] | None = None) -> torch.Tensor:
    """The sum of a loss output's terms: the scalar to back-propagate.

    A loss returns its terms separately (``"loss_actor"``, ``"loss_qvalue"``, ``"loss_alpha"``, ...)
    next to detached diagnostics (``"alpha"``, ``"entropy"``); summing them by hand invites leaving
    one out. This sums every entry whose name starts with ``"loss"`` (or exactly ``components``).

    Args:
        losses: the loss module's output TensorDict.
        components: the entries to sum; ``None``: every root entry whose name starts with ``"loss"``.

    Raises:
        KeyError: no entry starts with ``"loss"``, or a named component is missing (listing the entries).
        ValueError: a summed entry is not a one-element tensor (naming it; use ``reduction="mean"``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives import total_loss
        >>> out = TensorDict(loss_actor=torch.tensor(1.5), loss_qvalue=torch.tensor(2.0), alpha=torch.tensor(0.2))
        >>> total_loss(out)  # alpha is a diagnostic, not summed
        tensor(3.5000)
        >>> total_loss(out, ["loss_qvalue"])
        tensor(2.)
    """
    present = list(losses.keys())
    if components is None:
        names = [k for k in present if isinstance(k, str) and k.startswith("loss")]
        if not names:
            raise KeyError(
                f"total_loss: the loss output has no entry whose name starts with 'loss'; entries: {present}."
            )
    else:
        names = list(components)
        missing = [k for k in names if k not in present]
        if missing:
            raise KeyError(f"total_loss: components {missing} are not in the loss output; entries: {present}.")
    values = []
    for name in names:
        value = losses.get(name)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(
                f"total_loss: loss entry {name!r} must be a scalar tensor, got {shape} (use reduction='mean' or 'sum')."
            )
        values.append(value.reshape(()))
    return torch.stack(values).sum() if len(values) > 1 else values[0]


class LossModule(_TensorCalls, TensorKeysMixin, nn.Module):
    """Base class of the losses.

    Subclasses declare ``default_keys`` (name -> default TensorDict key), register their networks
    with :meth:`convert_to_functional`, build their value estimator in :meth:`make_value_estimator`
    and return, from ``forward``, a TensorDict whose ``"loss_*"`` entries are the scalars to sum
    and back-propagate (other entries are detached diagnostics; :func:`~rl_objectives.total_loss`
    sums them).

    Hyper-parameters held as buffers and listed in ``_schedulable_buffers`` (PPO's ``clip_epsilon``,
    ``entropy_coeff``, ``critic_coeff``, ...) can be scheduled by assignment, as in TorchRL 0.14:
    ``loss.entropy_coeff = 0.003`` checks the number, then writes it into the buffer in place (its
    device and dtype are kept, and a compiled forward reads the new value without recompiling).
    The next call uses it; nothing is cached from the value given at construction.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives import LossModule
        >>> class Regression(LossModule):
        ...     default_keys = {"prediction": "prediction", "target": "target"}
        ...     def __init__(self, network):
        ...         super().__init__()
        ...         self.convert_to_functional(network, "network", create_target_params=True)
        ...     def forward(self, td):
        ...         out = self.call_network("network", td)
        ...         err = out[self.tensor_keys.prediction] - td[self.tensor_keys.target]
        ...         return TensorDict(loss_mse=err.pow(2).mean())
        >>> net = TensorDictModule(nn.Linear(3, 1), in_keys=["x"], out_keys=["prediction"])
        >>> loss = Regression(net)
        >>> td = TensorDict(x=torch.randn(8, 3), target=torch.randn(8, 1), batch_size=[8])
        >>> loss(td)["loss_mse"].shape
        torch.Size([])
        >>> sorted(name for name, _ in loss.named_buffers())[:2]
        ['target_network_params.module.bias', 'target_network_params.module.weight']
    """

    default_keys: ClassVar[Mapping[str, Any]] = {}
    out_keys: Any = ()  # the entries a call returns (a class list, or a property where they depend on options)
    # any key may be a list of keys (TorchRL's per-head log-probs and actions of a composite policy)
    accepts_key_lists: ClassVar[bool] = True
    default_value_estimator: ClassVar[Any] = None  # a rl_objectives.value.ValueEstimators member
    default_value_kwargs: ClassVar[Mapping[str, Any]] = {}
    # buffers that ``loss.<name> = number`` updates in place (TorchRL's _schedulable_buffers); the
    # names of a class and of its bases are merged into _all_schedulable_buffers
    _schedulable_buffers: ClassVar[frozenset] = frozenset()
    _all_schedulable_buffers: ClassVar[frozenset] = frozenset()
    # TorchRL's deactivate_vmap: run every parameter set of an ensemble in a plain loop
    deactivate_vmap: bool = False

    @property
    def loss_mask_key(self) -> Any:
        """Where :meth:`_reduce_loss` reads the validity mask of a loss's positions: ``"auto"``
        (default: every entry of ``AUTO_LOSS_MASK_KEYS`` present, ANDed), a key, or ``None`` (no
        mask); see :mod:`rl_objectives.losses.loss_mask`."""
        return self.__dict__.get("_loss_mask_key", "auto")

    @loss_mask_key.setter
    def loss_mask_key(self, value: Any) -> None:
        self.__dict__["_loss_mask_key"] = check_loss_mask_key(type(self).__name__, value)

    def _reduce_loss(self, loss: torch.Tensor, tensordict: Any, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``loss`` reduced with ``self.reduction`` over the valid positions: those of the mask read
        from ``tensordict`` (:attr:`loss_mask_key`) and of ``mask``. Masked positions are selected
        out, never multiplied by zero. With ``reduction="none"`` a mask read from the input keeps the
        loss's shape (zeros where masked), while a ``mask`` passed here compacts the output to the
        kept elements."""
        return self._reducer(tensordict, mask)(loss)

    def _reducer(self, tensordict: Any, mask: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`_reduce_loss` for every term of one batch, its mask read once."""
        reduction = getattr(self, "reduction", "mean") or "mean"
        valid = self._valid_positions(tensordict, mask)
        if valid is None:
            return _PLAIN_REDUCTIONS[reduction]
        compact = mask is not None
        return lambda loss: masked_reduce(loss, valid, reduction, compact=compact)

    def _scalar(self, name: str) -> float | torch.Tensor:
        """The one-element buffer ``name`` (a scheduled hyper-parameter) as a Python float, read again
        only after the buffer changed (its version counter moved, or another tensor took its place),
        so that a step spends no tensor op on it and a device reads it once per change; the buffer
        itself while ``torch.compile`` traces."""
        tensor = self._buffers[name]
        if tensor is None:
            raise AttributeError(f"{type(self).__name__}: the buffer {name!r} is not set.")
        if torch.compiler.is_compiling():
            return tensor
        cache = self.__dict__.setdefault("_scalar_cache", {})
        held = cache.get(name)
        if held is None or held[0] is not tensor or held[1] != tensor._version:
            held = cache[name] = (tensor, tensor._version, float(tensor))
        return held[2]

    def _valid_positions(self, tensordict: Any, mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """The mask :attr:`loss_mask_key` reads from ``tensordict``, ANDed with ``mask`` (None: no mask)."""
        read = read_loss_mask(tensordict, self.loss_mask_key)
        if mask is None:
            return read
        return mask.bool() if read is None else combine_masks(mask.bool(), read)

    @property
    def vmap_randomness(self) -> str:
        """``torch.vmap``'s ``randomness`` for the ensembles this loss runs through ``torch.vmap``:
        what :meth:`set_vmap_randomness` set, else ``"different"`` (each parameter set draws its own
        dropout masks and noise)."""
        return self.__dict__.get("_vmap_randomness") or "different"

    def set_vmap_randomness(self, value: str) -> None:
        """Sets :attr:`vmap_randomness`: ``"different"``, ``"same"`` or ``"error"`` (a random op
        inside the vmapped call raises).

        Raises:
            ValueError: another value.
        """
        check_one_of(type(self).__name__, "vmap_randomness", value, ("different", "same", "error"))
        self.__dict__["_vmap_randomness"] = value

    def __init__(self) -> None:
        super().__init__()
        self._networks: dict[str, int | None] = {}  # name -> expand_dim (None: a single set)
        self._target_networks: list[str] = []
        self._shared_params: dict[str, dict] = {}  # name -> {key: the other network's Parameter}
        self._swap_plans: dict[str, tuple] = {}  # name -> (leaf keys, where each leaf lives in the module)
        self._value_estimator = None
        self._ctor_gamma: float | None = None  # TorchRL's deprecated loss(gamma=...)
        # set by a TargetNetUpdater built on this loss; until then, reading target parameters warns
        self._target_updater_attached = False
        # shared entries are views of the owner's parameters: a checkpoint's copy of them is not loaded
        self._register_load_state_dict_pre_hook(_drop_shared_entries, with_module=True)
        self.register_load_state_dict_post_hook(_forgive_shared_entries)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        merged: set = set()
        for base in cls.__mro__:
            merged |= vars(base).get("_schedulable_buffers", frozenset())
        cls._all_schedulable_buffers = frozenset(merged)  # one set lookup per assignment

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value_estimator":  # nn.Module would register an estimator module without the property
            LossModule.value_estimator.fset(self, value)  # pyright: ignore[reportOptionalCall]  # (defined below)
            return
        if (
            name in self._all_schedulable_buffers
            and not isinstance(value, torch.Tensor)
            and value is not None
            and name in self.__dict__.get("_buffers", ())
        ):
            self._set_schedulable(name, value)
            return
        super().__setattr__(name, value)  # pyright: ignore[reportArgumentType]  # (torch's stub: tensors and modules only)

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        # reading target parameters before a target updater exists: they would never move (TorchRL warns too)
        if (
            name.startswith("target_")
            and not self.__dict__.get("_target_updater_attached", True)
            and name[len("target_") : -len("_params")] in self.__dict__.get("_target_networks", ())
            and not torch.compiler.is_compiling()
        ):
            warnings.warn(self._no_updater_message(), UserWarning, stacklevel=_user_stacklevel())
        return value

    def __setstate__(self, state: dict) -> None:  # a deep copy or an unpickled loss: views of its own copies
        super().__setstate__(state)
        self._link_shared()
        self._drop_kept_views()

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = super()._apply(fn, *args, **kwargs)
        self._link_shared()  # .to() converted the views into copies: point them at the owner again
        self._drop_kept_views()  # (they would keep the old tensors' memory alive)
        return out

    def _drop_kept_views(self) -> None:
        """Forget the views and numbers kept between calls (:meth:`_detached_params`,
        :meth:`_parameter_sets`, :meth:`_scalar`); the next call makes them afresh."""
        for name in ("_detached_cache", "_sets_cache", "_scalar_cache"):
            self.__dict__.pop(name, None)

    def _link_shared(self) -> None:
        """Point each shared entry of ``<name>_params`` at its owner's parameter (the same object kept)."""
        for name, shared in self.__dict__.get("_shared_params", {}).items():
            held = getattr(self, f"{name}_params")._param_td
            for key, owned in shared.items():
                held.get(key).data = _shared_view(owned, self._networks[name]).data

    def _shared_entries(self, prefix: str = "") -> list[str]:
        """The state-dict names of the shared entries (under ``prefix``)."""
        return [
            f"{prefix}{name}_params." + ".".join(key if isinstance(key, tuple) else (key,))
            for name, shared in self._shared_params.items()
            for key in shared
        ]

    # ------------------------------------------------------------------ scheduled hyper-parameters
    def _set_schedulable(self, name: str, value: Any) -> None:
        """``loss.<name> = value`` for a schedulable buffer: checked, then copied in place."""
        owner = type(self).__name__
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{owner}: {name} must be a number (or a tensor), got {value!r}.")
        if not math.isfinite(float(value)):
            raise ValueError(f"{owner}: {name} must be finite, got {value!r}.")
        buffer = self._buffers[name]
        if buffer is None:
            raise ValueError(
                f"{owner}: {name} was None at construction, so there is nothing to schedule (the term it weights is "
                f"off); build the loss with {name}=<number> to schedule it."
            )
        self._check_hyperparameter(name, float(value))
        with torch.no_grad():
            buffer.fill_(float(value))

    def register_coeff_buffer(
        self, name: str, value: Any, *, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        """Hold the coefficient ``value`` (a number or a one-element tensor) as the buffer ``name``
        (moved by ``.to()``, saved in ``state_dict``); ``None`` sets a plain ``None`` attribute.

        Examples:
            >>> import torch
            >>> from rl_objectives import LossModule
            >>> loss = LossModule()
            >>> loss.register_coeff_buffer("entropy_coeff", 0.01, dtype=torch.float64)
            >>> loss.entropy_coeff
            tensor(0.0100, dtype=torch.float64)

        Raises:
            ValueError: ``value`` is a bool, not a number, or a tensor of more than one element.
        """
        if value is None:
            setattr(self, name, None)
            return
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.Tensor)):
            raise ValueError(
                f"{type(self).__name__}.register_coeff_buffer: {name} must be a float or a scalar tensor, got {value!r}."
            )
        tensor = torch.as_tensor(value, device=device, dtype=dtype)
        if tensor.numel() != 1:
            raise ValueError(
                f"{type(self).__name__}.register_coeff_buffer: {name} must be a float or a scalar tensor, got a "
                f"tensor of shape {tuple(tensor.shape)}."
            )
        self.register_buffer(name, tensor)

    def _check_hyperparameter(self, name: str, value: float) -> None:
        """Raise ``ValueError`` naming ``name`` when ``value`` is not allowed (override per loss;
        the constructor's rule). Called before a scheduled value is written."""

    # ------------------------------------------------------------------ keys
    # ``tensor_keys`` and ``set_keys`` come from tdict.nn.TensorKeysMixin; the value estimator follows
    def _on_keys_set(self, changed: dict[str, Any]) -> None:
        self._forward_value_estimator_keys(**changed)

    def _set_deprecated_ctor_args(self, *, gamma: Any = None, priority_key: Any = None) -> None:
        """TorchRL's deprecated constructor arguments: ``gamma`` (the value estimator's discount, now
        set with ``make_value_estimator(gamma=...)``) and ``priority_key`` (now ``set_keys(priority=...)``).

        Each one given emits a ``DeprecationWarning`` and takes effect: ``gamma`` becomes the default
        discount of the value estimator this loss builds, ``priority_key`` the key the TD error is
        written to. (TorchRL 0.14 refuses both; older TorchRL accepted them with the warning.)

        Raises:
            ValueError: ``gamma`` outside ``[0, 1]``, or a ``priority_key`` that is not a key.
        """
        name = type(self).__name__
        if gamma is not None:
            check_unit_interval(name, "gamma", gamma)
            warnings.warn(
                f"{name}(gamma=...) is deprecated: call loss.make_value_estimator(<ValueEstimators member>, gamma={gamma}) "
                "instead. The value is used as the value estimator's discount.",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
            self._ctor_gamma = float(gamma)
        if priority_key is not None:
            if "priority" not in self.default_keys:
                raise ValueError(f"{name}: priority_key is not accepted, this loss writes no priority.")
            warnings.warn(
                f"{name}(priority_key=...) is deprecated: call loss.set_keys(priority={priority_key!r}) instead.",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
            self.set_keys(priority=priority_key)

    def _keys_from_actor(self, actor: Any, log_prob_name: str) -> None:
        """Read the action and log-prob keys from a probabilistic actor, as TorchRL's PPO, A2C and SAC
        do: one key each, or lists for a composite policy (one entry per head)."""
        try:
            log_prob_keys, action_keys = list(actor.log_prob_keys), list(actor.dist_sample_keys)
        except AttributeError:  # not a tdict.nn probabilistic module: keep the defaults
            return
        if len(log_prob_keys) > 1:
            self.set_keys(**{log_prob_name: log_prob_keys, "action": action_keys})
        elif log_prob_keys:
            self.set_keys(**{log_prob_name: log_prob_keys[0], "action": action_keys[0]})

    def _value_estimator_keys(self) -> dict[str, Any]:
        """The estimator keys this loss shares with its value estimator (override to add some)."""
        shared = ("advantage", "value_target", "value", "reward", "done", "terminated", "sample_log_prob")
        return {name: getattr(self.tensor_keys, name) for name in shared if name in self.default_keys}

    def _forward_value_estimator_keys(self, **kwargs: Any) -> None:
        """Give the value estimator (if built) the keys it shares with this loss, then refresh the
        loss's own in-keys (``_set_in_keys``, where a subclass defines it). TorchRL's hook: subclasses
        may override it (``kwargs`` are the keys just set)."""
        estimator = self._value_estimator
        if estimator is not None:
            keys = self._value_estimator_keys()
            if keys:
                estimator.set_keys(**keys)
        set_in_keys = getattr(self, "_set_in_keys", None)
        if callable(set_in_keys):
            set_in_keys()

    # ------------------------------------------------------------------ networks
    def convert_to_functional(
        self,
        module: nn.Module | Sequence[nn.Module],
        module_name: str,
        expand_dim: int | None = None,
        create_target_params: bool = False,
        compare_against: Iterable[nn.Parameter] | None = None,
    ) -> None:
        """Register ``module`` under ``module_name`` with its parameters (and a target copy).

        Args:
            module: the network (a TensorDictModule or any ``nn.Module`` taking a TensorDict), or a
                list of networks of one structure: an ensemble of their own parameter sets (the first
                runs the calls; ``expand_dim``, when given, must be the list's length).
            module_name: attribute name; parameters go to ``<module_name>_params``.
            expand_dim: train ``expand_dim`` parameter sets: the first is the module's own values,
                the others are re-initialised with the module's initialisers.
            create_target_params: also keep ``target_<module_name>_params`` (detached buffers).
            compare_against: parameters of another registered network (TorchRL's argument, used for
                ``separate_losses``): those ``module`` shares are trained only through that network.
                ``<module_name>_params`` holds them as detached views of that network's parameters
                (expanded over the sets of an ensemble, instead of re-initialised copies), so this
                network's losses do not train them.
        """
        given_sets = None
        if isinstance(module, (list, tuple)):
            module, given_sets, expand_dim = self._ensemble_of(module, module_name, expand_dim)
        if not isinstance(module, nn.Module):
            raise TypeError(f"{type(self).__name__}: {module_name} must be an nn.Module, got {type(module).__name__}.")
        if module_name in self._networks:
            raise ValueError(f"{type(self).__name__}: a network named {module_name!r} is already registered.")
        taken = [
            n for n in (module_name, f"{module_name}_params", f"target_{module_name}_params") if hasattr(type(self), n)
        ]
        if taken:
            raise ValueError(
                f"{type(self).__name__}: network name {module_name!r} would hide the class attribute(s) {taken}."
            )
        check_positive_int(type(self).__name__, f"expand_dim for {module_name}", expand_dim, allow_none=True)
        lazy = [name for name, p in module.named_parameters() if is_lazy(p)]
        if lazy:
            raise ValueError(
                f"{type(self).__name__}: {module_name} has uninitialized (lazy) parameters {lazy[:3]}; run it once on a "
                "sample first (e.g. `with torch.no_grad(): module(env.fake_tensordict())`) so that their shapes exist."
            )
        params = TensorDict.from_module(module, lock=False)
        others = {id(p) for p in compare_against} if compare_against is not None else set()
        shared = {k: v for k, v in params.items(True, True) if isinstance(v, nn.Parameter) and id(v) in others}
        if expand_dim is None:
            setattr(self, module_name, module)
            held = params.copy()  # the module's own tensors
        else:
            held = _expanded_params(module, params, expand_dim, given_sets)
        for key, owned in shared.items():  # not copies: detached views of the owner's parameters
            held.set(key, _shared_view(owned, expand_dim))
        params_module = TensorDictParams(held, no_convert=True)
        if expand_dim is not None:
            # the template is only a shape to swap each set into: keep it out of parameters()
            template = copy.deepcopy(module)
            TensorDict.from_module(template, lock=False).apply(lambda t: t.detach().to("meta")).to_module(
                template, return_swap=False, preserve_module_state=False
            )
            self.__dict__[module_name] = template
        setattr(self, f"{module_name}_params", params_module)
        self._networks[module_name] = expand_dim
        if shared:
            self._shared_params[module_name] = shared
        if create_target_params:
            target = self.params_of(module_name).detach().clone()
            setattr(self, f"target_{module_name}_params", TensorDictParams(target, no_convert=True))
            self._target_networks.append(module_name)

    def _ensemble_of(self, modules: Sequence[Any], module_name: str, expand_dim: int | None) -> tuple:
        """``(template, parameter sets, number of sets)`` for a list of networks given as one ensemble."""
        owner = type(self).__name__
        if not modules or not all(isinstance(m, nn.Module) for m in modules):
            raise TypeError(
                f"{owner}: {module_name} must be an nn.Module or a non-empty list of them, got {modules!r}."
            )
        if expand_dim is not None and expand_dim != len(modules):
            raise ValueError(
                f"{owner}: {module_name} is a list of {len(modules)} networks but {expand_dim} parameter sets are "
                "asked for (num_qvalue_nets or expand_dim); give as many networks as sets."
            )
        sets = [TensorDict.from_module(m, lock=False) for m in modules]
        first = {k: v.shape for k, v in sets[0].items(True, True)}
        for i, other in enumerate(sets[1:], 1):
            if {k: v.shape for k, v in other.items(True, True)} != first:
                raise ValueError(
                    f"{owner}: the networks of {module_name} must share one structure (parameter names and shapes); "
                    f"network {i} differs from network 0."
                )
        return modules[0], sets, len(modules)

    def params_of(self, module_name: str, target: bool = False) -> TensorDict:
        """The parameters of a registered network (``target=True``: its target copy)."""
        if module_name not in self._networks:
            raise KeyError(
                f"{type(self).__name__}: no network named {module_name!r}; registered: {sorted(self._networks)}."
            )
        if target and module_name not in self._target_networks:
            raise KeyError(
                f"{type(self).__name__}: {module_name!r} has no target parameters (create_target_params=False)."
            )
        return getattr(self, f"target_{module_name}_params" if target else f"{module_name}_params")._param_td

    def _detached_params(self, module_name: str) -> TensorDict:
        """:meth:`params_of` detached, for a loss term that reads a network it must not train. Made
        once and reused while the network holds the same parameter tensors (detached views share
        their storage, so in-place updates show through); callers only read it."""
        params = self.params_of(module_name)
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():  # (inference tensors: never kept)
            return params.detach()
        keys, _ = self._swap_plan(module_name)
        leaves = [params.get(k) for k in keys]
        cache = self.__dict__.setdefault("_detached_cache", {})
        held = cache.get(module_name)
        if held is None or not _still_viewing(held[0], held[1], leaves):
            detached = params.detach()
            held = cache[module_name] = (leaves, [detached.get(k) for k in keys], detached)
        return held[2]

    def _parameter_sets(self, leaves: list, kept: tuple | None) -> list:
        """An ensemble's parameter sets: ``leaves`` (stacked over the sets) unbound along their first
        dim. ``kept`` names gradient-free leaves the loss holds (``(network, "target")`` or
        ``(network, "detached")``, see :meth:`_detached_params`): their sets are unbound once and the
        views reused while the same tensors, on the same memory, come back."""
        if (
            kept is None
            or not leaves
            or torch.compiler.is_compiling()
            or torch.is_inference_mode_enabled()
            or any(map(_requires_grad, leaves))
        ):
            return list(zip(*(leaf.unbind(0) for leaf in leaves)))
        cache = self.__dict__.setdefault("_sets_cache", {})
        held = cache.get(kept)
        if held is None or not _still_viewing(held[0], held[1][0], leaves):
            held = cache[kept] = (list(leaves), list(zip(*(leaf.unbind(0) for leaf in leaves))))
        return held[1]

    def _map_sets(self, params: Any, leaves: list, swapped: Any, kept: tuple | None, looped: Any, mapped: Any) -> Any:
        """Run the parameter sets of an ensemble (``params``, its ``leaves``): each set put into the
        network in turn for ``looped()`` (up to ``_LOOP_MAX_SETS`` sets, or all with
        ``deactivate_vmap``), the results stacked; more sets map ``mapped()`` over the stacked
        leaves in one ``torch.vmap`` call."""
        if self.deactivate_vmap or params.batch_size[0] <= _LOOP_MAX_SETS:
            outs = []
            for one_set in self._parameter_sets(leaves, kept):
                with swapped(one_set):
                    outs.append(looped())
            return torch.stack(outs, 0)

        def one(*one_set: torch.Tensor) -> Any:
            with swapped(one_set):
                return mapped()

        return torch.vmap(one, (0,) * len(leaves), randomness=self.vmap_randomness)(*leaves)

    def swapped(self, module_name: str, params: Any = None, *, target: bool = False) -> "_Swapped":
        """A context manager running a registered network with ``params`` (default: its own, or
        its target copy with ``target``): ``with loss.swapped("actor_network", p): actor(td)``.

        The same as ``params.to_module(network)`` for a TensorDict shaped like :meth:`params_of`'s,
        without its bookkeeping: the network's tensor slots were located once, so entering writes
        each tensor into its slot and leaving puts the previous ones back.
        """
        if params is None:
            params = self.params_of(module_name, target)
        leaves, bind = self._binder(module_name, params)
        return bind(leaves)

    def _binder(self, module_name: str, params: Any) -> tuple:
        """``(params' leaves, bind)``: ``bind(tensors)`` is the context manager putting ``tensors``
        (those leaves, or one set of an ensemble's) into the network."""
        if torch.compiler.is_compiling():  # dynamo follows to_module's swaps, not writes into a module's dicts
            keys = list(params.keys(include_nested=True, leaves_only=True))
            module = getattr(self, module_name)
            return [params.get(k) for k in keys], lambda tensors: TensorDict(dict(zip(keys, tensors))).to_module(module)
        keys, slots = self._swap_plan(module_name)
        return [params.get(k) for k in keys], lambda tensors: _Swapped(slots, tensors)

    def _swap_plan(self, module_name: str) -> tuple:
        """``(leaf keys, slots)`` of a registered network: each key of :meth:`params_of` and the dict
        (``_parameters``, ``_buffers`` or the instance ``__dict__``) holding that tensor in the module."""
        plan = self._swap_plans.get(module_name)
        if plan is None:
            module = getattr(self, module_name)
            keys = [
                k if isinstance(k, tuple) else (k,)
                for k in self.params_of(module_name).keys(include_nested=True, leaves_only=True)
            ]
            slots = []
            for key in keys:
                owner = module
                for part in key[:-1]:
                    owner = owner._modules[part]
                name = key[-1]
                holder = next(
                    (d for d in (owner._parameters, owner._buffers, owner.__dict__) if d.get(name) is not None), None
                )
                if holder is None:
                    raise KeyError(f"{type(self).__name__}: {module_name} has no tensor at {key!r}.")
                slots.append((holder, name))
            plan = self._swap_plans[module_name] = (keys, slots)
        return plan

    def call_network(
        self,
        module_name: str,
        tensordict: Any,
        *,
        target: bool = False,
        params: Any = None,
        out_key: Any = None,
        write: bool = True,
    ) -> Any:
        """Run a registered network on ``tensordict`` with its parameters (or ``params``, a
        TensorDict shaped like :meth:`params_of`'s); ``out_key``: return only that output entry.

        An expanded network maps every parameter set over the same input; the result has a leading
        dim of size ``expand_dim``. On tensors (see below), a network of small linear layers (and
        layer norms) runs every set in one batched call (see :meth:`_stacked_sets`). Otherwise up to
        ``_LOOP_MAX_SETS`` sets run one after the other (cheaper than ``torch.vmap``'s set-up for
        twin critics); more run as one vmapped call, unless ``deactivate_vmap`` is set (then they
        all run in the loop).

        With ``out_key``, a network whose call is its module's on tensors (a plain
        ``TensorDictModule`` or ``ValueOperator``: see ``TensorDictModule.tensor_function``) runs on
        the input tensors directly; a single network still writes its outputs into ``tensordict``
        as its call would, unless ``write=False`` (its TensorDict call then runs on a copy holding
        only its in-keys). An ensemble never writes into ``tensordict``.
        """
        params, kept = self._params_and_kept(module_name, target, params)
        module = getattr(self, module_name)
        one_set = self._networks[module_name] is None
        plan = None if out_key is None else _tensor_plan(module, tensordict, out_key, write=one_set and write)
        if plan is not None:  # on tensors
            call, index, writes, inputs = plan
            if writes is None:
                # every set at once: the same output on inputs with one more leading (batch) dim
                found = None if one_set else self._tensor_network(module_name, out_key, tensordict.batch_dims + 1)
                stacked = None if found is None else (found[1], inputs)
                return self._with_params(module_name, params, kept, lambda: call()[index], stacked)
            values = self._with_params(module_name, params, kept, call)
            writes(values)
            return values[index]
        leaves, swapped = self._binder(module_name, params)

        def run(td: Any) -> Any:
            out = module(td)
            if out_key is None:
                return out
            value = out.get(out_key, None)
            if value is None:
                raise KeyError(
                    f"{type(self).__name__}: {module_name} wrote no {out_key!r}; its output holds "
                    f"{sorted(map(str, out.keys(True, True)))} (set_keys(...) makes the loss read another entry)."
                )
            return value

        if one_set:
            source = tensordict if write else tensordict.select(*module.in_keys, strict=False)
            with swapped(leaves):
                return module(source) if out_key is None else run(source)
        work = tensordict.copy()  # one working copy for the loop: each set's outputs are read before the next writes

        def looped() -> Any:
            out = run(work)
            return out.copy() if out_key is None else out

        return self._map_sets(params, leaves, swapped, kept, looped, lambda: run(tensordict.copy()))

    def _params_and_kept(self, module_name: str, target: bool, params: Any) -> tuple:
        """``(params, kept)``: the parameters a call runs with (``params``, else the network's own or
        its target copy) and, for the gradient-free ones the loss holds, the key under which their
        unbound sets are kept (see :meth:`_parameter_sets`)."""
        if params is None:
            return self.params_of(module_name, target), ((module_name, "target") if target else None)
        held = self.__dict__.get("_detached_cache", {}).get(module_name)
        return params, ((module_name, "detached") if held is not None and params is held[2] else None)

    def _with_params(self, module_name: str, params: Any, kept: tuple | None, call: Any, stacked: Any = None) -> Any:
        """``call()`` run with ``params`` in the network: once for a single network, once per set
        for an ensemble (results stacked on a new leading dim, see :meth:`_map_sets`).

        ``stacked``: ``(f, inputs)``, the same call on tensors with every set at once: ``f`` takes
        the inputs with a leading dim of the sets (see :meth:`_stacked_sets`)."""
        leaves, swapped = self._binder(module_name, params)
        if self._networks[module_name] is None:
            with swapped(leaves):
                return call()

        def loop() -> Any:
            return self._map_sets(params, leaves, swapped, kept, call, call)

        return loop() if stacked is None else self._stacked_sets(module_name, leaves, stacked, loop)

    def _stacked_sets(self, module_name: str, leaves: list, stacked: tuple, loop: Callable[[], Any]) -> Any:
        """An ensemble's sets run as one batched call when its parameters all live in plain linear
        layers and layer norms small enough for it to pay off (see :mod:`.stacked_ensemble`), else
        ``loop()``. The first call with a new input signature probes both ways (without gradients):
        the batched call serves that signature only if it gave the loop's values, so one signature
        always gets the same path. The signature holds the inputs' shapes, dtypes and devices, and
        the network's training mode. ``deactivate_vmap``, compiling and ``torch.func`` transforms
        keep the loop."""
        if self.deactivate_vmap or not leaves or torch.compiler.is_compiling() or transformed():
            return loop()
        stacks = self.__dict__.setdefault("_linear_stacks", {})
        if module_name not in stacks:
            stacks[module_name] = LinearStack.of(getattr(self, module_name), self._swap_plan(module_name)[1])
        stack = stacks[module_name]
        if stack is None or not stack.intact():
            return loop()
        call, inputs = stacked
        first = leaves[0]
        # (training mode too: a random layer probed in eval mode would draw in train mode)
        network = getattr(self, module_name)
        signature = (module_name, network.training, first.dtype, first.device)
        signature += tuple((x.shape, x.dtype, x.device) for x in inputs)
        verdicts = self.__dict__.setdefault("_stack_verdicts", {})
        verdict = verdicts.get(signature)
        if verdict is None:
            if len(verdicts) >= _MAX_STACK_VERDICTS:
                verdicts.clear()
            verdict = verdicts[signature] = stack.pays_off(leaves, inputs) and stack.probe(leaves, call, inputs, loop)
        return stack.run(leaves, call, inputs) if verdict else loop()

    def _tensor_network(self, module_name: str, out_key: Any, batch_dims: int) -> tuple | None:
        """``(in_keys, f)``: the registered network's ``out_key`` output as a function of its in-key
        tensors, ``f(*inputs)`` (run it under :meth:`_with_params`). ``None`` when the network has no
        tensor function (see ``TensorDictModule.tensor_function``) or does not write ``out_key``."""
        module = getattr(self, module_name)
        found = _tensor_function(module, out_key, batch_dims)
        if found is None:
            return None
        run, index = found
        return tuple(module.in_keys), lambda *inputs: run(*inputs)[index]

    def _no_updater_message(self) -> str:
        return (
            f"No target network updater has been associated with this loss module ({type(self).__name__}), yet it "
            f"reads the target parameters of {self._target_networks}: they stay as they are unless you update "
            "them yourself. Build SoftUpdate(loss, tau=...) or HardUpdate(loss, value_network_update_interval=...) "
            "and call its step() after each optimizer step (or filter this UserWarning when the targets are "
            "updated by hand)."
        )

    def get_stateful_net(self, network_name: str, copy: bool | None = None) -> nn.Module:
        """The registered network holding this loss's parameters of it, e.g. to initialise them by hand.

        ``copy`` (default ``True``): a deep copy of the network into which the loss's parameter
        tensors are put (writing into them writes into the loss; assigning new ones does not: see
        :meth:`from_stateful_net`). ``copy=False``: the registered network itself. An ensemble's
        network holds the stacked sets, to be called through ``torch.vmap``.

        Examples:
            >>> import torch
            >>> from torch import nn
            >>> from tdict.nn import TensorDictModule
            >>> from rl_objectives import LossModule
            >>> class L(LossModule):
            ...     def __init__(self, net):
            ...         super().__init__()
            ...         self.convert_to_functional(net, "net")
            >>> loss = L(TensorDictModule(nn.Linear(2, 1), in_keys=["x"], out_keys=["y"]))
            >>> net = loss.get_stateful_net("net")
            >>> net.module.weight = nn.Parameter(torch.ones(1, 2))
            >>> _ = loss.from_stateful_net("net", net)
            >>> loss.params_of("net")["module", "weight"].tolist()
            [[1.0, 1.0]]
        """
        params = self.params_of(network_name)  # checks the name
        net = getattr(self, network_name)
        if copy is False and self._networks[network_name] is None:
            return net  # it holds its own parameters already
        if copy is not False:
            net = _deepcopy(net)  # (the argument ``copy`` hides the module)
        params.to_module(net, return_swap=False, preserve_module_state=False)
        return net

    @torch.no_grad()
    def from_stateful_net(self, network_name: str, stateful_net: nn.Module) -> "LossModule":
        """Copy the parameters of ``stateful_net`` (a network of the same structure, such as one from
        :meth:`get_stateful_net`) into this loss's parameters of ``network_name``, in place; returns ``self``.

        The entries shared with another network (``compare_against``) belong to that network and
        are left to it.

        Raises:
            KeyError: the two hold different parameter names (both differences are listed).
        """
        shared = list(self._shared_params.get(network_name, ()))
        mine = self.params_of(network_name).exclude(*shared)
        given = TensorDict.from_module(stateful_net, lock=False).exclude(*shared)
        ours, theirs = set(mine.keys(True, True)), set(given.keys(True, True))
        if ours != theirs:
            raise KeyError(
                f"{type(self).__name__}.from_stateful_net: {network_name} holds {sorted(map(str, ours - theirs))} that "
                f"the module lacks, and the module holds {sorted(map(str, theirs - ours))} that {network_name} lacks."
            )
        mine.update_(given)
        return self

    def reset_parameters_recursive(self) -> None:
        """Re-initialise every registered network's parameters, each set of an ensemble and the target
        copies included, in place (with each submodule's ``reset_parameters``).

        Examples:
            >>> import torch
            >>> from torch import nn
            >>> from tdict.nn import TensorDictModule
            >>> from rl_objectives import LossModule
            >>> class L(LossModule):
            ...     def __init__(self, net):
            ...         super().__init__()
            ...         self.convert_to_functional(net, "net", create_target_params=True)
            >>> loss = L(TensorDictModule(nn.Linear(2, 1), in_keys=["x"], out_keys=["y"]))
            >>> with torch.no_grad():
            ...     _ = loss.net.module.weight.fill_(1000.0)
            >>> loss.reset_parameters_recursive()
            >>> bool((loss.net.module.weight.abs() < 1000).all())
            True
        """
        with torch.no_grad():
            for name, sets in self._networks.items():
                module = getattr(self, name)
                holders = [getattr(self, f"{name}_params")._param_td]
                if name in self._target_networks:
                    holders.append(getattr(self, f"target_{name}_params")._param_td)
                shared = list(self._shared_params.get(name, ()))
                for holder in holders:
                    if shared:  # the owner's parameters, reset with the owner
                        holder = holder.exclude(*shared)
                    for one_set in [holder] if sets is None else holder.unbind(0):
                        one_set.update_(_reset_copy(module, one_set))

    @property
    def target_networks(self) -> list[str]:
        """Names of the networks that have target parameters (what the target updaters move)."""
        return list(self._target_networks)

    # ------------------------------------------------------------------ value estimator
    @property
    def value_estimator(self) -> Any:
        """The value estimator; built with the defaults the first time it is needed."""
        if self._value_estimator is None:
            if self.default_value_estimator is None:
                raise RuntimeError(f"{type(self).__name__} uses no value estimator.")
            self.make_value_estimator(self.default_value_estimator)
        return self._value_estimator

    @value_estimator.setter
    def value_estimator(self, estimator: Any) -> None:
        self._value_estimator = estimator
        if estimator is not None:
            self._forward_value_estimator_keys()

    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> "LossModule":
        """Build the value estimator of kind ``value_type`` (``None``: the loss's default)."""
        raise NotImplementedError(f"{type(self).__name__} does not use a value estimator.")

    def _resolve_value_type(self, value_type: Any) -> Any:
        """``value_type`` (``None``: :attr:`default_value_estimator`) as a ``ValueEstimators`` member."""
        from ..value import ValueEstimators  # local: the value package imports the losses' helpers

        if value_type is None:
            value_type = self.default_value_estimator
        try:
            return ValueEstimators(value_type)
        except ValueError:
            raise ValueError(
                f"{type(self).__name__}.make_value_estimator: unknown value_type {value_type!r}; "
                f"accepted: {[m.value for m in ValueEstimators]}."
            ) from None

    def _build_value_estimator(
        self, value_type: Any, hyperparams: Mapping[str, Any], accepted: tuple, **networks: Any
    ) -> Any:
        """The one estimator factory of the losses: the estimator of kind ``value_type`` (``None``:
        :attr:`default_value_estimator`; one of ``accepted``) on ``networks`` (``value_network=``,
        and ``actor_network=`` for V-trace), its discount and lambda defaulting to
        :attr:`default_value_kwargs` (the deprecated constructor ``gamma`` first), overridden by
        ``hyperparams``. Installs it as :attr:`value_estimator` and returns it.

        Raises:
            ValueError: an unknown ``value_type``, or ``hyperparams`` naming one of ``networks``.
            NotImplementedError: a kind this loss does not accept.
        """
        from ..value import VTrace
        from ..value.base import ValueEstimatorBase
        from ..value.registry import get_value_estimator_entry

        owner = type(self).__name__
        if isinstance(value_type, ValueEstimatorBase) or (
            isinstance(value_type, type) and issubclass(value_type, ValueEstimatorBase)
        ):
            return self._use_value_estimator(value_type, hyperparams, networks, VTrace)
        value_type = self._resolve_value_type(value_type)
        if value_type not in accepted:
            raise NotImplementedError(
                f"{owner}: value_type {value_type.value!r} is not implemented for this loss; "
                f"use one of {[m.value for m in accepted]}."
            )
        entry = get_value_estimator_entry(value_type)
        kwargs = self._value_kwargs(hyperparams, tuple(entry.default_kwargs))
        clash = sorted(set(kwargs) & set(networks))
        if clash:
            raise ValueError(f"{owner}.make_value_estimator: {clash} is set by the loss, not by the caller.")
        if not issubclass(entry.cls, VTrace):
            networks.pop("actor_network", None)
        estimator = entry.cls(**networks, **kwargs)
        self.value_estimator = estimator
        self.value_type = value_type
        return estimator

    def _use_value_estimator(self, estimator: Any, hyperparams: Mapping[str, Any], networks: dict, vtrace: type) -> Any:
        """TorchRL's other spellings of ``make_value_estimator``: an estimator instance, used as it
        is, or an estimator class, built with the loss's networks, its default discount and lambda
        and the loss's device, overridden by ``hyperparams``. ``value_type`` becomes the class."""
        owner = type(self).__name__
        if not isinstance(estimator, type):
            if hyperparams:
                raise ValueError(
                    f"{owner}.make_value_estimator: an estimator instance takes no keyword arguments, got {sorted(hyperparams)}."
                )
            cls = type(estimator)
        else:
            cls = estimator
            accepted = inspect.signature(cls.__init__).parameters
            kwargs = {k: v for k, v in networks.items() if k in accepted and (k != "actor_network" or cls is vtrace)}
            kwargs.update(self._value_kwargs({}, tuple(name for name in ("gamma", "lmbda") if name in accepted)))
            device = next((p.device for p in self.parameters()), None)
            if device is not None and "device" not in hyperparams:
                kwargs["device"] = device
            kwargs.update(hyperparams)
            estimator = cls(**kwargs)
        self.value_estimator = estimator
        self.value_type = cls
        return estimator

    def _value_kwargs(self, hyperparams: Mapping[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
        """``default_value_kwargs`` (the deprecated constructor ``gamma`` first) overridden by
        ``hyperparams``, restricted to what the estimator takes."""
        defaults = dict(self.default_value_kwargs)
        if self._ctor_gamma is not None:
            defaults["gamma"] = self._ctor_gamma
        kwargs = {k: v for k, v in defaults.items() if k in allowed}
        kwargs.update(hyperparams)
        return kwargs

    def forward(self, tensordict: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


def _still_viewing(held: list, views: Sequence[torch.Tensor], leaves: list) -> bool:
    """Whether ``views`` (one per tensor of ``held``, starting at its data) still view ``leaves``: the
    same tensor objects, on the same memory (``module.to()`` or ``.double()`` may give a parameter new
    data under the same object; the views keep the old memory alive, so an address cannot repeat)."""
    # (map over C functions: no Python frame per tensor on this per-call path)
    return (
        len(held) == len(leaves)
        and all(map(operator.is_, held, leaves))
        and list(map(_data_ptr, views)) == list(map(_data_ptr, leaves))
    )


def _tensor_function(module: Any, out_key: Any, batch_dims: int) -> tuple | None:
    """``(run, index)``: ``module``'s tensor function (``TensorDictModule.tensor_function``) and the
    position of ``out_key`` among its outputs; ``None`` when it has none or does not write ``out_key``."""
    tensor_function = getattr(module, "tensor_function", None)
    run = None if tensor_function is None else tensor_function(batch_dims)
    if run is None:
        return None
    keys = module.out_keys_source
    return None if out_key not in keys else (run, keys.index(out_key))


def _tensor_plan(module: Any, tensordict: Any, out_key: Any, write: bool) -> tuple | None:
    """``(call, index, writes, inputs)`` to run ``module`` on ``tensordict``'s tensors (``inputs``):
    ``call()`` gives its outputs, ``out_key`` is at ``index``, and ``writes`` (with ``write``, for a
    module writing into its input) puts them into ``tensordict`` as its call would. ``None`` when the
    module has no tensor function (see ``TensorDictModule.tensor_function``), does not write
    ``out_key``, or an input is missing or not a plain tensor: the TensorDict call then runs (and
    reports)."""
    found = _tensor_function(module, out_key, tensordict.batch_dims)
    if found is None or (write and module.inplace is None):  # (a sequence returning what its steps wrote)
        return None
    run, index = found
    inputs = _plain_tensors(tensordict, module.in_keys)
    if inputs is None:
        return None
    keys = module.out_keys_source

    def writes(values: tuple) -> None:
        for key, value in zip(keys, values):
            if key != "_":
                tensordict.set(key, value)

    return (lambda: run(*inputs)), index, (writes if write and module.inplace is True else None), inputs


def _plain_tensors(tensordict: Any, keys: Sequence[Any]) -> list | None:
    """The entries ``keys`` of ``tensordict``; ``None`` when one is missing or not a plain tensor."""
    values = []
    for key in keys:
        value = tensordict.get(key, None)
        if type(value) is not torch.Tensor:
            return None
        values.append(value)
    return values


class _Swapped:
    """Writes tensors into a module's slots on entering, puts the previous ones back on leaving
    (see :meth:`LossModule.swapped`). The dicts keep their keys and order: only values change."""

    __slots__ = ("_slots", "_tensors", "_previous")

    def __init__(self, slots: list, tensors: Sequence[torch.Tensor]) -> None:
        self._slots, self._tensors = slots, tensors

    def __enter__(self) -> "_Swapped":
        self._previous = [holder[name] for holder, name in self._slots]
        for (holder, name), tensor in zip(self._slots, self._tensors):
            holder[name] = tensor
        return self

    def __exit__(self, *exc: Any) -> None:
        for (holder, name), tensor in zip(self._slots, self._previous):
            holder[name] = tensor


def _shared_view(owned: nn.Parameter, sets: int | None) -> torch.Tensor:
    """A network's view of a parameter another network trains: detached (expanded over the sets of
    an ensemble), so that it follows the owner's updates and this network's losses leave it alone."""
    view = owned.detach()
    return view if sets is None else view.expand(sets, *owned.shape)


def _drop_shared_entries(loss: LossModule, state_dict: dict, prefix: str, *args: Any) -> None:
    for name in loss._shared_entries(prefix):
        state_dict.pop(name, None)


def _forgive_shared_entries(loss: nn.Module, incompatible: Any) -> None:
    entries = loss._shared_entries() if isinstance(loss, LossModule) else []
    if entries:  # the missing keys carry the prefix of any module holding the loss
        missing = incompatible.missing_keys
        missing[:] = [k for k in missing if not any(k == e or k.endswith("." + e) for e in entries)]


def _reset_copy(module: nn.Module, params: TensorDictBase) -> TensorDictBase:
    """A copy of ``params`` re-initialised by ``module``'s submodules (``reset_parameters``)."""
    if isinstance(module, TensorDictModuleBase):
        return module.reset_parameters_recursive(params.detach().clone())
    fresh = params.detach().clone()
    with fresh.to_module(module, preserve_module_state=False):
        for sub in module.modules():
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()
    return fresh


def _expanded_params(
    module: nn.Module, params: TensorDict, expand_dim: int, given_sets: list | None = None
) -> TensorDictBase:
    """``expand_dim`` parameter sets stacked on dim 0: the module's values, then fresh draws (or
    copies of ``given_sets``, the parameters of a list of networks)."""
    if given_sets is not None:
        sets = [p.detach().clone() for p in given_sets]
    elif not isinstance(module, TensorDictModuleBase):
        raise TypeError(
            f"expand_dim needs a TensorDictModule (to re-initialise each set), got {type(module).__name__}."
        )
    else:
        sets = [params.detach().clone()]
        for _ in range(expand_dim - 1):
            sets.append(module.reset_parameters_recursive(params.detach().clone()))
    # the module's parameters become trainable sets; its buffers (a batch norm's running statistics)
    # stay buffers, one per set, updated in place by the forward pass of their set
    is_param = {k for k, v in params.items(True, True) if isinstance(v, nn.Parameter)}
    stacked = tdict.stack(sets, 0)
    for key, value in list(stacked.items(True, True)):
        stacked.set(key, nn.Parameter(value) if key in is_param else value.detach())
    return stacked
