"""ValueEstimatorBase: the TensorDict shell shared by the value estimators, and ValueEstimators.

An estimator maps keys to the plain functions of :mod:`rl_objectives.functional`: it reads
``state_value`` (running the value network when it has one), ``("next", "state_value")``,
``("next", "reward")``, ``("next", "done")`` and ``("next", "terminated")`` from a rollout
TensorDict shaped ``[*B, T]`` and writes ``"advantage"`` and ``"value_target"`` (batch shape, no
trailing singleton dim).
"""

from __future__ import annotations

import contextlib
import enum
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import torch
from tdict import TensorDict, TensorDictBase, unravel_key
from tdict.nn import TensorDictModuleBase, TensorKeysMixin, dispatch
from tdict.validation import check_positive_int
from torch import nn

from .._stack import user_stacklevel
from ..functional.value import _check_unit_interval

__all__ = ["ValueEstimatorBase", "ValueEstimators"]

_Tensor = torch.Tensor
_TRAJ_IDS = ("collector", "traj_ids")


class ValueEstimators(enum.Enum):
    """The value estimators a loss can build, by name (TorchRL's enum with short string values).

    A plain ``Enum`` as in TorchRL (``str(member)`` is ``"ValueEstimators.<NAME>"``); members also
    compare equal to their value string, and ``ValueEstimators("gae")`` also accepts a member name,
    case-insensitively.

    Examples:
        >>> ValueEstimators.GAE.value
        'GAE'
        >>> ValueEstimators("TD(lambda)") is ValueEstimators.TDLambda
        True
        >>> ValueEstimators("td0")
        <ValueEstimators.TD0: 'TD(0)'>
        >>> ValueEstimators("magae") is ValueEstimators.MAGAE  # MultiAgentGAE (A2C, PPO, REINFORCE)
        True
    """

    TD0 = "TD(0)"
    TD1 = "TD(1)"
    TDLambda = "TD(lambda)"
    GAE = "GAE"
    MAGAE = "Multi-agent generalized advantage estimate"
    VTrace = "VTrace"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.value == other
        return self is other

    __hash__ = enum.Enum.__hash__

    @classmethod
    def _missing_(cls, value: object) -> ValueEstimators | None:
        if isinstance(value, str):
            for member in cls:
                if member.name.lower() == value.lower() or member.value.lower() == value.lower():
                    return member
        return None


def _is_key(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, tuple) and len(value) > 0 and all(_is_key(part) for part in value)


def _nested(prefix: str, key: Any) -> tuple:
    return cast(tuple, unravel_key((prefix, key)))  # (a prefixed key is a tuple)


