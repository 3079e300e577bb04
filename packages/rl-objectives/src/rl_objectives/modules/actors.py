"""Actors and critics: TensorDict modules that read observations and write actions or values.

Names, arguments and default keys follow torchrl.modules (0.14). The design differences:

- :class:`ValueOperator` squeezes a 1-wide head: ``"state_value"`` has the batch shape ``[*B]``, not
  ``[*B, 1]`` (a wider head, e.g. a multi-objective value, is left as is).
- :class:`QValueModule` writes ``"chosen_action_value"`` with the batch shape (no trailing 1).
- ``safe=True`` projects into the spec the value that is written; a probabilistic actor's log-prob
  is the log-prob of that written (projected) action, so a loss recomputing it gets the same number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tdict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
    dispatch,
)
from tdict import NestedKey, unravel_key
from tdict.specs import Binary, Categorical, Composite, MultiOneHot, OneHot
from tdict.validation import check_one_of

__all__ = [
    "Actor",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "SafeModule",
    "SafeProbabilisticModule",
    "ValueOperator",
]


def _as_key_list(keys: Any, default: list, what: str) -> list:
    if keys is None:
        return list(default)
    if isinstance(keys, (str, tuple)):
        return [keys]
    if not isinstance(keys, Sequence):
        raise ValueError(f"{what} must be a key or a list of keys, got {keys!r}.")
    return list(keys)


def _composite_sample_keys(distribution_kwargs: Any) -> list:
    """A CompositeDistribution actor's default out-keys: ``name_map``'s values, else ``distribution_map``'s keys."""
    name_map = distribution_kwargs.get("name_map")
    if name_map:
        return list(name_map.values())
    distribution_map = distribution_kwargs.get("distribution_map")
    if distribution_map is None:
        raise KeyError(
            "ProbabilisticActor: distribution_kwargs must hold 'distribution_map' when distribution_class is "
            f"CompositeDistribution and out_keys is not given; got distribution_kwargs keys {sorted(distribution_kwargs)}."
        )
    return list(distribution_map.keys())


def _as_composite(spec: Any, key: NestedKey, what: str) -> Composite | None:
    """``spec`` as a Composite: a leaf spec is placed under ``key`` (the module's action key)."""
    if spec is None or isinstance(spec, Composite):
        return spec
    if not getattr(type(spec), "_is_spec", False):
        raise TypeError(f"{what}: spec must be a TensorSpec or a Composite, got {type(spec).__name__}.")
    return Composite({key: spec})


def _projector(spec: Any) -> Any:
    # spec.project validates first (a per-call check, and a data-dependent branch torch.compile cannot
    # trace); a leaf spec's _project leaves values already inside unchanged, so the hot path calls it directly
    fn = getattr(spec, "_project", None)
    return fn if fn is not None else spec.project


def _spec_items(spec: Composite | None, keys: list) -> tuple:
    """``(key, projection)`` for each written key the spec describes: the projection plan of ``safe``."""
    if spec is None:
        return ()
    return tuple((key, _projector(spec.get(key))) for key in keys if key != "_" and key in spec)


def _project_hook(module: SafeModule, args: tuple, output: Any) -> Any:
    # runs after forward when safe=True: every written key the spec describes is projected into it
    plan = module._safe_plan
    if getattr(type(output), "_is_tensor_collection", False):
        for key, project in plan:
            output.set(key, project(output.get(key)))
        return output
    keys = [key for key in module.out_keys if key != "_"]
    values = output if isinstance(output, tuple) else (output,)
    specs = dict(plan)
    projected = tuple(specs[key](v) if key in specs else v for key, v in zip(keys, values))
    return projected if isinstance(output, tuple) else projected[0]


