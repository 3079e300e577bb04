"""Probabilistic TensorDict modules: build a distribution from entries, sample it, write the sample.

Log-prob keys are derived from the sample keys as in tensordict 0.14: the sample ``"action"`` gets
``"action_log_prob"``, ``("agents", "action")`` gets ``("agents", "action_log_prob")``, and each leaf of
a :class:`~tdict.nn.CompositeDistribution` sample gets its own ``<leaf>_log_prob`` (``"sample_log_prob"``
is the old name; pass ``log_prob_key="sample_log_prob"`` to keep writing it).

Log-probs follow the design's no-trailing-dim rule: a log-prob written by these modules has the batch
shape of the (sub-)TensorDict that holds its sample. ``dist.log_prob(sample)`` is summed over its dims
beyond those batch dims, so a ``Normal`` over a ``[B, A]`` action (TensorDict batch ``[B]``) gives a
``[B]`` log-prob, as ``Independent(Normal, 1)`` would, and an action at ``("agents", "action")`` in a
``[B, n_agents]`` group gives a ``[B, n_agents]`` log-prob (one per agent, for multi-agent losses).
(tensordict 0.14 writes what the distribution returns, ``[B, A]`` in the first case.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, cast

import torch
from torch import distributions as D
from torch.distributions import constraints

from .._core.utils import NestedKey
from ..non_tensor import is_non_tensor
from ..seeding import use_generator
from .common import TensorDictModuleBase, _parse_key, _parse_key_list, _made_for
from .distributions import CompositeDistribution, _add_suffix, holder_batch_dims, sum_to_batch
from .interaction import InteractionType, interaction_type
from .sequence import TensorDictSequential, _step_functions, _tensor_chain

__all__ = ["ProbabilisticTensorDictModule", "ProbabilisticTensorDictSequential"]

_Tensor = torch.Tensor


def _deterministic(dist: D.Distribution) -> Any:
    """``deterministic_sample`` if defined, else the mode for a discrete support, else the mean."""
    value = getattr(type(dist), "deterministic_sample", None)
    if value is not None:
        return dist.deterministic_sample  # pyright: ignore[reportAttributeAccessIssue]  (checked just above)
    base = dist.base_dist if isinstance(dist, D.Independent) else dist
    if getattr(type(base), "has_enumerate_support", False):
        return _mode(dist)
    return _mean(dist)


def _mode(dist: D.Distribution) -> Any:
    try:
        return dist.mode
    except NotImplementedError:
        return _mean(dist)


def _log_prob_keys(sample_keys: list, log_prob_key: Any, log_prob_keys: Any, owner: str) -> list:
    """The log-prob key of each sample key, as tensordict 0.14 derives them.

    One sample key: ``log_prob_key`` when given, else ``<sample key>_log_prob``. Several: ``log_prob_keys``
    when given (one per sample key), else ``<sample key>_log_prob`` for each.
    """
    if log_prob_keys is not None:
        if isinstance(log_prob_keys, tuple) and not all(isinstance(k, str) for k in log_prob_keys):
            # ("a_log_prob", ("nested", "b_log_prob")) lists two keys (a nested key holds strings only)
            log_prob_keys = list(log_prob_keys)
        log_prob_keys = _parse_key_list(log_prob_keys, "log_prob_keys")
        if len(log_prob_keys) != len(sample_keys):
            raise ValueError(f"{owner}: log_prob_keys needs one key per sample key {sample_keys}, got {log_prob_keys}.")
        if log_prob_key is not None and [_parse_key(log_prob_key, "log_prob_key")] != log_prob_keys:
            raise ValueError(
                f"{owner}: log_prob_key={log_prob_key!r} disagrees with log_prob_keys={log_prob_keys}; pass one of them."
            )
        return log_prob_keys
    if log_prob_key is not None:
        if len(sample_keys) != 1:
            raise RuntimeError(
                f"{owner}: log_prob_key={log_prob_key!r} names one log-prob but there are {len(sample_keys)} sample keys "
                f"{sample_keys}; pass log_prob_keys (one per sample key) instead."
            )
        return [_parse_key(log_prob_key, "log_prob_key")]
    return [_add_suffix(key, "_log_prob") for key in sample_keys]


def _composite_out_keys(distribution_kwargs: Mapping) -> list:
    """A CompositeDistribution's sample keys: the values of ``name_map``, else the heads of ``distribution_map``."""
    name_map = distribution_kwargs.get("name_map")
    if name_map:
        return list(name_map.values())
    distribution_map = distribution_kwargs.get("distribution_map")
    if distribution_map is None:
        raise KeyError(
            "ProbabilisticTensorDictModule: distribution_kwargs must hold 'distribution_map' when the distribution "
            f"is a CompositeDistribution; got {sorted(distribution_kwargs)}."
        )
    return list(distribution_map.keys())