class ValueEstimatorBase(TensorKeysMixin, nn.Module):
    """Base of the value estimators: keys, value-network calls, time dim and the no-grad policy.

    Subclasses implement :meth:`_estimate` (the call of a functional estimator). The value network
    is kept as an attribute, not registered as a submodule (as in TorchRL): the loss that owns the
    estimator owns the network's parameters.

    The keys (``tensor_keys``, renamed with ``set_keys``): ``advantage`` and ``value_target``, where
    the results are written; ``value``, the state value, at the root (V(s_t)) and under ``"next"``
    (V(s_{t+1})); ``reward``, ``done`` and ``terminated``, read under ``"next"`` (``done`` stands in
    for a missing ``terminated``); ``sample_log_prob``, the behaviour policy's log-prob of the action
    (V-trace): ``"action_log_prob"`` as in TorchRL 0.14, or a list of per-head keys (summed) for a
    composite policy; ``steps_to_next_obs``, read at the root where present (``MultiStep`` writes
    it): the number of steps between an observation and its ``"next"`` one, which makes the discount
    of that step ``gamma ** steps_to_next_obs`` (TD(0), TD(1), TD(lambda) and GAE, as in TorchRL).

    Args:
        value_network: a TensorDict module writing the value key (``"state_value"`` by default,
            batch-shaped), or ``None`` when the values are already in the TensorDict.
        differentiable: when ``False`` (default) the targets are computed under
            ``torch.no_grad()`` (detached). When ``True``, as in TorchRL, gradients flow from the
            advantage and the value target to the inputs that require grad (the rewards, and the
            observations through V(s_t)), but never into the value network's parameters (nor into
            ``params``, nor the actor's for V-trace): the network runs with detached parameters, and
            V(s_{t+1}) is detached.
        skip_existing: reuse ``state_value`` / ``("next", "state_value")`` already in the
            TensorDict instead of running ``value_network`` (``None`` means ``False``: there is no
            global switch).
        shifted: compute V(s_t) and V(s_{t+1}) with one call of the value network on the
            observations at ``t = 0..T-1`` followed by the last next observation (``T + 1`` steps along
            the time dim): ``V(s_t)`` is the output at ``t``, ``V(s_{t+1})`` the output at ``t + 1``.
            Equal to the two-call result when ``td["next", obs][..., t] == td[obs][..., t + 1]``, i.e.
            when no trajectory ends inside the window or all ends are terminations (whose next value
            is ignored); after a truncation inside the window it reads the reset observation's value
            instead of the final observation's. Cannot be combined with ``target_params``.
        time_dim: the time dim among the TensorDict's batch dims; default: the dim named ``"time"``
            when names are set, else the last batch dim.
        value_chunk_size: run the value network on chunks of at most this many elements along
            ``value_chunk_dim`` (bounded memory for long rollouts; the values are concatenated).
        num_chunks: run it on this many near-equal chunks instead (``num_chunk``: TorchRL's alias).
            Exclusive with ``value_chunk_size``.
        value_chunk_dim: the batch dim the chunks split (default 0).
        shifted_budget: TorchRL's number of extra time slots of the ``shifted`` call. Only ``1`` (the
            ``T + 1`` single call described above) is supported; other values raise
            ``NotImplementedError``.
        group_key: an integer entry (one id per batch element, e.g. a task id) within whose groups
            the estimator's standardisation (``average_rewards``, ``average_gae``, ``average_adv``) is
            done instead of over the whole batch, as TorchRL does.
        device: where tensor coefficients (``gamma``, ``lmbda``) live: with a device they are
            registered as buffers there (as TorchRL's); without, numbers stay Python floats.
        deactivate_vmap: TorchRL's switch from ``torch.vmap`` to a loop. These estimators call the
            value network directly, without vmap, so it changes nothing; accepted (a bool).
        advantage_key, value_target_key, value_key: deprecated (``DeprecationWarning``): the keys
            of :meth:`set_keys` (``advantage``, ``value_target``, ``value``), set at construction.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.value import TD0Estimator
        >>> est = TD0Estimator(gamma=0.5, value_network=None)
        >>> est.set_keys(value="v").tensor_keys.value
        'v'
        >>> td = TensorDict({"v": torch.zeros(4), "next": {"v": torch.ones(4), "reward": torch.ones(4),
        ...     "done": torch.zeros(4, dtype=torch.bool)}}, batch_size=[4])
        >>> est(td)["value_target"]
        tensor([1.5000, 1.5000, 1.5000, 1.5000])
    """

    gamma: float | torch.Tensor  # the discount: a float attribute or a buffer (_set_coefficient)

    value_network: TensorDictModuleBase | None  # kept in __dict__, not a submodule (see __init__)

    default_keys: ClassVar[Mapping[str, Any]] = {
        "advantage": "advantage",
        "value_target": "value_target",
        "value": "state_value",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "sample_log_prob": "action_log_prob",
        "steps_to_next_obs": "steps_to_next_obs",
    }
    accepts_key_lists: ClassVar[frozenset] = frozenset({"sample_log_prob"})
    # whether value_estimate needs V(s_t) (GAE, V-trace) or only the next values (TD estimators)
    _target_needs_value = True
    # whether the estimate of a step depends on the later steps (a recursion along time): then the
    # steps must be in time order (only TD(0) works on a shuffled, flattened batch)
    recursive_in_time = True
    # ``estimator.gamma = 0.9`` (also ``lmbda``) is checked and takes effect at the next call
    _coefficients = frozenset({"gamma", "lmbda"})

    def __init__(
        self,
        *,
        value_network: Any = None,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        shifted: bool = False,
        time_dim: int | None = None,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key: Any = None,
        device: Any = None,
        deactivate_vmap: bool = False,
        advantage_key: Any = None,
        value_target_key: Any = None,
        value_key: Any = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if value_network is not None and not callable(value_network):
            raise TypeError(
                f"{name}: value_network must be a TensorDict module or None, got {type(value_network).__name__}."
            )
        if time_dim is not None and (not isinstance(time_dim, int) or isinstance(time_dim, bool)):
            raise TypeError(f"{name}: time_dim must be an int or None, got {type(time_dim).__name__}.")
        for arg, value in (
            ("value_chunk_size", value_chunk_size),
            ("num_chunks", num_chunks),
            ("num_chunk", num_chunk),
            ("shifted_budget", shifted_budget),
        ):
            check_positive_int(name, arg, value, allow_none=arg != "shifted_budget")
        if num_chunks is not None and num_chunk is not None and num_chunks != num_chunk:
            raise ValueError(f"{name}: num_chunks={num_chunks} and its alias num_chunk={num_chunk} differ.")
        num_chunks = num_chunk if num_chunks is None else num_chunks
        if value_chunk_size is not None and num_chunks is not None:
            raise ValueError(f"{name}: value_chunk_size and num_chunks exclude each other; pass one.")
        if isinstance(value_chunk_dim, bool) or not isinstance(value_chunk_dim, int):
            raise TypeError(f"{name}: value_chunk_dim must be an int, got {type(value_chunk_dim).__name__}.")
        if shifted_budget != 1:
            raise NotImplementedError(
                f"{name}: shifted_budget={shifted_budget} is not supported: shifted=True makes one T + 1 call "
                "(shifted_budget=1); use shifted=False (two calls) for rollouts with truncations inside."
            )
        if not isinstance(deactivate_vmap, bool):
            raise TypeError(f"{name}: deactivate_vmap must be a bool, got {type(deactivate_vmap).__name__}.")
        if group_key is not None and not _is_key(group_key):
            raise ValueError(f"{name}: group_key must be a key (str or tuple of str) or None, got {group_key!r}.")
        self._device = None if device is None else torch.device(device)  # a bad device raises here
        # not a registered submodule (TorchRL does the same): the owning loss holds the parameters
        self.__dict__["value_network"] = value_network
        self.differentiable = bool(differentiable)
        self.skip_existing = bool(skip_existing)
        self.shifted = bool(shifted)
        self.time_dim = time_dim
        self.value_chunk_size = value_chunk_size
        self.num_chunks = num_chunks
        self.value_chunk_dim = value_chunk_dim
        self.shifted_budget = shifted_budget
        self.group_key = None if group_key is None else unravel_key(group_key)
        self.deactivate_vmap = deactivate_vmap
        renames = {
            k: v
            for k, v in (("advantage", advantage_key), ("value_target", value_target_key), ("value", value_key))
            if v is not None
        }
        if renames:
            warnings.warn(
                f"{name}: {', '.join(f'{k}_key' for k in renames)} in the constructor is deprecated; call "
                f"set_keys({', '.join(f'{k}=...' for k in renames)}) instead.",
                DeprecationWarning,
                stacklevel=user_stacklevel(),
            )
            self.set_keys(**renames)

    def __setattr__(self, name: str, value: Any) -> None:
        # ``estimator.gamma = 0.95`` after construction: checked like the constructor's value
        if name in self._coefficients and "_device" in self.__dict__:
            self._set_coefficient(name, value)
            return
        super().__setattr__(name, value)

    def _set_coefficient(self, name: str, value: Any) -> None:
        """Set the discount or lambda ``name``: a float attribute, or a registered buffer for a tensor
        (so ``.to(device)`` moves it), on the estimator's ``device`` when one was given (then a number
        becomes a buffer too, as in TorchRL). A number assigned to a scalar buffer is written into it
        in place (device and dtype kept; a compiled call reads it without recompiling). A value
        outside ``[0, 1]`` is refused, naming it, before anything changes."""
        owner = type(self).__name__
        if isinstance(value, bool) or not isinstance(value, (_Tensor, int, float)):
            raise TypeError(f"{owner}: {name} must be a number or a tensor, got {type(value).__name__}.")
        _check_unit_interval(owner, name, value)
        buffer = self._buffers.get(name)
        if not isinstance(value, _Tensor) and buffer is not None and buffer.numel() == 1:
            with torch.no_grad():
                buffer.fill_(float(value))
            return
        self._buffers.pop(name, None)
        self.__dict__.pop(name, None)
        device = self._device
        if isinstance(value, _Tensor):
            self.register_buffer(name, value if device is None else value.to(device))
        elif device is None:
            self.__dict__[name] = float(value)
        else:
            self.register_buffer(name, torch.tensor(float(value), device=device))

    # ------------------------------------------------------------------ keys
    @property
    def in_keys(self) -> list:
        """The keys read: the value network's in-keys at the root and under ``"next"`` (or the value
        key there when there is no network), and the next reward, done and terminated."""
        keys = self.tensor_keys
        net = self.value_network
        base = list(net.in_keys) if net is not None else [keys.value]
        out = base + [_nested("next", key) for key in base]
        out += [_nested("next", keys.reward), _nested("next", keys.done), _nested("next", keys.terminated)]
        if self.group_key is not None and self.group_key not in out:
            out.append(self.group_key)
        return out

    @property
    def out_keys(self) -> list:
        """The keys written: advantage and value target."""
        return [self.tensor_keys.advantage, self.tensor_keys.value_target]

    # ------------------------------------------------------------------ helpers
    def _resolve_time_dim(self, tensordict: Any, time_dim: int | None = None) -> int:
        ndim = tensordict.batch_dims
        name = type(self).__name__
        if ndim == 0:
            raise ValueError(
                f"{name}: the tensordict needs a time dim among its batch dims, got batch_size {tuple(tensordict.batch_size)}."
            )
        if time_dim is None:
            time_dim = self.time_dim
        if time_dim is not None:
            if isinstance(time_dim, bool) or not isinstance(time_dim, int) or not -ndim <= time_dim < ndim:
                raise ValueError(
                    f"{name}: time_dim={time_dim!r} is out of range for batch_size {tuple(tensordict.batch_size)}."
                )
            return time_dim % ndim
        names = tensordict.names
        if "time" in names:
            return names.index("time")
        return ndim - 1

    def _read(self, tensordict: Any, key: Any, where: str) -> _Tensor:
        try:
            return tensordict.get(key)
        except KeyError:
            raise KeyError(
                f"{type(self).__name__}: the tensordict misses {where}; keys present: "
                f"{sorted(map(str, tensordict.keys(True, True)))}."
            ) from None

    def _chunks(self, tensordict: Any) -> tuple[int, list] | None:
        """``(dim, sizes)`` of the value network's chunked calls, or ``None`` for one call."""
        if self.value_chunk_size is None and self.num_chunks is None:
            return None
        ndim = tensordict.batch_dims
        if not -ndim <= self.value_chunk_dim < ndim:
            raise ValueError(
                f"{type(self).__name__}: value_chunk_dim={self.value_chunk_dim} is out of range for batch_size {tuple(tensordict.batch_size)}."
            )
        dim = self.value_chunk_dim % ndim
        n = tensordict.batch_size[dim]
        if self.num_chunks is not None:
            k = min(self.num_chunks, n)  # as torch.tensor_split: the first n % k chunks are one longer
            sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        else:
            assert self.value_chunk_size is not None  # one of the two is set (checked above)
            sizes = [min(self.value_chunk_size, n - start) for start in range(0, n, self.value_chunk_size)]
        return None if len(sizes) <= 1 else (dim, sizes)

    def _call_net(self, tensordict: Any) -> None:
        """The value network on ``tensordict``, in chunks when asked (only the value key is kept)."""
        net = self.value_network
        assert net is not None  # called only with a value network
        chunks = self._chunks(tensordict)
        if chunks is None:
            net(tensordict)
            return
        dim, sizes = chunks
        key = self.tensor_keys.value
        parts = [self._written_value(net(part), repr(key)) for part in tensordict.split(sizes, dim)]
        tensordict.set(key, torch.cat(parts, dim))

    def _run_value_network(self, tensordict: Any, params: Any) -> None:
        net = self.value_network
        assert net is not None  # called only with a value network
        if params is None and self.differentiable and isinstance(net, nn.Module):
            params = TensorDict.from_module(net)
        if params is None:
            self._call_net(tensordict)
            return
        # TorchRL holds the value network out of the graph: gradients reach its inputs, never its parameters
        with params.detach().to_module(net, preserve_module_state=False):
            self._call_net(tensordict)

    def _group_ids(self, tensordict: Any) -> _Tensor | None:
        """The ids under ``group_key`` (``None`` when it is unset)."""
        if self.group_key is None:
            return None
        return self._read(tensordict, self.group_key, f"the group ids {self.group_key!r} (group_key)")

    def _written_value(self, tensordict: Any, where: str) -> _Tensor:
        key = self.tensor_keys.value
        try:
            return tensordict.get(key)
        except KeyError:
            net = self.value_network
            assert net is not None  # read after the network ran
            raise KeyError(
                f"{type(self).__name__}: value_network did not write {where} (its out_keys: "
                f"{list(net.out_keys)}); set the value key with set_keys(value=...)."
            ) from None

    def _shifted_values(self, tensordict: Any, params: Any, time_dim: int) -> tuple[_Tensor, _Tensor]:
        net = self.value_network
        assert net is not None  # called only with a value network
        next_td = tensordict.get("next")
        in_keys = list(net.in_keys)
        steps = tensordict.batch_size[time_dim]
        last = (slice(None),) * time_dim + (slice(steps - 1, steps),)
        data_in = torch.cat([tensordict.select(*in_keys), next_td.select(*in_keys)[last]], time_dim)
        self._run_value_network(data_in, params)
        both = self._written_value(data_in, "the value key")
        value, next_value = both.narrow(time_dim, 0, steps), both.narrow(time_dim, 1, steps).detach()
        key = self.tensor_keys.value
        tensordict.set(key, value)
        next_td.set(key, next_value)
        return value, next_value

    def _values(self, tensordict: Any, params: Any, target_params: Any, time_dim: int, need_value: bool) -> tuple:
        """``(V(s_t) or None, V(s_{t+1}))``, running the value network where needed."""
        key = self.tensor_keys.value
        next_key = _nested("next", key)
        net = self.value_network
        if net is None:
            hint = "the value network is None, so the values must be in the tensordict"
            value = self._read(tensordict, key, f"{key!r} ({hint})") if need_value else None
            return value, self._read(tensordict, next_key, f"{next_key!r} ({hint})")
        have_value = self.skip_existing and key in tensordict
        have_next = self.skip_existing and next_key in tensordict
        if self.shifted and not have_next and (need_value and not have_value or not need_value):
            if target_params is not None and target_params is not params:
                raise ValueError(
                    f"{type(self).__name__}: shifted=True calls the value network once, so it cannot use separate target_params."
                )
            value, next_value = self._shifted_values(tensordict, params, time_dim)
            return (value if need_value else None), next_value
        if need_value and not have_value:
            self._run_value_network(tensordict, params)
        if not have_next:
            self._run_value_network(tensordict.get("next"), target_params if target_params is not None else params)
        value = self._written_value(tensordict, repr(key)) if need_value else None
        next_value = self._written_value(tensordict.get("next"), repr(next_key))
        # the bootstrap V(s_{t+1}) the network computes is a target: no gradient through it (as TorchRL)
        return value, (next_value if have_next else next_value.detach())

    def _check_shapes(self, named: list, batch_size: torch.Size) -> None:
        """All ``(key, tensor)`` pairs share one shape (per-step scalars never broadcast)."""
        ref_key, ref = named[0]
        for key, value in named[1:]:
            if value.shape != ref.shape:
                # (a nested key is shown flat: ("next", ("a", "b")) reads ("next", "a", "b"))
                key, ref_key = (unravel_key(k) if isinstance(k, tuple) else k for k in (key, ref_key))
                raise ValueError(
                    f"{type(self).__name__}: {key!r} has shape {tuple(value.shape)} but {ref_key!r} has shape "
                    f"{tuple(ref.shape)} (batch_size {tuple(batch_size)}); per-step entries must have the same shape, "
                    "they are never broadcast (a [B, T] vs [B, T, 1] mix is a bug upstream)."
                )

    @staticmethod
    def _to_feature_shape(mask: _Tensor, shape: torch.Size, batch_size: torch.Size) -> _Tensor:
        """A batch-shaped per-step tensor expanded over a multi-objective reward's feature dims.

        Only real feature dims expand: a reward whose extra dims are all 1 (``[B, T, 1]``) is the
        trailing-singleton mix the shape check rejects.
        """
        extra = shape[len(batch_size) :]
        if (
            mask.shape == batch_size
            and len(extra) > 0
            and shape[: len(batch_size)] == batch_size
            and any(n != 1 for n in extra)
        ):
            return mask.reshape(*batch_size, *([1] * (len(shape) - len(batch_size)))).expand(shape)
        return mask

    def _inputs(self, tensordict: Any, time_dim: int) -> tuple:
        """The next reward, done and terminated, checked (before any network runs)."""
        keys = self.tensor_keys
        # (a sub-TensorDict: _read is typed for the tensor entries it reads everywhere else)
        next_td = cast(
            TensorDictBase,
            self._read(tensordict, "next", "the 'next' entry (a rollout holds ('next', reward/done/...))"),
        )
        reward, done = next_td.get(keys.reward, None), next_td.get(keys.done, None)
        if reward is None:  # (the names are built only for the error)
            reward = self._read(next_td, keys.reward, repr(_nested("next", keys.reward)))
        if done is None:
            done = self._read(next_td, keys.done, repr(_nested("next", keys.done)))
        terminated = next_td.get(keys.terminated, None)
        if terminated is None:
            terminated = done
        for key, mask in ((keys.done, done), (keys.terminated, terminated)):
            if mask.dtype is not torch.bool:
                raise TypeError(
                    f"{type(self).__name__}: {_nested('next', key)!r} must be bool, got dtype {mask.dtype}."
                )
        shape = reward.shape
        if done.shape != shape or terminated.shape != shape:  # (the common case needs neither step)
            batch = tensordict.batch_size
            done = self._to_feature_shape(done, shape, batch)
            terminated = self._to_feature_shape(terminated, shape, batch)
            self._check_shapes(
                [(("next", keys.reward), reward), (("next", keys.done), done), (("next", keys.terminated), terminated)],
                batch,
            )
        return reward, done, terminated

    def _step_discount(self, tensordict: Any, reward: _Tensor) -> float | _Tensor:
        """``gamma``, or ``gamma ** steps_to_next_obs`` laid out like ``reward`` when the batch holds
        the step counts of n-step transitions (``MultiStep``)."""
        key = self.tensor_keys.steps_to_next_obs
        steps = tensordict.get(key, None)
        if steps is None:
            return self.gamma
        batch = tensordict.batch_size
        if steps.numel() == batch.numel() and reward.shape[: len(batch)] == batch:  # per step, over any features
            steps = steps.reshape(*batch, *([1] * (reward.ndim - len(batch))))
        elif steps.numel() == reward.numel():
            steps = steps.reshape(reward.shape)
        else:
            raise ValueError(
                f"{type(self).__name__}: {key!r} must hold one step count per step (batch {tuple(batch)}) or per "
                f"reward ({tuple(reward.shape)}), got shape {tuple(steps.shape)}."
            )
        return self.gamma ** steps.to(reward.dtype)

    # ------------------------------------------------------------------ calls
    def _prepare_signals(self, reward: _Tensor, done: _Tensor, terminated: _Tensor, value: _Tensor) -> tuple:
        """A hook to lay the reward and the masks out like the values (MultiAgentGAE broadcasts a
        team reward over the agents); the identity here."""
        return reward, done, terminated

    def _estimate(
        self,
        tensordict: Any,
        value: _Tensor | None,
        next_value: _Tensor,
        reward: _Tensor,
        done: _Tensor,
        terminated: _Tensor,
        time_dim: int,
    ) -> tuple[_Tensor | None, _Tensor]:
        """``(advantage, value_target)`` from the checked inputs; ``advantage`` may be None when
        ``value`` is None (value targets only)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _estimate.")

    def _check_time_order(self, tensordict: Any, time_dim: int) -> None:
        """Refuse a batch whose steps are not in time order, as far as the data can tell.

        A recursion along time (GAE, TD(1), TD(lambda), V-trace) over a shuffled or flattened
        minibatch mixes unrelated steps and gives wrong advantages without any error: the classic
        mistake of calling a loss on minibatches before running ``loss.value_estimator(batch)`` on
        the collected batch. Collectors tag every step with ``("collector", "traj_ids")``; along the
        time dim, a step may only follow a step of the same trajectory or a done step. Batches
        without trajectory ids (hand-built rollouts) are trusted, as in TorchRL.
        """
        traj = tensordict.get(_TRAJ_IDS, None)
        batch = tensordict.batch_size
        if not self.recursive_in_time or traj is None or batch[time_dim] < 2 or tuple(traj.shape) != tuple(batch):
            return
        done = tensordict.get(_nested("next", self.tensor_keys.done), None)
        if done is None:
            return  # _inputs names the missing key
        if tuple(done.shape) != tuple(batch):  # per-agent or trailing-singleton done flags
            done = done.reshape(*batch, -1).any(-1)
        ids, ends = traj.movedim(time_dim, -1), done.movedim(time_dim, -1)
        jumps = (ids[..., 1:] != ids[..., :-1]) & ~ends[..., :-1]
        if bool(jumps.any()):
            where = [int(i) for i in jumps.nonzero()[0]]
            pos, t = tuple(where[:-1]), where[-1]
            raise ValueError(
                f"{type(self).__name__}: the batch is not in time order along dim {time_dim} (batch_size {tuple(batch)}): "
                f"step {t} belongs to trajectory {int(ids[pos + (t,)])} and step {t + 1} to trajectory "
                f"{int(ids[pos + (t + 1,)])} (('collector', 'traj_ids')) with no done between them, so a recursion along "
                "time would mix unrelated steps and give wrong advantages: is this a shuffled or flattened minibatch? "
                "Estimate on the whole collected batch before flattening, `loss.value_estimator(batch)` (the minibatches "
                "then carry the advantage and the loss uses it), or give the estimator the right time_dim."
            )

    def _run(
        self, tensordict: Any, params: Any, target_params: Any, need_value: bool, time_dim: int | None = None
    ) -> tuple:
        keys = self.tensor_keys
        time_dim = self._resolve_time_dim(tensordict, time_dim)
        reward, done, terminated = self._inputs(tensordict, time_dim)
        self._check_time_order(tensordict, time_dim)
        value, next_value = self._values(tensordict, params, target_params, time_dim, need_value)
        reward, done, terminated = self._prepare_signals(reward, done, terminated, next_value)
        named = [(_nested("next", keys.reward), reward), (_nested("next", keys.value), next_value)]
        if value is not None:
            named.insert(0, (keys.value, value))
        self._check_shapes(named, tensordict.batch_size)
        return self._estimate(tensordict, value, next_value, reward, done, terminated, time_dim)

    def _grad_context(self) -> Any:
        # (with gradients already off, as in the losses' target computations, there is nothing to switch)
        return contextlib.nullcontext() if self.differentiable or not torch.is_grad_enabled() else torch.no_grad()

    @dispatch(auto_batch_size=True)
    def forward(
        self, tensordict: Any, *, params: Any = None, target_params: Any = None, time_dim: int | None = None
    ) -> Any:
        """Write the advantage and the value target into ``tensordict`` and return it.

        Args:
            tensordict: a rollout, batch ``[*B, T]``. Keyword tensors named after :attr:`in_keys`
                (nested keys joined with ``"_"``: ``obs=..., next_reward=...``) instead give
                ``(advantage, value_target)``.
            params: parameters for the value network (a TensorDict as ``TensorDict.from_module``
                gives), swapped in for the calls; ``None`` uses the network's own.
            target_params: parameters for the next-state value; default ``params``.
            time_dim: the batch dim of time for this call (default: the estimator's ``time_dim``,
                else the dim named ``"time"``, else the last one).

        Raises:
            KeyError: naming a missing entry. ValueError: on a shape mix, naming the keys.
        """
        keys = self.tensor_keys
        with self._grad_context():
            advantage, value_target = self._run(tensordict, params, target_params, True, time_dim)
        tensordict.set(keys.advantage, advantage)
        tensordict.set(keys.value_target, value_target)
        return tensordict

    def value_estimate(
        self, tensordict: Any, *, params: Any = None, target_params: Any = None, time_dim: int | None = None
    ) -> _Tensor:
        """The value target only (nothing but the value network's outputs is written).

        TD estimators need only the next values here, so the value network runs on
        ``tensordict["next"]`` alone. ``time_dim`` as in :meth:`forward`.
        """
        with self._grad_context():
            _, value_target = self._run(tensordict, params, target_params, self._target_needs_value, time_dim)
        return value_target

    def extra_repr(self) -> str:
        return f"differentiable={self.differentiable}, shifted={self.shifted}, time_dim={self.time_dim}"


def _standardize(x: _Tensor, eps: float, keep_dim: int | None = None, groups: _Tensor | None = None) -> _Tensor:
    """``(x - mean) / std`` (unbiased std, at least ``eps``) over every element, or over all dims but
    ``keep_dim``; with ``groups`` (integer ids, shaped like ``x`` or a leading part of it) within each
    group instead (and each ``keep_dim`` index apart)."""
    if groups is None:
        if keep_dim is None:
            return (x - x.mean()) / x.std().clamp_min(eps)
        dims = [d for d in range(x.ndim) if d != keep_dim % x.ndim]
        return (x - x.mean(dims, keepdim=True)) / x.std(dims, keepdim=True).clamp_min(eps)
    if (
        groups.is_floating_point()
        or groups.dtype is torch.bool
        or groups.ndim > x.ndim
        or groups.shape != x.shape[: groups.ndim]
    ):
        raise ValueError(
            f"group ids of shape {tuple(groups.shape)} and dtype {groups.dtype} cannot group values of shape {tuple(x.shape)}: "
            "they must be integers shaped like the values' leading dims."
        )
    ids = groups.reshape(groups.shape + (1,) * (x.ndim - groups.ndim)).expand(x.shape)
    if keep_dim is not None:  # each agent (say) is its own set of groups
        dim = keep_dim % x.ndim
        index = torch.arange(x.shape[dim], device=x.device).reshape([-1 if d == dim else 1 for d in range(x.ndim)])
        ids = ids * x.shape[dim] + index
    _, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
    flat = x.reshape(-1)
    n_groups = int(inverse.max()) + 1
    count = torch.zeros(n_groups, dtype=flat.dtype, device=flat.device).index_add_(0, inverse, torch.ones_like(flat))
    mean = torch.zeros_like(count).index_add_(0, inverse, flat) / count
    centred = flat - mean[inverse]
    var = torch.zeros_like(count).index_add_(0, inverse, centred.square()) / (count - 1).clamp_min(1)
    return (centred / var.sqrt().clamp_min(eps)[inverse]).reshape(x.shape)