class SafeModule(TensorDictModule):
    """A :class:`~tdict.nn.TensorDictModule` that carries the spec of its outputs.

    Args:
        module, in_keys, out_keys: as in :class:`~tdict.nn.TensorDictModule`.
        spec: a :class:`~tdict.specs.Composite` describing the out-keys, or a leaf spec (placed under
            the first out-key).
        safe: project every written out-key that the spec describes into it (``spec.project``).
        **kwargs: more :class:`~tdict.nn.TensorDictModule` keyword arguments (TorchRL's ``inplace``:
            ``False`` writes into a new TensorDict, ``"empty"`` into ``input.empty()``).

    Raises:
        ValueError: when ``safe=True`` without a ``spec``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import SafeModule
        >>> m = SafeModule(lambda x: 3 * x, in_keys=["x"], out_keys=["y"], spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> m(TensorDict(x=torch.tensor([0.1, 0.5])))["y"]
        tensor([0.3000, 1.0000])
    """

    def __init__(
        self, module: Any, in_keys: Any, out_keys: Any, *, spec: Any = None, safe: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, **kwargs)
        if safe and spec is None:
            raise ValueError(
                f"{type(self).__name__}: safe=True needs a spec to project the outputs into, got spec=None."
            )
        self._spec = _as_composite(spec, self.out_keys[0], type(self).__name__)
        self.safe = bool(safe)
        self._safe_plan = _spec_items(self._spec, self.out_keys)
        if self.safe:
            self.register_forward_hook(_project_hook)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec of the out-keys (``None`` when none was given)."""
        return self._spec


class Actor(SafeModule):
    """A deterministic policy: ``module(observation) -> action`` (torchrl.modules.Actor).

    Args:
        module: the network (or a callable) computing the action.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).
        spec: the action spec; a leaf spec becomes ``Composite({out_keys[0]: spec})``.
        safe: project the action into ``spec``.
        **kwargs: more :class:`~tdict.nn.TensorDictModule` keyword arguments.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import Actor
        >>> actor = Actor(torch.nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)))
        >>> actor(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))["action"].shape
        torch.Size([4, 2])
        >>> list(actor.spec.keys())
        ['action']
    """

    def __init__(
        self,
        module: Any,
        in_keys: Any = None,
        out_keys: Any = None,
        *,
        spec: Any = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        in_keys = _as_key_list(in_keys, ["observation"], "Actor: in_keys")
        out_keys = _as_key_list(out_keys, ["action"], "Actor: out_keys")
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, spec=spec, safe=safe, **kwargs)


class SafeProbabilisticModule(ProbabilisticTensorDictModule):
    """A :class:`~tdict.nn.ProbabilisticTensorDictModule` that carries the spec of its sample.

    With ``safe=True`` the sample is projected into the spec before it is written, and the log-prob
    (``return_log_prob=True``) is computed on the projected value.

    Args:
        in_keys, out_keys: as in :class:`~tdict.nn.ProbabilisticTensorDictModule` (``out_keys``
            default ``["action"]``).
        spec: a Composite describing the sample keys, or a leaf spec (placed under the first out-key).
        safe: project the sample into ``spec``.
        **kwargs: every argument of :class:`~tdict.nn.ProbabilisticTensorDictModule`
            (``distribution_class``, ``distribution_kwargs``, ``return_log_prob``,
            ``default_interaction_type``, ``log_prob_key``, ``log_prob_keys``, ``cache_dist``,
            ``n_empirical_estimate``, ``num_samples``, ``generator``), as TorchRL's signature lists them.

    Raises:
        ValueError: when ``safe=True`` without a ``spec``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import SafeProbabilisticModule
        >>> m = SafeProbabilisticModule(in_keys=["loc", "scale"], spec=Bounded(-1.0, 1.0, shape=(1,)), safe=True)
        >>> m(TensorDict(loc=torch.full((1,), 5.0), scale=torch.ones(1)))["action"]
        tensor([1.])
    """

    def __init__(
        self, in_keys: Any, out_keys: Any = None, *, spec: Any = None, safe: bool = False, **kwargs: Any
    ) -> None:
        out_keys = _as_key_list(out_keys, ["action"], f"{type(self).__name__}: out_keys")
        super().__init__(in_keys=in_keys, out_keys=out_keys, **kwargs)
        if safe and spec is None:
            raise ValueError(
                f"{type(self).__name__}: safe=True needs a spec to project the sample into, got spec=None."
            )
        self._spec = _as_composite(
            spec,
            self.dist_sample_keys[0] if self.dist_sample_keys else out_keys[0],
            type(self).__name__,
        )
        self.safe = bool(safe)
        self._safe_plan = _spec_items(self._spec, self.dist_sample_keys)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec of the sample keys (``None`` when none was given)."""
        return self._spec

    def _process_sample(self, sample: Any) -> Any:
        # safe=True: the written value is the projected one, and its log-prob is computed on it
        if not self.safe:
            return sample
        if getattr(type(sample), "_is_tensor_collection", False):  # a CompositeDistribution's sample
            for key, project in self._safe_plan:
                if key in sample.keys(True):
                    sample.set(key, project(sample.get(key)))
            return sample
        values = [sample] if isinstance(sample, torch.Tensor) else list(sample)
        specs = dict(self._safe_plan)
        projected = [specs[key](v) if key in specs else v for key, v in zip(self._sample_keys, values)]
        return projected[0] if isinstance(sample, torch.Tensor) else tuple(projected)


