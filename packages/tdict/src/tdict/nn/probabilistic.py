"""Probabilistic TensorDict modules: build a distribution from entries, sample it, write the sample.

Log-probs follow the design's no-trailing-dim rule: a log-prob written by these modules has the batch
shape of the (sub-)TensorDict that holds its sample. ``dist.log_prob(sample)`` is summed over its dims
beyond those batch dims, so a ``Normal`` over a ``[B, A]`` action (TensorDict batch ``[B]``) gives a
``[B]`` log-prob, as ``Independent(Normal, 1)`` would, and an action at ``("agents", "action")`` in a
``[B, n_agents]`` group gives a ``[B, n_agents]`` log-prob (one per agent, for multi-agent losses).
(tensordict 0.14 writes what the distribution returns, ``[B, A]`` in the first case.)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import distributions as D

from .._utils import NestedKey
from .common import TensorDictModuleBase, _parse_key, _parse_key_list
from .distributions import CompositeDistribution, _holder_batch_dims, _reduce_to
from .interaction import InteractionType, interaction_type
from .sequence import TensorDictSequential

__all__ = ["ProbabilisticTensorDictModule", "ProbabilisticTensorDictSequential"]

_Tensor = torch.Tensor


def _deterministic(dist: D.Distribution) -> Any:
    """``deterministic_sample`` if defined, else the mode for a discrete support, else the mean."""
    value = getattr(type(dist), "deterministic_sample", None)
    if value is not None:
        return dist.deterministic_sample
    base = dist.base_dist if isinstance(dist, D.Independent) else dist
    if getattr(type(base), "has_enumerate_support", False):
        return _mode(dist)
    return _mean(dist)


def _mode(dist: D.Distribution) -> Any:
    try:
        return dist.mode
    except NotImplementedError:
        return _mean(dist)


def _mean(dist: D.Distribution, n_empirical_estimate: int = 1000) -> Any:
    try:
        return dist.mean
    except NotImplementedError:
        # no closed-form mean: an empirical estimate, as tensordict 0.14 does
        return dist.sample((n_empirical_estimate,)).mean(0)


class ProbabilisticTensorDictModule(TensorDictModuleBase):
    """Build a distribution from TensorDict entries, and write a value drawn from it.

    The value depends on :func:`~tdict.nn.interaction_type` (``default_interaction_type`` when none
    is set): ``RANDOM`` calls ``rsample`` (``sample`` when the distribution has no ``rsample``);
    ``MODE`` / ``MEAN`` read that property (``MODE`` falls back to the mean, ``MEAN`` to an empirical
    mean over ``n_empirical_estimate`` samples); ``MEDIAN`` reads ``median`` or falls back to the mean;
    ``DETERMINISTIC`` reads ``deterministic_sample``, else the mode for discrete supports, else the mean.

    Args:
        in_keys: the keys holding the distribution's keyword arguments. A list uses each key's last
            part as the argument name (``("agent", "loc")`` -> ``loc``); a dict maps argument names to
            keys (``{"loc": "my_loc"}``).
        out_keys: where the sample goes (one key per value the distribution returns; for a
            :class:`~tdict.nn.CompositeDistribution`, the sample TensorDict's keys are written as they are).
        distribution_class: the distribution to build (``torch.distributions.Normal`` by default).
        distribution_kwargs: constant keyword arguments of ``distribution_class``.
        default_interaction_type: used when no interaction type is set.
        return_log_prob: also write the sample's log-prob (batch shape, see the module docstring).
        log_prob_key: where the log-prob goes; ``"sample_log_prob"`` (tensordict 0.14's name when
            log-probs are aggregated).
        cache_dist: keep the last distribution built in ``self._dist``.
        n_empirical_estimate: samples used when a mean has no closed form.

    Raises:
        KeyError: at call, naming the in-key missing from the input and the keys it holds.

    Example:
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
        >>> td["sample_log_prob"].shape
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
        log_prob_key: NestedKey = "sample_log_prob",
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
    ) -> None:
        super().__init__()
        if isinstance(in_keys, Mapping):
            pairs = [(name, _parse_key(key, "in_keys")) for name, key in in_keys.items()]
        else:
            keys = _parse_key_list(in_keys, "in_keys")
            pairs = [(key if isinstance(key, str) else key[-1], key) for key in keys]
        for name, _ in pairs:
            if not isinstance(name, str):
                raise ValueError(f"in_keys: the distribution argument names must be strings, got {name!r}.")
        self._dist_pairs = tuple(pairs)
        if out_keys is None:
            out_keys = ["_"]
        self._sample_keys = _parse_key_list(out_keys, "out_keys")
        self.log_prob_key = _parse_key(log_prob_key, "log_prob_key")
        self.return_log_prob = return_log_prob
        self.in_keys = [key for _, key in pairs]
        written = list(self._sample_keys)
        if return_log_prob and self.log_prob_key not in written:
            written.append(self.log_prob_key)
        self.out_keys = written
        self.distribution_class = distribution_class
        self.distribution_kwargs = dict(distribution_kwargs or {})
        self.default_interaction_type = InteractionType(default_interaction_type)
        self.cache_dist = cache_dist
        self.n_empirical_estimate = n_empirical_estimate
        self._dist: D.Distribution | None = None

    @property
    def dist_sample_keys(self) -> list:
        """The out-keys that receive the sample (without the log-prob key)."""
        return [key for key in self._sample_keys if key != "_"]

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

        Example:
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

    def _sample(self, dist: D.Distribution) -> Any:
        itype = interaction_type()
        if itype is None:
            itype = self.default_interaction_type
        if itype is InteractionType.RANDOM:
            return dist.rsample() if dist.has_rsample else dist.sample()
        if itype is InteractionType.DETERMINISTIC:
            return _deterministic(dist)
        if itype is InteractionType.MODE:
            return _mode(dist)
        if itype is InteractionType.MEAN:
            return _mean(dist, self.n_empirical_estimate)
        try:
            return dist.median
        except (AttributeError, NotImplementedError):
            return _mean(dist, self.n_empirical_estimate)

    def log_prob(self, tensordict: Any, *, dist: D.Distribution | None = None) -> _Tensor:
        """The log-prob of the sample stored in ``tensordict``, with the batch shape of the
        (sub-)TensorDict that holds the sample.

        Raises:
            KeyError: naming the missing sample key.
        """
        if dist is None:
            dist = self.get_dist(tensordict)
        if isinstance(dist, CompositeDistribution):
            return dist.log_prob(tensordict, aggregate_probabilities=True)
        values = []
        for key in self.dist_sample_keys:
            try:
                values.append(tensordict.get(key))
            except KeyError:
                raise KeyError(
                    f"{type(self).__name__}.log_prob: the input misses the sample key {key!r}; it holds {sorted(map(str, tensordict.keys(True)))}."
                ) from None
        return _reduce_to(dist.log_prob(*values), _holder_batch_dims(tensordict, self.dist_sample_keys[0]))

    def forward(self, tensordict: Any, tensordict_out: Any = None) -> Any:
        """Sample (see the class docstring) and write the out-keys (and log-prob) into ``tensordict_out``
        (default: ``tensordict``), which is returned."""
        if tensordict_out is None:
            tensordict_out = tensordict
        dist = self.get_dist(tensordict)
        sample = self._sample(dist)
        if isinstance(sample, _Tensor):
            keys = self._sample_keys
            if len(keys) != 1:
                raise RuntimeError(f"{type(self).__name__}: the distribution returned one tensor but out_keys are {keys}.")
            if keys[0] != "_":
                tensordict_out.set(keys[0], sample)
            if self.return_log_prob:
                lp = _reduce_to(dist.log_prob(sample), _holder_batch_dims(tensordict_out, keys[0]))
                tensordict_out.set(self.log_prob_key, lp)
        elif getattr(type(sample), "_is_tensor_collection", False):
            if self.return_log_prob:
                lp = dist.log_prob(sample, aggregate_probabilities=True) if isinstance(dist, CompositeDistribution) else dist.log_prob(sample)
                lp = _reduce_to(lp, tensordict_out.batch_dims)
            tensordict_out.update(sample)
            if self.return_log_prob:
                tensordict_out.set(self.log_prob_key, lp)
        else:
            keys = self._sample_keys
            if len(keys) != len(sample):
                raise RuntimeError(f"{type(self).__name__}: the distribution returned {len(sample)} values but out_keys are {keys}.")
            for key, value in zip(keys, sample):
                if key != "_":
                    tensordict_out.set(key, value)
            if self.return_log_prob:
                lp = _reduce_to(dist.log_prob(*sample), _holder_batch_dims(tensordict_out, keys[0]))
                tensordict_out.set(self.log_prob_key, lp)
        return tensordict_out


