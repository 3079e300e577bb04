"""Trainer hooks that drive the optimisation: the hook base class, the optimizer step, target-network
updates, collector weight updates and CUDA cache clearing (``torchrl.trainers`` names).

A hook is a callable registered at one stage of :meth:`Trainer.train
<rl_objectives.trainers.Trainer.train>`; hook objects know their own stage(s) and register themselves
with ``hook.register(trainer)``. A hook with state (counters, statistics, an optimizer) also registers
itself as a trainer module, so the trainer's ``state_dict`` saves it and ``load_state_dict`` restores it.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tdict import TensorDictBase
from tdict.validation import check_one_of, check_positive_int
from torch import nn

from ..losses.common import total_loss

__all__ = ["ClearCudaCache", "OptimizerHook", "TargetNetUpdaterHook", "TrainerHookBase", "UpdateWeights"]


def _int_state(owner: str, state: Any, names: Sequence[str]) -> dict[str, int]:
    """Checks a hook state dict holding integer counters and returns it (nothing is set here)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{owner}.load_state_dict: expected a mapping, got {type(state).__name__}.")
    missing = [n for n in names if n not in state]
    if missing:
        raise KeyError(f"{owner}.load_state_dict: missing {missing}; got keys {sorted(state)}.")
    out = {}
    for n in names:
        value = state[n]
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{owner}.load_state_dict: {n!r} must be an int, got {type(value).__name__}.")
        out[n] = value
    return out


class TrainerHookBase(abc.ABC):
    """Base class of the trainer hooks: a callable with a state and a ``register`` method.

    Subclasses implement ``__call__`` and :meth:`register` (which stage(s) of the trainer they run at);
    stateful hooks override :meth:`state_dict` / :meth:`load_state_dict`.

    Examples:
        >>> from rl_objectives.trainers import TrainerHookBase
        >>> class CountBatches(TrainerHookBase):
        ...     def __init__(self):
        ...         self.count = 0
        ...     def __call__(self, batch):
        ...         self.count += 1
        ...     def state_dict(self):
        ...         return {"count": self.count}
        ...     def load_state_dict(self, state):
        ...         self.count = state["count"]
        ...     def register(self, trainer, name="count_batches"):
        ...         trainer.register_op("batch_process", self)
        ...         trainer.register_module(name, self)
        >>> hook = CountBatches()
        >>> hook(None); hook.state_dict()
        {'count': 1}
    """

    def state_dict(self) -> dict[str, Any]:
        """The hook's state (plain Python values and tensors); stateless hooks return ``{}``."""
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (stateless hooks accept only ``{}``)."""
        if not isinstance(state_dict, Mapping) or len(state_dict):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: this hook has no state; expected {{}}, got {state_dict!r}."
            )

    @abc.abstractmethod
    def register(self, trainer: Any, name: str | None = None) -> None:
        """Registers the hook's operation(s) with ``trainer`` (and its state, when it has one)."""