def _mean(dist: D.Distribution, n_empirical_estimate: int = 1000) -> Any:
    try:
        return dist.mean
    except NotImplementedError:
        if isinstance(dist.support, type(constraints.corr_cholesky)):
            # an average of Cholesky factors of correlation matrices is not one (rows lose their unit norm)
            raise RuntimeError(
                f"DETERMINISTIC, MEAN and MODE are not available for {type(dist).__name__}: it has no closed-form "
                "mean or mode, and an average of its samples leaves its support; use InteractionType.RANDOM."
            ) from None
        # no closed-form mean: an empirical estimate, as tensordict 0.14 does
        return dist.sample((n_empirical_estimate,)).mean(0)


def _as_num_samples(num_samples: Any, owner: str) -> torch.Size | None:
    if num_samples is None:
        return None
    dims = (num_samples,) if isinstance(num_samples, int) else num_samples
    try:
        size = torch.Size(dims)
    except TypeError:
        size = None
    if size is None or isinstance(num_samples, bool) or any(isinstance(d, bool) or d < 0 for d in size):
        raise ValueError(f"{owner}: num_samples must be None, an int >= 0 or a sequence of them, got {num_samples!r}.")
    return size


class ProbabilisticTensorDictModule(TensorDictModuleBase):
    """Build a distribution from TensorDict entries, and write a value drawn from it.

    The value depends on :func:`~tdict.nn.interaction_type` (``default_interaction_type`` when none
    is set): ``RANDOM`` calls ``rsample`` (``sample`` when the distribution has no ``rsample``);
    ``MODE`` / ``MEAN`` read that property (``MODE`` falls back to the mean, ``MEAN`` to an empirical
    mean over ``n_empirical_estimate`` samples); ``MEDIAN`` reads ``median`` or falls back to the mean;
    ``DETERMINISTIC`` reads ``deterministic_sample``, else the mode for discrete supports, else the mean.
    A distribution over Cholesky factors (``LKJCholesky``) has no mean or mode and averaging its samples
    leaves its support, so every interaction type but ``RANDOM`` raises ``RuntimeError`` for it.

    Args:
        in_keys: the keys holding the distribution's keyword arguments. A list uses each key's last
            part as the argument name (``("agent", "loc")`` -> ``loc``); a dict maps argument names to
            keys (``{"loc": "my_loc"}``).
        out_keys: where the sample goes (one key per value the distribution returns). For a
            :class:`~tdict.nn.CompositeDistribution` they default to the sample keys (``name_map``'s
            values, else ``distribution_map``'s heads), and the sample TensorDict is written as it is.
        distribution_class: the distribution to build (``torch.distributions.Normal`` by default).
        distribution_kwargs: constant keyword arguments of ``distribution_class``.
        default_interaction_type: used when no interaction type is set.
        return_log_prob: also write the sample's log-prob (batch shape, see the module docstring).
        log_prob_keys: where each sample key's log-prob goes; ``None`` (default): ``<sample key>_log_prob``.
        log_prob_key: the log-prob key when there is one sample key; ``None`` (default):
            ``<sample key>_log_prob`` (``"action_log_prob"`` for ``"action"``, tensordict 0.14's default with
            ``composite_lp_aggregate()`` off; pass ``"sample_log_prob"`` for the aggregated name).
        cache_dist: keep the last distribution built in ``self._dist``.
        n_empirical_estimate: samples used when a mean has no closed form.
        num_samples: with the ``RANDOM`` interaction type, draw this many samples (an int or a shape):
            the output is ``tensordict_out`` expanded to ``num_samples + batch size`` (a new
            TensorDict, as in tensordict 0.14) holding the samples and their log-probs. Other
            interaction types give one value, which an expanded output refuses (an error).
        generator: the random numbers of ``RANDOM`` (and of an empirical ``MEAN``): ``None`` (the
            global RNG), a :class:`torch.Generator` (used in place: its state advances), an ``int``
            (a CPU generator seeded with it, owned by the module), or a key: the input holds a
            generator there (used in place), or an integer seed (a scalar tensor or a non-tensor
            int), replaced after the draw by the next seed drawn from that stream (tensordict 0.14's
            JAX-style stream key). Ignored under torch.compile, as in tensordict.

    Raises:
        RuntimeError: ``log_prob_key`` with several sample keys (use ``log_prob_keys``).
        ValueError: ``log_prob_keys`` of another length than the sample keys, or a bad ``num_samples``.
        TypeError: a ``generator`` of another type than the above.
        KeyError: at call, naming the in-key missing from the input and the keys it holds.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import ProbabilisticTensorDictModule, InteractionType, set_interaction_type
        >>> module = ProbabilisticTensorDictModule(
        ...     in_keys=["loc", "scale"], out_keys=["action"],
        ...     distribution_class=torch.distributions.Normal, return_log_prob=True)
        >>> td = TensorDict(loc=torch.zeros(3, 2), scale=torch.ones(3, 2), batch_size=[3])
        >>> td = module(td)
        >>> td["action"]
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.]])
        >>> module.out_keys
        ['action', 'action_log_prob']
        >>> td["action_log_prob"].shape
        torch.Size([3])
        >>> with set_interaction_type(InteractionType.RANDOM):
        ...     module(td)["action"].shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        distribution_class: type = D.Normal,
        distribution_kwargs: dict | None = None,
        default_interaction_type: InteractionType | str = InteractionType.DETERMINISTIC,
        return_log_prob: bool = False,
        log_prob_keys: Sequence[NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
        num_samples: int | Sequence[int] | torch.Size | None = None,
        generator: torch.Generator | int | NestedKey | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        num_samples = _as_num_samples(num_samples, owner)
        self._generator: torch.Generator | None = None
        self._generator_key: NestedKey | None = None
        if isinstance(generator, torch.Generator):
            self._generator = generator
        elif isinstance(generator, int) and not isinstance(generator, bool):
            self._generator = torch.Generator().manual_seed(generator)
        elif isinstance(generator, (str, tuple)):
            self._generator_key = _parse_key(generator, "generator")
        elif generator is not None:
            raise TypeError(
                f"{owner}: generator must be a torch.Generator, an int seed, a key or None, got {type(generator).__name__}."
            )
        if isinstance(in_keys, Mapping):
            pairs = [(name, _parse_key(key, "in_keys")) for name, key in in_keys.items()]
        else:
            keys = _parse_key_list(in_keys, "in_keys")
            pairs = [(key if isinstance(key, str) else key[-1], key) for key in keys]
        for name, _ in pairs:
            if not isinstance(name, str):
                raise ValueError(f"in_keys: the distribution argument names must be strings, got {name!r}.")
        self._dist_pairs = tuple(pairs)
        self._dist_names = tuple(name for name, _ in pairs)
        if out_keys is None:
            out_keys = (
                _composite_out_keys(distribution_kwargs or {}) if distribution_class is CompositeDistribution else ["_"]
            )
        self._sample_keys = _parse_key_list(out_keys, "out_keys")
        self._log_prob_keys = _log_prob_keys(self._sample_keys, log_prob_key, log_prob_keys, owner)
        self.in_keys = [key for _, key in pairs]
        self.return_log_prob = return_log_prob  # sets out_keys
        self.distribution_class = distribution_class
        self.distribution_kwargs = dict(distribution_kwargs or {})
        self.default_interaction_type = InteractionType(default_interaction_type)
        self.cache_dist = cache_dist
        self.n_empirical_estimate = n_empirical_estimate
        self.num_samples = num_samples
        self._dist: D.Distribution | None = None

    @property
    def return_log_prob(self) -> bool:
        """Whether the log-prob is written; setting it updates :attr:`out_keys`."""
        return self._return_log_prob

    @return_log_prob.setter
    def return_log_prob(self, value: bool) -> None:
        self._return_log_prob = bool(value)
        written = list(self._sample_keys)
        if value:
            written += [key for key in self._log_prob_keys if key not in written]
        self.out_keys = written

    @property
    def log_prob_keys(self) -> list:
        """The log-prob key of each sample key (``<sample key>_log_prob`` unless given)."""
        return list(self._log_prob_keys)

    @property
    def log_prob_key(self) -> NestedKey:
        """The log-prob key, when there is one sample key.

        Raises:
            RuntimeError: with several sample keys (read :attr:`log_prob_keys`).
        """
        if len(self._log_prob_keys) != 1:
            raise RuntimeError(
                f"{type(self).__name__}.log_prob_key: there are {len(self._log_prob_keys)} log-prob keys "
                f"{self._log_prob_keys} (one per sample key); read log_prob_keys instead."
            )
        return self._log_prob_keys[0]

    @property
    def dist_sample_keys(self) -> list:
        """The out-keys that receive the sample (without the log-prob keys)."""
        return [key for key in self._sample_keys if key != "_"]

    @property
    def dist_params_keys(self) -> list:
        """The in-keys holding the distribution's parameters."""
        return list(self.in_keys)

    def _dist_kwargs(self, tensordict: Any) -> dict:
        kwargs = {}
        for name, key in self._dist_pairs:
            try:
                kwargs[name] = tensordict.get(key)
            except KeyError:
                raise KeyError(
                    f"{type(self).__name__}: the input misses the in-key {key!r} (distribution argument {name!r}); "
                    f"it holds {sorted(map(str, tensordict.keys(True)))}."
                ) from None
        return kwargs

    def get_dist(self, tensordict: Any) -> D.Distribution:
        """The distribution whose parameters are read from ``tensordict``.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> from tdict.nn import ProbabilisticTensorDictModule
            >>> m = ProbabilisticTensorDictModule(in_keys={"logits": "x"}, out_keys=["a"],
            ...                                   distribution_class=torch.distributions.Categorical)
            >>> m.get_dist(TensorDict(x=torch.zeros(2, 5), batch_size=[2])).batch_shape
            torch.Size([2])
        """
        kwargs = self._dist_kwargs(tensordict)
        if self.distribution_kwargs:
            kwargs.update(self.distribution_kwargs)
        dist = self.distribution_class(**kwargs)
        if self.cache_dist:
            self._dist = dist
        return dist

    # tensordict 0.14 name
    build_dist_from_params = get_dist

    def dist_function(self) -> Callable[..., D.Distribution] | None:
        """The distribution on tensors: ``f(*params)`` takes the in-key entries (plain tensors, in
        :attr:`in_keys` order) and returns what :meth:`get_dist` returns, without reading a TensorDict.

        ``None`` for a ``CompositeDistribution`` (its parameters are a TensorDict), with
        ``cache_dist``, or for a subclass with its own ``get_dist`` (unless it also overrides this).

        Examples:
            >>> import torch
            >>> from tdict.nn import ProbabilisticTensorDictModule
            >>> m = ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["a"])
            >>> m.dist_function()(torch.zeros(3), torch.ones(3)).batch_shape
            torch.Size([3])
        """
        cls = type(self)
        if cls.get_dist is not ProbabilisticTensorDictModule.get_dist and (
            cls.dist_function is ProbabilisticTensorDictModule.dist_function
        ):
            return None
        if self.cache_dist or self.distribution_class is CompositeDistribution:
            return None

        def build(*params: Any) -> D.Distribution:  # the settings as they are at each call, as get_dist
            kwargs = dict(zip(self._dist_names, params))
            if self.distribution_kwargs:
                kwargs.update(self.distribution_kwargs)
            return self.distribution_class(**kwargs)

        return _made_for(self, "dist_function", (), lambda: build)

    def _sample(self, dist: D.Distribution, generator: torch.Generator | None = None) -> Any:
        itype = interaction_type()
        if itype is None:
            itype = self.default_interaction_type
        if itype is InteractionType.RANDOM:
            shape = torch.Size() if self.num_samples is None else self.num_samples
            with use_generator(generator):
                return dist.rsample(shape) if dist.has_rsample else dist.sample(shape)
        if itype is InteractionType.DETERMINISTIC:
            return _deterministic(dist)
        if itype is InteractionType.MODE:
            return _mode(dist)
        with use_generator(generator):
            if itype is InteractionType.MEAN:
                return _mean(dist, self.n_empirical_estimate)
            try:
                return dist.median  # pyright: ignore[reportAttributeAccessIssue]  (only some distributions have one)
            except (AttributeError, NotImplementedError):
                return _mean(dist, self.n_empirical_estimate)

    def _resolve_generator(self, tensordict: Any) -> tuple:
        """``(generator or None, writeback or None)`` for one call; ``writeback(gen)`` stores the next
        seed of a seed-valued ``generator`` key after the draw."""
        if self._generator is not None or self._generator_key is None:
            return self._generator, None
        key = self._generator_key
        value = tensordict.get(key, None)
        if value is None:
            return None, None
        raw = value.data if is_non_tensor(value) else value
        if isinstance(raw, torch.Generator):
            return raw, None
        if (
            isinstance(raw, _Tensor)
            and raw.numel() == 1
            and not raw.is_floating_point()
            and raw.dtype is not torch.bool
        ):
            seed, device, as_tensor = int(raw.item()), raw.device, True
        elif isinstance(raw, int) and not isinstance(raw, bool):
            first = next(
                (tensordict.get(k) for k in self.in_keys if isinstance(tensordict.get(k, None), _Tensor)), None
            )
            seed, device, as_tensor = raw, (first.device if first is not None else torch.device("cpu")), False
        else:
            raise TypeError(
                f"{type(self).__name__}: the generator key {key!r} holds {type(raw).__name__}"
                f"{f' of shape {tuple(raw.shape)} and dtype {raw.dtype}' if isinstance(raw, _Tensor) else ''}; "
                "expected a torch.Generator or an integer seed (an int or a one-element integer tensor)."
            )
        generator = torch.Generator(device=device).manual_seed(seed)

        def writeback(gen: torch.Generator) -> None:
            following = torch.randint(0, 2**62, (), generator=gen, dtype=torch.int64, device=device)
            if as_tensor:
                tensordict.set(key, following)
            else:
                tensordict.set_non_tensor(key, int(following))

        return generator, writeback

    def log_prob(self, tensordict: Any, *, dist: D.Distribution | None = None) -> Any:
        """The log-prob of the sample stored in ``tensordict``, with the batch shape of the
        (sub-)TensorDict that holds the sample.

        For a :class:`~tdict.nn.CompositeDistribution` it is a TensorDict holding each leaf's
        log-prob at its :attr:`log_prob_keys` entry (as tensordict 0.14 returns it).

        Raises:
            KeyError: naming the missing sample key.
        """
        if dist is None:
            dist = self.get_dist(tensordict)
        if isinstance(dist, CompositeDistribution):
            return self._composite_log_prob(dist, tensordict)
        values = []
        for key in self.dist_sample_keys:
            try:
                values.append(tensordict.get(key))
            except KeyError:
                raise KeyError(
                    f"{type(self).__name__}.log_prob: the input misses the sample key {key!r}; it holds {sorted(map(str, tensordict.keys(True)))}."
                ) from None
        return sum_to_batch(dist.log_prob(*values), holder_batch_dims(tensordict, self.dist_sample_keys[0]))

    def _composite_log_prob(self, dist: CompositeDistribution, sample: Any) -> Any:
        """Per-leaf log-probs of ``sample``, each at its :attr:`log_prob_keys` entry."""
        per_leaf = dist.log_prob(sample, aggregate_probabilities=False)
        for sample_key, lp_key in zip(self._sample_keys, self._log_prob_keys):
            default = _add_suffix(sample_key, "_log_prob")
            if lp_key != default:
                per_leaf.rename_key_(default, lp_key)
        return per_leaf

    def _process_sample(self, sample: Any) -> Any:
        """A hook on the drawn value before it is written (a safe module projects it into its spec)."""
        return sample

    def forward(self, tensordict: Any, tensordict_out: Any = None) -> Any:
        """Sample (see the class docstring) and write the out-keys (and log-probs) into ``tensordict_out``
        (default: ``tensordict``), which is returned."""
        if tensordict_out is None:
            tensordict_out = tensordict
        dist = self.get_dist(tensordict)
        generator, writeback = self._resolve_generator(tensordict)
        sample = self._process_sample(self._sample(dist, generator))
        if writeback is not None:
            writeback(generator)
        if self.num_samples is not None:
            # a new, expanded TensorDict holds the samples (tensordict 0.14's num_samples)
            tensordict_out = tensordict_out.expand(*self.num_samples, *tensordict_out.batch_size)
        keys = self._sample_keys
        if getattr(type(sample), "_is_tensor_collection", False):
            tensordict_out.update(sample)
            if self.return_log_prob:
                # computed on the written entries: each leaf's log-prob gets the batch shape of its holder
                composite = cast(CompositeDistribution, dist)  # only a composite samples a collection
                tensordict_out.update(self._composite_log_prob(composite, tensordict_out))
            return tensordict_out
        values = (sample,) if isinstance(sample, _Tensor) else tuple(sample)
        if len(keys) != len(values):
            raise RuntimeError(
                f"{type(self).__name__}: the distribution returned {len(values)} value(s) but out_keys are {keys}."
            )
        for key, value in zip(keys, values):
            if key != "_":
                tensordict_out.set(key, value)
        if self.return_log_prob:
            # one joint log-prob for the values of one draw, at the first sample key's log-prob key
            lp = sum_to_batch(dist.log_prob(*values), holder_batch_dims(tensordict_out, keys[0]))
            tensordict_out.set(self._log_prob_keys[0], lp)
        return tensordict_out