class ProbabilisticActor(ProbabilisticTensorDictSequential):
    """A stochastic policy: a module writes distribution parameters, then an action is drawn.

    ``ProbabilisticActor(module, in_keys, ...)`` is
    ``ProbabilisticTensorDictSequential(module, SafeProbabilisticModule(in_keys, out_keys, ...))``.
    What is written depends on the interaction type (:func:`tdict.nn.set_interaction_type`):
    ``RANDOM`` samples, ``DETERMINISTIC`` writes the distribution's ``deterministic_sample`` (the mode
    or mean), and with none set ``default_interaction_type`` (``DETERMINISTIC``) applies.

    Args:
        module: a TensorDict module writing the distribution parameters (e.g. ``"loc"``, ``"scale"``).
        in_keys: the parameter keys: a list, or a dict ``{argument name: key}``.
        out_keys: the sample keys (default ``["action"]``; for a
            :class:`~tdict.nn.CompositeDistribution`, ``name_map``'s values, else ``distribution_map``'s keys,
            as in TorchRL).
        spec: the action spec; a leaf spec becomes ``Composite({out_keys[0]: spec})``.
        safe: project the sample into ``spec`` (before computing its log-prob).
        distribution_class: the distribution (default ``torch.distributions.Normal``).
        distribution_kwargs: constant keyword arguments of ``distribution_class`` (e.g. ``low``/``high``).
        return_log_prob: also write the log-prob (batch shape) at ``log_prob_key`` (derived from the
            action key as in TorchRL 0.14: ``"action_log_prob"`` for ``"action"``).
        log_prob_key, log_prob_keys: where the log-prob(s) go; ``None`` (default) derives them from the
            sample keys (read back with :attr:`log_prob_key` / :attr:`log_prob_keys`).
        default_interaction_type: used when no interaction type is set.
        **kwargs: more :class:`~tdict.nn.ProbabilisticTensorDictModule` keyword arguments.

    Raises:
        TypeError: when ``module`` is not a TensorDict module.
        KeyError: a CompositeDistribution without ``out_keys`` nor ``distribution_map``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, NormalParamExtractor, set_interaction_type
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.modules import ProbabilisticActor, TanhNormal
        >>> net = TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                        in_keys=["observation"], out_keys=["loc", "scale"])
        >>> actor = ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal,
        ...                            spec=Bounded(-1.0, 1.0, shape=(2,)), return_log_prob=True)
        >>> with set_interaction_type("random"):
        ...     td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
        >>> actor.log_prob_keys, actor.log_prob_key
        (['action_log_prob'], 'action_log_prob')
    """

    def __init__(
        self, module: Any, in_keys: Any, out_keys: Any = None, *, spec: Any = None, safe: bool = False, **kwargs: Any
    ) -> None:
        if not TensorDictModuleBase.is_tdmodule_compatible(module):
            raise TypeError(
                f"ProbabilisticActor: module must be a TensorDict module (with in_keys and out_keys) writing the "
                f"distribution parameters, got {type(module).__name__}; wrap it in tdict.nn.TensorDictModule."
            )
        if out_keys is None and kwargs.get("distribution_class") is CompositeDistribution:
            # TorchRL's default for a CompositeDistribution: its sample keys, not ["action"]
            out_keys = _composite_sample_keys(kwargs.get("distribution_kwargs") or {})
        prob = SafeProbabilisticModule(in_keys=in_keys, out_keys=out_keys, spec=spec, safe=safe, **kwargs)
        super().__init__(module, prob)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec of the action (``None`` when none was given)."""
        return self[-1].spec


class ValueOperator(TensorDictModule):
    """A critic: ``module(observation[, action]) -> value`` (torchrl.modules.ValueOperator).

    The value keys default to ``["state_value"]``, or ``["state_action_value"]`` when ``"action"`` is an
    in-key. Design rule (a difference from TorchRL): a 1-wide head is squeezed, so a network ending in
    ``nn.Linear(h, 1)`` gives a ``state_value`` of the batch shape ``[*B]``, not ``[*B, 1]``. Only a last
    dim of size 1 that is not a batch dim is squeezed; a wider head (``[*B, K]``) is left as is.

    Args:
        module: the network; several in-keys are passed as several positional inputs (:class:`MLP`
            concatenates them).
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default: see above).
        **kwargs: more :class:`~tdict.nn.TensorDictModule` keyword arguments.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules import MLP, ValueOperator
        >>> critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[8]))
        >>> critic(TensorDict(observation=torch.zeros(2, 5, 3), batch_size=[2, 5]))["state_value"].shape
        torch.Size([2, 5])
        >>> qnet = ValueOperator(MLP(in_features=5, out_features=1, num_cells=[8]), in_keys=["observation", "action"])
        >>> qnet.out_keys
        ['state_action_value']
    """

    def __init__(self, module: Any, in_keys: Any = None, out_keys: Any = None, **kwargs: Any) -> None:
        in_keys = _as_key_list(in_keys, ["observation"], "ValueOperator: in_keys")
        if out_keys is None:
            out_keys = ["state_action_value"] if "action" in in_keys else ["state_value"]
        out_keys = _as_key_list(out_keys, [], "ValueOperator: out_keys")
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, **kwargs)

    def _keys_changed(self) -> None:
        super()._keys_changed()
        self.__dict__["_value_keys"] = tuple(key for key in self.out_keys if key != "_")

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, *args: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
        batch_dims = tensordict.batch_dims
        out = TensorDictModule.forward(self, tensordict, *args, tensordict_out=tensordict_out, **kwargs)
        for key in self._value_keys:
            value = out.get(key)
            if value.ndim > batch_dims and value.shape[-1] == 1:  # a 1-wide head, not a batch dim
                out.set(key, value.squeeze(-1))
        return out

    def tensor_function(self, batch_dims: int = 0) -> Callable[..., tuple] | None:
        """:meth:`TensorDictModule.tensor_function <tdict.nn.TensorDictModule.tensor_function>`
        with this critic's squeeze of 1-wide heads (beyond ``batch_dims``)."""
        cls = type(self)
        if cls.forward is not ValueOperator.forward and cls.tensor_function is ValueOperator.tensor_function:
            return None
        run = super().tensor_function(batch_dims)
        if run is None:
            return None
        compiling = torch.compiler.is_compiling()  # (nothing kept while tracing)
        held = None if compiling else self.__dict__.get("_squeezing")  # made once per (module function, batch dims)
        if held is not None and held[0] is run and held[1] == batch_dims:
            return held[2]
        squeezed = tuple(key != "_" for key in self.out_keys_source)

        def values(*inputs: torch.Tensor) -> tuple:
            return tuple(
                v.squeeze(-1) if wanted and v.ndim > batch_dims and v.shape[-1] == 1 else v
                for wanted, v in zip(squeezed, run(*inputs))
            )

        if not compiling:
            self.__dict__["_squeezing"] = (run, batch_dims, values)
        return values

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_squeezing", None)  # a closure over this object: copies make their own
        return state