class ProbabilisticTensorDictSequential(TensorDictSequential):
    """A :class:`~tdict.nn.TensorDictSequential` whose last step is a :class:`ProbabilisticTensorDictModule`.

    Calling it runs the steps and samples; :meth:`get_dist` runs the deterministic steps (writing
    their outputs into the input, as tensordict 0.14 does) and returns the distribution.

    Args:
        *modules: the steps; the last one must be a :class:`ProbabilisticTensorDictModule`.

    Keyword Args:
        partial_tolerant, selected_out_keys, inplace: as in :class:`~tdict.nn.TensorDictSequential`.

    Raises:
        TypeError: when the last step is not probabilistic.

    Example:
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
        >>> td["action"].shape, td["sample_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
        >>> actor.log_prob(td).shape
        torch.Size([5])
    """

    def __init__(self, *modules: Any, partial_tolerant: bool = False, selected_out_keys: Any = None, inplace: bool | str | None = None) -> None:
        steps = list(modules[0].values()) if len(modules) == 1 and isinstance(modules[0], Mapping) else (
            list(modules[0]) if len(modules) == 1 and isinstance(modules[0], list) else list(modules)
        )
        if not steps or not isinstance(steps[-1], ProbabilisticTensorDictModule):
            last = type(steps[-1]).__name__ if steps else "nothing"
            raise TypeError(f"ProbabilisticTensorDictSequential: the last module must be a ProbabilisticTensorDictModule, got {last}.")
        super().__init__(*modules, partial_tolerant=partial_tolerant, selected_out_keys=selected_out_keys, inplace=inplace)

    @property
    def det_part(self) -> TensorDictSequential:
        """The deterministic steps (all but the last) as a :class:`~tdict.nn.TensorDictSequential`."""
        return TensorDictSequential(*self._steps[:-1])

    def get_dist_params(self, tensordict: Any) -> Any:
        """Run the deterministic steps on ``tensordict`` and return it."""
        for module in self._steps[:-1]:
            tensordict = module(tensordict)
        return tensordict

    def get_dist(self, tensordict: Any) -> D.Distribution:
        """Run the deterministic steps, then build the distribution from their outputs."""
        return self._steps[-1].get_dist(self.get_dist_params(tensordict))

    def build_dist_from_params(self, tensordict: Any) -> D.Distribution:
        """The distribution built from parameters already in ``tensordict`` (no step is run)."""
        return self._steps[-1].get_dist(tensordict)

    def log_prob(self, tensordict: Any) -> _Tensor:
        """The log-prob (batch shape) of the sample stored in ``tensordict`` under the distribution
        the steps compute from it."""
        dist = self.get_dist(tensordict)
        return self._steps[-1].log_prob(tensordict, dist=dist)

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, slice):
            # a slice need not end with the probabilistic step
            steps = self._steps[index]
            if steps and isinstance(steps[-1], ProbabilisticTensorDictModule):
                return type(self)(*steps)
            return TensorDictSequential(*steps)
        return super().__getitem__(index)