class ProbabilisticTensorDictSequential(TensorDictSequential):
    """A :class:`~tdict.nn.TensorDictSequential` of steps among which are
    :class:`ProbabilisticTensorDictModule` s (usually just the last one).

    Calling it runs the steps (each probabilistic step samples and writes its sample). With one
    probabilistic step at the end, :meth:`get_dist` runs the other steps (writing their outputs into
    the input, as tensordict 0.14 does) and returns the last step's distribution. With
    ``return_composite`` it returns one :class:`~tdict.nn.CompositeDistribution` over every
    probabilistic step instead: on a shallow copy of the input, each intermediate probabilistic step
    draws its sample (with the current interaction type) for the steps after it, so the later
    distributions are conditioned on those draws; :meth:`log_prob` then gives a TensorDict of
    ``<sample key>_log_prob`` entries.

    Args:
        *modules: the steps.

    Keyword Args:
        partial_tolerant, selected_out_keys, inplace: as in :class:`~tdict.nn.TensorDictSequential`.
        return_composite: ``None`` (default, tensordict 0.14's rule): ``True`` when there are several
            probabilistic steps or the last step is not probabilistic, else ``False``. ``False``
            requires the last step to be probabilistic and uses only its distribution.

    Raises:
        TypeError: with ``return_composite=False`` when the last step is not probabilistic.
        RuntimeError: :meth:`get_dist` without any probabilistic step.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (TensorDictModule, NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["obs"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Normal, return_log_prob=True))
        >>> td = actor(TensorDict(obs=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
        >>> actor.log_prob(td).shape
        torch.Size([5])
        >>> two = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc"], out_keys=["a"], distribution_kwargs={"scale": 1.0}),
        ...     TensorDictModule(lambda a: a + 1, in_keys=["a"], out_keys=["loc2"]),
        ...     ProbabilisticTensorDictModule(in_keys={"loc": "loc2"}, out_keys=["b"], distribution_kwargs={"scale": 1.0}))
        >>> two.return_composite, sorted(two.log_prob(two(TensorDict(x=torch.zeros(3)))).keys())
        (True, ['a_log_prob', 'b_log_prob'])
    """

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        return_composite: bool | None = None,
        selected_out_keys: Any = None,
        inplace: bool | str | None = None,
    ) -> None:
        steps = (
            list(modules[0].values())
            if len(modules) == 1 and isinstance(modules[0], Mapping)
            else (list(modules[0]) if len(modules) == 1 and isinstance(modules[0], list) else list(modules))
        )
        if not steps:
            raise ValueError("ProbabilisticTensorDictSequential: give at least one module.")
        if return_composite is not None and not isinstance(return_composite, bool):
            raise TypeError(
                f"ProbabilisticTensorDictSequential: return_composite must be a bool or None, got {type(return_composite).__name__}."
            )
        probabilistic = (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential)
        last_is_probabilistic = isinstance(steps[-1], probabilistic)
        if return_composite is False and not last_is_probabilistic:
            raise TypeError(
                "ProbabilisticTensorDictSequential: the last module must be a ProbabilisticTensorDictModule (or a "
                f"ProbabilisticTensorDictSequential) unless return_composite=True, got {type(steps[-1]).__name__}."
            )
        if return_composite is None:
            return_composite = (
                not last_is_probabilistic or sum(isinstance(m, ProbabilisticTensorDictModule) for m in steps) > 1
            )
        # optional arguments are forwarded only when given: a subclass mixing in another
        # TensorDictSequential subclass whose __init__ lacks them (TorchRL's pattern) still builds
        extra: dict = {}
        if selected_out_keys is not None:
            extra["selected_out_keys"] = selected_out_keys
        if inplace is not None:
            extra["inplace"] = inplace
        super().__init__(*modules, partial_tolerant=partial_tolerant, **extra)
        self.return_composite = return_composite

    def _probabilistic_steps(self) -> list:
        return [
            m
            for m in reversed(self._steps)
            if isinstance(m, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential))
        ]

    @property
    def log_prob_keys(self) -> list:
        """The log-prob keys of the probabilistic steps (last step first, as tensordict lists them)."""
        return [key for m in self._probabilistic_steps() for key in m.log_prob_keys]

    @property
    def log_prob_key(self) -> NestedKey:
        """The log-prob key, when there is one (see :attr:`log_prob_keys`).

        Raises:
            RuntimeError: when there are several.
        """
        keys = self.log_prob_keys
        if len(keys) != 1:
            raise RuntimeError(
                f"{type(self).__name__}.log_prob_key: there are {len(keys)} log-prob keys {keys}; read log_prob_keys instead."
            )
        return keys[0]

    @property
    def default_interaction_type(self) -> InteractionType | None:
        """The ``default_interaction_type`` of the last probabilistic step (what the sequence
        samples with when no interaction type is set), as tensordict's; the current
        :func:`interaction_type` when no step has one.

        Examples:
            >>> import torch
            >>> from tdict.nn import (InteractionType, ProbabilisticTensorDictModule,
            ...                       ProbabilisticTensorDictSequential, TensorDictModule)
            >>> seq = ProbabilisticTensorDictSequential(
            ...     TensorDictModule(lambda x: (x, x.abs() + 1), in_keys=["x"], out_keys=["loc", "scale"]),
            ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["y"],
            ...                                   distribution_class=torch.distributions.Normal,
            ...                                   default_interaction_type="random"))
            >>> seq.default_interaction_type is InteractionType.RANDOM
            True
        """
        for module in self._probabilistic_steps():
            itype = getattr(module, "default_interaction_type", None)
            if itype is not None:
                return itype
        return interaction_type()

    @property
    def dist_sample_keys(self) -> list:
        """The sample keys of the probabilistic steps (last step first)."""
        return [key for m in self._probabilistic_steps() for key in m.dist_sample_keys]

    @property
    def dist_params_keys(self) -> list:
        """The distribution-parameter keys of the probabilistic steps (last step first)."""
        return [key for m in self._probabilistic_steps() for key in m.dist_params_keys]

    @property
    def num_samples(self) -> torch.Size:
        """The sample shape the probabilistic steps add in front of the batch (outermost first)."""
        shape = torch.Size()
        for m in self._steps:
            if isinstance(m, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential)):
                shape = torch.Size(m.num_samples or ()) + shape
        return shape

    @property
    def det_part(self) -> TensorDictSequential:
        """The deterministic steps (all but the last) as a :class:`~tdict.nn.TensorDictSequential`."""
        return TensorDictSequential(*self._steps[:-1])

    def get_dist_params(self, tensordict: Any) -> Any:
        """Run the deterministic steps on ``tensordict`` and return it."""
        return self._run_steps(tensordict, len(self._steps) - 1)

    def get_dist(self, tensordict: Any) -> D.Distribution:
        """Run the deterministic steps, then build the distribution from their outputs (with
        ``return_composite``: the CompositeDistribution of every probabilistic step, see the class
        docstring)."""
        if not self.return_composite:
            return self._steps[-1].get_dist(self.get_dist_params(tensordict))
        work = tensordict.copy()
        dists: dict = {}
        last = len(self._steps) - 1
        for i, module in enumerate(self._steps):
            if not isinstance(module, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential)):
                work = module(work)
                continue
            dist = module.get_dist(work)
            if isinstance(dist, CompositeDistribution):
                dists.update(dist.dists)
            else:
                dists[module.dist_sample_keys[0]] = dist
            if i < last:  # the later steps read this step's draw
                work = module(work)
        if not dists:
            raise RuntimeError(
                f"{type(self).__name__}.get_dist: no probabilistic module among the steps {list(self._names)}."
            )
        return CompositeDistribution.from_distributions(work, dists)

    def dist_function(self, batch_dims: int = 0) -> Callable[..., D.Distribution] | None:
        """:meth:`get_dist` on tensors: ``f(*inputs)`` takes the :attr:`in_keys` entries (plain
        tensors, in that order), runs the deterministic steps through their tensor functions (see
        :meth:`TensorDictSequential.tensor_function`) and returns the last step's distribution
        (:meth:`ProbabilisticTensorDictModule.dist_function`).

        ``None`` with ``return_composite``, when a step has no tensor function, the last step no
        distribution function, or for a subclass with its own ``get_dist`` or ``get_dist_params``.

        Examples:
            >>> import torch
            >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
            ...                       ProbabilisticTensorDictSequential, TensorDictModule)
            >>> actor = ProbabilisticTensorDictSequential(
            ...     TensorDictModule(NormalParamExtractor(), in_keys=["x"], out_keys=["loc", "scale"]),
            ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["a"]))
            >>> actor.dist_function(batch_dims=1)(torch.zeros(5, 4)).batch_shape
            torch.Size([5, 2])
        """
        cls = type(self)
        base = ProbabilisticTensorDictSequential
        if (cls.get_dist is not base.get_dist or cls.get_dist_params is not base.get_dist_params) and (
            cls.dist_function is base.dist_function
        ):
            return None
        if self.return_composite:
            return None
        last = self._steps[-1]
        build = getattr(last, "dist_function", None)
        build = None if build is None or isinstance(last, TensorDictSequential) else build()
        if build is None:
            return None
        steps = self._steps[:-1]
        runs = _step_functions(steps, batch_dims)
        if runs is None:
            return None

        def make() -> Callable[..., D.Distribution]:
            chain, params = _tensor_chain(steps, runs, tuple(self.in_keys)), tuple(last.in_keys)
            return lambda *inputs: build(*chain(inputs, params))

        # kept while the steps' tensor functions and the last step's builder are the same objects
        return _made_for(self, ("dist_function", batch_dims), (*runs, build), make)

    def build_dist_from_params(self, tensordict: Any) -> D.Distribution:
        """The distribution built from parameters already in ``tensordict`` (no step is run)."""
        return self._steps[-1].get_dist(tensordict)

    def log_prob(self, tensordict: Any) -> Any:
        """The log-prob (batch shape) of the sample stored in ``tensordict`` under the distribution
        the steps compute from it (a TensorDict of per-leaf log-probs for a CompositeDistribution)."""
        dist = self.get_dist(tensordict)
        if self.return_composite:
            return cast(CompositeDistribution, dist).log_prob(tensordict, aggregate_probabilities=False)
        return self._steps[-1].log_prob(tensordict, dist=dist)

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, slice):
            # a slice need not end with the probabilistic step
            steps = self._steps[index]
            probabilistic = (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential)
            if self.return_composite and any(isinstance(m, probabilistic) for m in steps):
                return type(self)(*steps, return_composite=True)
            if steps and isinstance(steps[-1], probabilistic):
                return type(self)(*steps)
            return TensorDictSequential(*steps)
        return super().__getitem__(index)