class OptimizerHook(TrainerHookBase):
    """Back-propagates the loss, clips or measures the gradients and steps an optimizer.

    The trainer registers one for its ``optimizer`` argument; register more (under other names) to
    train parts of a loss with their own optimizers, e.g. an actor and a critic. At the trainer's
    ``"optimizer"`` stage it is called as ``hook(losses_td, clip_grad_norm, clip_norm, index)``: it sums
    the ``loss_components`` entries (default: every entry whose name starts with ``"loss"``), zeroes the
    gradients of its parameters (so another hook's backward pass never leaks into this step),
    back-propagates, clips, steps and zeroes the gradients again. It writes the gradient norm before
    clipping at ``"grad_norm_<index>"`` (unless ``measure_grad_norm=False`` and nothing is clipped).

    Clipping: with ``clip_grad_norm=True`` and a ``clip_norm``, the total norm is scaled down to at
    most ``clip_norm``; with ``clip_grad_norm=False`` and a ``clip_norm``, every partial derivative
    is clamped to ``[-clip_norm, clip_norm]``; without ``clip_norm`` nothing is clipped.

    Args:
        optimizer: a ``torch.optim.Optimizer`` (anything with ``param_groups``, ``step``,
            ``zero_grad``, ``state_dict`` and ``load_state_dict``).
        loss_components: the loss entries to sum; ``None``: those whose name starts with ``"loss"``.
        measure_grad_norm: measure and write the gradient norm when nothing is clipped (default
            ``True``); ``False`` spares one pass over every gradient per step where the norm is
            not wanted (clipping always measures it).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import OptimizerHook
        >>> w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
        >>> hook = OptimizerHook(torch.optim.SGD([w], lr=1.0))
        >>> out = hook(TensorDict(loss_a=w.sum(), loss_b=0.5 * w.sum()), True, 1.0, 0)
        >>> float(out["grad_norm_0"])  # norm of [1.5, 1.5], then clipped to norm 1
        2.1213...
        >>> w.detach()
        tensor([2.2929, 3.2929])
    """

    def __init__(
        self, optimizer: Any, loss_components: Sequence[str] | None = None, *, measure_grad_norm: bool = True
    ) -> None:
        missing = [
            a
            for a in ("param_groups", "step", "zero_grad", "state_dict", "load_state_dict")
            if not hasattr(optimizer, a)
        ]
        if missing:
            raise TypeError(
                f"OptimizerHook: optimizer must be a torch optimizer, got {type(optimizer).__name__} (no {missing})."
            )
        if loss_components is not None:
            if isinstance(loss_components, str) or not isinstance(loss_components, Sequence) or not loss_components:
                raise ValueError(
                    f"OptimizerHook: loss_components must be a non-empty list of loss names or None, got {loss_components!r}."
                )
            bad = [c for c in loss_components if not isinstance(c, str)]
            if bad:
                raise TypeError(f"OptimizerHook: loss_components must hold strings, got {bad!r}.")
            loss_components = list(loss_components)
        self.optimizer = optimizer
        self.loss_components = loss_components
        self.measure_grad_norm = bool(measure_grad_norm)

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _loss(self, losses_td: TensorDictBase) -> torch.Tensor:
        try:
            return total_loss(losses_td, self.loss_components)
        except (KeyError, ValueError) as err:
            raise type(err)(f"OptimizerHook: {err.args[0].removeprefix('total_loss: ')}") from None

    def _grad_clip(self, params: list[torch.Tensor], clip_grad_norm: bool, clip_norm: float | None) -> torch.Tensor:
        """The gradients' total norm (before clipping); clips them in place as the docstring says."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.zeros(())
        if len({(g.dtype, g.device) for g in grads}) > 1:  # mixed dtypes or devices: torch groups them
            norm = nn.utils.clip_grad_norm_(params, float("inf"))
            if clip_norm is not None:
                (nn.utils.clip_grad_norm_ if clip_grad_norm else nn.utils.clip_grad_value_)(params, clip_norm)
            return norm
        # torch's clip_grad_norm_ computes the same through several Python layers per call: on a small
        # network those cost more than the norms, and this runs at every gradient step
        # (torch's _foreach_* ops are not re-exported in its stubs: pyright reports them as private)
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))  # pyright: ignore[reportPrivateImportUsage]
        if clip_norm is not None:
            if clip_grad_norm:
                torch._foreach_mul_(grads, (clip_norm / (norm + 1e-6)).clamp(max=1.0))  # pyright: ignore[reportPrivateImportUsage]
            else:
                torch._foreach_clamp_min_(grads, -clip_norm)  # pyright: ignore[reportPrivateImportUsage]
                torch._foreach_clamp_max_(grads, clip_norm)  # pyright: ignore[reportPrivateImportUsage]
        return norm

    def __call__(
        self, losses_td: TensorDictBase, clip_grad_norm: bool = True, clip_norm: float | None = None, index: int = 0
    ) -> TensorDictBase:
        if not isinstance(losses_td, TensorDictBase):
            raise TypeError(
                f"OptimizerHook: expected the loss module's output TensorDict, got {type(losses_td).__name__}."
            )
        loss = self._loss(losses_td)
        if not loss.requires_grad:
            raise RuntimeError(
                "OptimizerHook: the summed loss does not require grad (was it computed under torch.no_grad()?)."
            )
        params = self._params()
        for p in params:  # zero_grad(set_to_none=True), without the optimizer's profiling wrapper
            p.grad = None
        loss.backward()
        measured = clip_norm is not None or self.measure_grad_norm
        grad_norm = self._grad_clip(params, clip_grad_norm, clip_norm) if measured else None
        self.optimizer.step()
        for p in params:
            p.grad = None
        if grad_norm is not None:
            losses_td.set(f"grad_norm_{index}", grad_norm)
        return losses_td

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def register(self, trainer: Any, name: str = "optimizer") -> None:
        trainer.register_op("optimizer", self)
        trainer.register_module(name, self)


class UpdateWeights(TrainerHookBase):
    """Calls ``collector.update_policy_weights_()`` every ``update_weights_interval`` batches.

    Runs at the ``"post_steps"`` stage, after the optimisation steps of a batch, so the collector's
    policy copy follows the trained one (multi-process and remote collectors keep their own copy).

    Args:
        collector: anything with ``update_policy_weights_()``.
        update_weights_interval: number of calls between two updates.
        policy_weights_getter: optional callable returning the weights to send; they are passed to
            ``update_policy_weights_``.

    Examples:
        >>> from rl_objectives.trainers import UpdateWeights
        >>> class Collector:
        ...     updates = 0
        ...     def update_policy_weights_(self):
        ...         self.updates += 1
        >>> collector = Collector()
        >>> hook = UpdateWeights(collector, update_weights_interval=2)
        >>> for _ in range(5):
        ...     hook()
        >>> collector.updates
        2
    """

    def __init__(
        self, collector: Any, update_weights_interval: int, policy_weights_getter: Callable[[], Any] | None = None
    ) -> None:
        if not callable(getattr(collector, "update_policy_weights_", None)):
            raise TypeError(
                f"UpdateWeights: collector must have an update_policy_weights_() method, got {type(collector).__name__}."
            )
        if policy_weights_getter is not None and not callable(policy_weights_getter):
            raise TypeError(
                f"UpdateWeights: policy_weights_getter must be callable or None, got {type(policy_weights_getter).__name__}."
            )
        self.collector = collector
        self.update_weights_interval = check_positive_int(
            "UpdateWeights", "update_weights_interval", update_weights_interval
        )
        self.policy_weights_getter = policy_weights_getter
        self.counter = 0

    def __call__(self) -> None:
        self.counter += 1
        if self.counter % self.update_weights_interval == 0:
            if self.policy_weights_getter is None:
                self.collector.update_policy_weights_()
            else:
                self.collector.update_policy_weights_(self.policy_weights_getter())

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.counter = _int_state("UpdateWeights", state_dict, ["counter"])["counter"]

    def register(self, trainer: Any, name: str = "update_weights") -> None:
        trainer.register_op("post_steps", self)
        trainer.register_module(name, self)


_UNITS = ("optim_steps", "frames")


def _trainer_frame_skip(owner: str, trainer: Any) -> int:
    """The trainer's ``frame_skip`` (1 when it has none), checked."""
    frame_skip = getattr(trainer, "frame_skip", 1)
    check_positive_int(f"{owner}.register", "trainer.frame_skip", frame_skip)
    return frame_skip