_ACTION_SPACES = ("one_hot", "categorical", "mult_one_hot", "binary")


def _space_of_spec(spec: Any) -> str:
    for cls, space in (
        (OneHot, "one_hot"),
        (MultiOneHot, "mult_one_hot"),
        (Categorical, "categorical"),
        (Binary, "binary"),
    ):
        if isinstance(spec, cls):
            return space
    raise ValueError(
        f"QValueModule: cannot infer the action space from a {type(spec).__name__} spec; expected OneHot, Categorical or MultiOneHot."
    )


class QValueModule(TensorDictModuleBase):
    """Greedy actions from action values (torchrl.modules.QValueModule).

    Reads ``action_value_key`` (``[*B, n]``) and writes the greedy ``"action"``, the action values and
    ``"chosen_action_value"`` (the value of the greedy action, batch shape ``[*B]``: no trailing 1).

    Action spaces: ``"one_hot"`` (one-hot of the argmax), ``"categorical"`` (the argmax index) and
    ``"mult_one_hot"`` (the last dim is split in chunks of ``var_nums``, one one-hot per chunk, the
    chosen value is the sum over chunks). ``"binary"`` raises ``NotImplementedError``.

    Args:
        action_space: one of the above, or inferred from ``spec`` (a TensorSpec may also be given here).
        action_value_key: where the action values are read (default ``"action_value"``).
        action_mask_key: optional key of a boolean mask (``True`` = allowed) excluded from the argmax.
        out_keys: the three keys written (default ``["action", action_value_key, "chosen_action_value"]``).
        var_nums: chunk sizes for ``"mult_one_hot"`` (taken from a ``MultiOneHot`` spec's ``nvec``).
        spec: the action spec; when given, the action has its dtype (e.g. bool for ``OneHot``), else ``int64``.
        safe: project the action into ``spec``.
        strict_shape: TorchRL's check of the action's shape against ``spec`` (default ``True``, as
            TorchRL): the action must be ``action_values.shape[:-1]`` followed by the spec's
            per-sample shape (its shape beyond the batch dims of the Composite holding it; a leaf
            spec has none). ``True`` (or ``None``) raises ``RuntimeError`` on a mismatch, ``"auto"``
            reshapes the action to that shape, ``False`` skips the check. A spec that carries the
            batch dims (``OneHot(4, shape=(3, 4))`` for 3 envs) must therefore sit in a Composite with
            that batch shape, or be used with ``strict_shape=False``. No check without a spec.

    Raises:
        ValueError: when neither ``action_space`` nor ``spec`` is given, they disagree, the action
            space is unknown, or ``strict_shape`` is not ``True``, ``False``, ``None`` or ``"auto"``.
            NotImplementedError: for ``"binary"``. RuntimeError: at call, on an action shape
            ``strict_shape`` refuses.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules import QValueModule
        >>> q = QValueModule(action_space="categorical")
        >>> td = q(TensorDict(action_value=torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]]), batch_size=[2]))
        >>> td["action"], td["chosen_action_value"]
        (tensor([1, 0]), tensor([2., 3.]))
    """

    def __init__(
        self,
        action_space: str | Any | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: Sequence[int] | None = None,
        spec: Any = None,
        safe: bool = False,
        strict_shape: bool | str | None = True,
    ) -> None:
        super().__init__()
        if not (strict_shape is None or isinstance(strict_shape, bool) or strict_shape == "auto"):
            raise ValueError(f"QValueModule: strict_shape must be True, False, None or 'auto', got {strict_shape!r}.")
        if action_space is not None and not isinstance(action_space, str):
            if spec is not None:
                raise ValueError("QValueModule: pass the spec either as action_space or as spec, not both.")
            action_space, spec = None, action_space
        action_value_key = "action_value" if action_value_key is None else action_value_key
        out_keys = _as_key_list(out_keys, ["action", action_value_key, "chosen_action_value"], "QValueModule: out_keys")
        if len(out_keys) != 3:
            raise ValueError(
                f"QValueModule: out_keys must hold 3 keys (action, action values, chosen action value), got {out_keys}."
            )
        # a Composite spec describes the action under the action key (out_keys[0])
        leaf = spec.get(out_keys[0]) if isinstance(spec, Composite) and out_keys[0] in spec else spec
        # the action's shape per sample: the leaf's shape beyond the batch dims of its Composite parent
        per_sample = None
        if leaf is not None and not isinstance(leaf, Composite):
            key = unravel_key(out_keys[0])
            parent = (spec.get(key[:-1]) if isinstance(key, tuple) else spec) if isinstance(spec, Composite) else None
            per_sample = leaf.shape[len(parent.shape) if parent is not None else 0 :]
        inferred = None if leaf is None else _space_of_spec(leaf)
        if action_space is None:
            if leaf is None:
                raise ValueError(
                    "QValueModule: neither action_space nor spec was given; pass action_space='one_hot' or 'categorical', or an action spec."
                )
            action_space = inferred
        check_one_of("QValueModule", "action_space", action_space, _ACTION_SPACES)
        if inferred is not None and inferred != action_space:
            raise ValueError(
                f"QValueModule: action_space={action_space!r} disagrees with the {type(leaf).__name__} spec ({inferred!r})."
            )
        if action_space == "binary":
            raise NotImplementedError(
                "QValueModule: action_space='binary' is not implemented; use 'one_hot', 'categorical' or 'mult_one_hot'."
            )
        if action_space == "mult_one_hot":
            if var_nums is None and isinstance(leaf, MultiOneHot):
                var_nums = list(leaf.nvec)
            if var_nums is None:
                raise ValueError(
                    "QValueModule: action_space='mult_one_hot' needs var_nums (the size of each one-hot chunk) or a MultiOneHot spec."
                )
            var_nums = [int(n) for n in var_nums]
        if safe and leaf is None:
            raise ValueError("QValueModule: safe=True needs a spec to project the action into, got spec=None.")
        self.action_space = action_space
        self.var_nums = var_nums
        self.action_value_key = action_value_key
        self.action_mask_key = action_mask_key
        self.in_keys = [self.action_value_key] + ([action_mask_key] if action_mask_key is not None else [])
        self.out_keys = out_keys
        self._spec = _as_composite(leaf, out_keys[0], "QValueModule")
        self._project = None if leaf is None else _projector(leaf)
        self.safe = bool(safe)
        # (a leaf spec: a Composite leaf has no action space and was refused above)
        self._dtype = leaf.dtype if leaf is not None else torch.int64  # pyright: ignore[reportAttributeAccessIssue]
        self.strict_shape = strict_shape
        self._per_sample_shape = None if strict_shape is False else per_sample

    @property
    def spec(self) -> Composite | None:
        """The Composite spec of the action (``None`` when none was given)."""
        return self._spec

    def _check_shape(self, action: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        per_sample = self._per_sample_shape
        assert per_sample is not None  # called only with a shape check
        expected = values.shape[:-1] + per_sample
        if action.shape == expected:
            return action
        if self.strict_shape == "auto":
            try:
                return action.reshape(expected)
            except RuntimeError:
                raise RuntimeError(
                    f"QValueModule: strict_shape='auto' cannot reshape the action {self.out_keys[0]!r} from {tuple(action.shape)} to {tuple(expected)}."
                ) from None
        raise RuntimeError(
            f"QValueModule: the action {self.out_keys[0]!r} has shape {tuple(action.shape)}, the spec expects {tuple(expected)} "
            f"(the action values' batch shape {tuple(values.shape[:-1])} + the spec's per-sample shape {tuple(per_sample)}); "
            "pass strict_shape='auto' to reshape it or strict_shape=False to skip the check (TorchRL's strict_shape)."
        )

    def _greedy(self, values: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        ranked = values if mask is None else values.masked_fill(~mask, float("-inf"))
        if self.action_space == "categorical":
            idx = ranked.argmax(-1)
            return idx.to(self._dtype), values.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        if self.action_space == "one_hot":
            idx = ranked.argmax(-1)
            action = torch.nn.functional.one_hot(idx, values.shape[-1]).to(self._dtype)
            return action, values.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        assert self.var_nums is not None  # __init__: mult_one_hot has var_nums
        if values.shape[-1] != sum(self.var_nums):
            raise ValueError(
                f"QValueModule: action values have {values.shape[-1]} entries but var_nums {self.var_nums} sum to {sum(self.var_nums)}."
            )
        actions, chosen = [], 0
        for v, r in zip(values.split(self.var_nums, -1), ranked.split(self.var_nums, -1)):
            idx = r.argmax(-1)
            actions.append(torch.nn.functional.one_hot(idx, v.shape[-1]))
            chosen = chosen + v.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        return torch.cat(actions, -1).to(self._dtype), cast(torch.Tensor, chosen)  # (var_nums is not empty)

    def _inputs(self, tensordict: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The action values and the (bool) action mask, if the module reads one."""
        owner = type(self).__name__
        try:
            values = tensordict.get(self.action_value_key)
        except KeyError:
            raise KeyError(
                f"{owner}: the input misses the action values {self.action_value_key!r}; it holds {sorted(map(str, tensordict.keys(True)))}."
            ) from None
        mask = None
        if self.action_mask_key is not None:
            mask = tensordict.get(self.action_mask_key)
            if mask.dtype is not torch.bool:
                raise ValueError(f"{owner}: the action mask {self.action_mask_key!r} must be bool, got {mask.dtype}.")
        return values, mask

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        values, mask = self._inputs(tensordict)
        action, chosen = self._greedy(values, mask)
        if self._per_sample_shape is not None:
            action = self._check_shape(action, values)
        if self.safe:
            assert self._project is not None  # __init__: safe needs a spec
            action = self._project(action)
        key_action, key_values, key_chosen = self.out_keys
        tensordict.set(key_action, action)
        tensordict.set(key_values, values)
        tensordict.set(key_chosen, chosen)
        return tensordict


def _action_value_network(module: Any, action_value_key: Any, in_keys: Any, owner: str) -> Any:
    """``module`` as the TensorDict module writing the action values: a TensorDict module must
    already write them; a plain module is wrapped (reading ``in_keys``, default ``"observation"``)."""
    if TensorDictModuleBase.is_tdmodule_compatible(module):
        if action_value_key not in module.out_keys:
            raise ValueError(
                f"{owner}: the TensorDict module writes {module.out_keys}, not the action values {action_value_key!r}."
            )
        return module
    return TensorDictModule(
        module, in_keys=_as_key_list(in_keys, ["observation"], f"{owner}: in_keys"), out_keys=[action_value_key]
    )


class QValueActor(TensorDictSequential):
    """A Q-value policy: a network writes action values, a :class:`QValueModule` picks the greedy action.

    ``QValueActor(net, ...)`` is ``TensorDictSequential(TensorDictModule(net, in_keys, [action_value_key]),
    QValueModule(...))``; a TensorDict module is used as it is (it must write ``action_value_key``).

    Args:
        module: the network computing the action values, or a TensorDict module writing them.
        in_keys: keys read by the network (default ``["observation"]``).
        spec: the action spec (gives the action space and the action dtype).
        safe: project the action into ``spec``.
        action_space: ``"one_hot"``, ``"categorical"`` or ``"mult_one_hot"`` (inferred from ``spec`` if omitted).
        action_value_key: default ``"action_value"``.
        action_key: where the greedy action is written (default ``"action"``).
        chosen_action_value_key: where its value is written (default ``"chosen_action_value"``).
        action_mask_key: optional boolean mask of allowed actions.
        strict_shape: the action-shape check of :class:`QValueModule` (default ``True``, as TorchRL).

    Raises:
        ValueError: see :class:`QValueModule`; also when a TensorDict ``module`` does not write ``action_value_key``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import OneHot
        >>> from rl_objectives.modules import QValueActor
        >>> actor = QValueActor(torch.nn.Linear(3, 4), spec=OneHot(4))
        >>> td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action"].dtype, td["chosen_action_value"].shape
        (torch.Size([5, 4]), torch.bool, torch.Size([5]))
    """

    def __init__(
        self,
        module: Any,
        *,
        in_keys: Any = None,
        spec: Any = None,
        safe: bool = False,
        action_space: str | None = None,
        action_value_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
        chosen_action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        strict_shape: bool | str | None = True,
    ) -> None:
        action_value_key = "action_value" if action_value_key is None else action_value_key
        out_keys = [
            "action" if action_key is None else action_key,
            action_value_key,
            "chosen_action_value" if chosen_action_value_key is None else chosen_action_value_key,
        ]
        qvalue = QValueModule(
            action_space=action_space,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=out_keys,
            spec=spec,
            safe=safe,
            strict_shape=strict_shape,
        )
        super().__init__(_action_value_network(module, action_value_key, in_keys, "QValueActor"), qvalue)

    @property
    def spec(self) -> Composite | None:
        """The Composite spec of the action (``None`` when none was given)."""
        return self[-1].spec


class ActorValueOperator(TensorDictSequential):
    """A shared trunk followed by a policy head and a value head (torchrl.modules.ActorValueOperator).

    Calling it runs the three in order. :meth:`get_policy_operator` and :meth:`get_value_operator`
    return the trunk chained with one head; both share the parameters of this module. The policy
    operator of a probabilistic head is a :class:`~tdict.nn.ProbabilisticTensorDictSequential` (so
    ``get_dist`` and ``log_prob`` work on it).

    Args:
        common_operator: the shared trunk (a TensorDict module, e.g. writing ``"hidden"``).
        policy_operator: the policy head, reading the trunk's output.
        value_operator: the value head, reading the trunk's output.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import Actor, ActorValueOperator, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), in_keys=["observation"], out_keys=["hidden"])
        >>> op = ActorValueOperator(trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
        ...                         ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]))
        >>> td = op(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
        >>> td["action"].shape, td["state_value"].shape
        (torch.Size([4, 2]), torch.Size([4]))
        >>> op.get_value_operator()(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))["state_value"].shape
        torch.Size([4])
    """

    def __init__(self, common_operator: Any, policy_operator: Any, value_operator: Any) -> None:
        for name, op in (
            ("common_operator", common_operator),
            ("policy_operator", policy_operator),
            ("value_operator", value_operator),
        ):
            if not TensorDictModuleBase.is_tdmodule_compatible(op):
                raise TypeError(
                    f"ActorValueOperator: {name} must be a TensorDict module (with in_keys and out_keys), got {type(op).__name__}."
                )
        super().__init__(common_operator, policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictSequential:
        """The trunk followed by the policy head (probabilistic when the head is)."""
        policy = self[1]
        if isinstance(policy, ProbabilisticTensorDictSequential):
            return ProbabilisticTensorDictSequential(self[0], *list(policy))
        return TensorDictSequential(self[0], policy)

    def get_value_operator(self) -> TensorDictSequential:
        """The trunk followed by the value head."""
        return TensorDictSequential(self[0], self[2])

    def get_policy_head(self) -> Any:
        """The policy head (without the shared trunk)."""
        return self[1]

    def get_value_head(self) -> Any:
        """The value head (without the shared trunk)."""
        return self[2]


class ActorCriticWrapper(TensorDictSequential):
    """A policy and a value network without a shared trunk, run one after the other.

    Args:
        policy_operator: the policy (a TensorDict module).
        value_operator: the critic (a TensorDict module).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules import Actor, ActorCriticWrapper, ValueOperator
        >>> ac = ActorCriticWrapper(Actor(torch.nn.Linear(3, 2)), ValueOperator(torch.nn.Linear(3, 1)))
        >>> td = ac(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
        >>> td["action"].shape, td["state_value"].shape
        (torch.Size([4, 2]), torch.Size([4]))
        >>> ac.get_policy_operator() is ac[0]
        True
    """

    def __init__(self, policy_operator: Any, value_operator: Any) -> None:
        for name, op in (("policy_operator", policy_operator), ("value_operator", value_operator)):
            if not TensorDictModuleBase.is_tdmodule_compatible(op):
                raise TypeError(
                    f"ActorCriticWrapper: {name} must be a TensorDict module (with in_keys and out_keys), got {type(op).__name__}."
                )
        super().__init__(policy_operator, value_operator)

    def get_policy_operator(self) -> Any:
        """The policy module (the first of the two)."""
        return self[0]

    def get_value_operator(self) -> Any:
        """The value module (the second of the two)."""
        return self[1]

    get_policy_head = get_policy_operator
    get_value_head = get_value_operator