def _batch_frames(owner: str, batch: Any, frame_skip: int, trainer: Any = None) -> int:
    """The frames of a collected batch: the registering trainer's ``batch_frames`` (counted before
    its ``"batch_process"`` ops, which may shorten the batch), else ``batch.numel() * frame_skip``."""
    if not isinstance(batch, TensorDictBase):
        raise TypeError(
            f"{owner}: expected the collected TensorDict batch (to count its frames), got {type(batch).__name__}."
        )
    counted = getattr(trainer, "batch_frames", None)
    return counted if isinstance(counted, int) and counted > 0 else batch.numel() * frame_skip


class TargetNetUpdaterHook(TrainerHookBase):
    """Steps a target-network updater (:class:`~rl_objectives.SoftUpdate`, :class:`~rl_objectives.HardUpdate`).

    ``unit`` says what the updater's steps count:

    - ``"optim_steps"`` (default, TorchRL's rule): registered at ``"post_optim"``, the hook calls
      ``updater.step()`` after every optimizer step, so a ``HardUpdate`` copies every
      ``value_network_update_interval`` gradient steps and a ``SoftUpdate`` averages once per step.
    - ``"frames"``: registered at ``"batch_process"`` (once per collected batch, warm-up included,
      before the batch's optimisation steps), the hook calls ``updater.step(n)`` with the batch's
      frames, ``n = batch.numel() * trainer.frame_skip``. A ``HardUpdate`` then copies whenever the
      collected frames cross a multiple of ``value_network_update_interval`` (SB3's DQN counts its
      ``target_update_interval`` in env steps); a ``SoftUpdate`` applies ``n`` Polyak steps at once.

    How this relates to SB3: with ``n_envs`` parallel envs, SB3's DQN copies every
    ``max(target_update_interval // n_envs, 1)`` vector steps, during collection, hence with the
    weights of its last training phase. ``unit="frames"`` copies at the end of each collected batch in
    which the frame count crossed a multiple of ``N = value_network_update_interval``, before training
    on it, hence the same weights: when ``n_envs`` divides ``N`` and a batch is one SB3 rollout
    (``frames_per_batch = train_freq * n_envs``), the copies are SB3's. When ``n_envs`` does not
    divide ``N``, SB3's interval is ``max(N // n_envs, 1) * n_envs`` frames: pass that to match it.

    The updater's step counter (a ``HardUpdate``'s ``counter``, in the chosen unit) is part of the
    trainer state.

    Args:
        target_params_updater: anything with a ``step()`` method (``step(n)`` for ``unit="frames"``).
        unit: ``"optim_steps"`` or ``"frames"``, see above.

    Raises:
        TypeError: the updater has no ``step`` method, or one that takes no ``n`` with ``unit="frames"``.
        ValueError: ``unit`` is not one of the two.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives import HardUpdate, LossModule
        >>> from rl_objectives.trainers import TargetNetUpdaterHook
        >>> class L(LossModule):
        ...     def __init__(self, net):
        ...         super().__init__()
        ...         self.convert_to_functional(net, "net", create_target_params=True)
        >>> loss = L(TensorDictModule(nn.Linear(2, 1), in_keys=["x"], out_keys=["y"]))
        >>> hook = TargetNetUpdaterHook(HardUpdate(loss, value_network_update_interval=2))
        >>> hook(); hook(); hook.state_dict()
        {'counter': 2}
        >>> frames = TargetNetUpdaterHook(HardUpdate(loss, value_network_update_interval=100), unit="frames")
        >>> _ = frames(TensorDict(batch_size=[4, 16])); frames.state_dict()  # a batch of 4 envs x 16 steps
        {'counter': 64}
    """

    def __init__(self, target_params_updater: Any, *, unit: str = "optim_steps") -> None:
        step = getattr(target_params_updater, "step", None)
        if not callable(step):
            raise TypeError(
                f"TargetNetUpdaterHook: target_params_updater must have a step() method (e.g. SoftUpdate), "
                f"got {type(target_params_updater).__name__}."
            )
        check_one_of("TargetNetUpdaterHook", "unit", unit, _UNITS)
        if unit == "frames":
            try:
                inspect.signature(step).bind(1)
            except TypeError:
                raise TypeError(
                    f"TargetNetUpdaterHook: unit='frames' calls target_params_updater.step(n) with the frames of each "
                    f"batch, but {type(target_params_updater).__name__}.step{inspect.signature(step)} takes no n."
                ) from None
            except ValueError:  # no signature (a builtin): let the first call tell
                pass
        self.target_params_updater = target_params_updater
        self.unit = unit
        self.frame_skip = 1
        self._trainer = None  # the trainer registered with, whose batch_frames count the frames

    def __call__(self, tensordict: Any = None) -> Any:
        if self.unit == "frames":
            frames = _batch_frames("TargetNetUpdaterHook", tensordict, self.frame_skip, self._trainer)
            self.target_params_updater.step(frames)
        else:
            self.target_params_updater.step()
        return tensordict

    def state_dict(self) -> dict[str, Any]:
        counter = getattr(self.target_params_updater, "counter", None)
        return {} if counter is None else {"counter": int(counter)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if getattr(self.target_params_updater, "counter", None) is None:
            super().load_state_dict(state_dict)
            return
        self.target_params_updater.counter = _int_state("TargetNetUpdaterHook", state_dict, ["counter"])["counter"]

    def register(self, trainer: Any, name: str = "target_net_updater") -> None:
        frame_skip = _trainer_frame_skip("TargetNetUpdaterHook", trainer) if self.unit == "frames" else 1
        trainer.register_module(name, self)
        self.frame_skip, self._trainer = frame_skip, trainer
        trainer.register_op("batch_process" if self.unit == "frames" else "post_optim", self)


class ClearCudaCache(TrainerHookBase):
    """Empties the CUDA caching allocator every ``interval`` calls (no-op without CUDA).

    Registered at ``"pre_optim_steps"``.

    Args:
        interval: number of calls between two ``torch.cuda.empty_cache()``.

    Examples:
        >>> from rl_objectives.trainers import ClearCudaCache
        >>> hook = ClearCudaCache(interval=3)
        >>> for _ in range(7):
        ...     hook()
        >>> hook.count, hook.cleared
        (7, 2)
    """

    def __init__(self, interval: int) -> None:
        self.interval = check_positive_int("ClearCudaCache", "interval", interval)
        self.count = 0
        self.cleared = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1
        if self.count % self.interval == 0:
            self.cleared += 1
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()

    def register(self, trainer: Any, name: str | None = None) -> None:
        trainer.register_op("pre_optim_steps", self)
