"""Trainer: the collect -> (sample) -> loss -> optimizer loop, with hooks at fixed stages (``torchrl.trainers.Trainer``).

The trainer builds nothing itself: every specific operation (replay buffer, target updates, logging,
weight sync) is a hook registered at one of the stages of :meth:`Trainer.train`. Its state (frames,
optimizer steps, the loss module, the collector when it has a state, every registered module and
the random generators of torch, NumPy and Python) is saved with ``torch.save`` of plain state dicts
written atomically, and loaded with ``torch.load(weights_only=True)``: loading never unpickles
arbitrary objects. Registered modules with ``dumps(path)``/``loads(path)`` (a replay buffer with its
items) are saved whole into a folder beside the checkpoint file, which names it.
"""

from __future__ import annotations

import copy
import errno
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from tdict import TensorDictBase

from tdict.files import atomic_write
from tdict.seeding import check_rng_state, check_seed, rng_state, seed_everything, set_rng_state
from tdict.validation import check_non_negative_int, check_positive, check_positive_int
from .hooks import OptimizerHook

__all__ = ["HOOK_STAGES", "Trainer"]

# stage -> how its ops are called; the order is the order of :meth:`Trainer.train`
HOOK_STAGES = (
    "batch_process",  # op(batch) -> new batch or None, once per collected batch
    "pre_steps_log",  # op(batch) -> dict to log or None
    "pre_optim_steps",  # op()
    "process_optim_batch",  # op(batch) -> sample or None, once per optimisation step
    "post_loss",  # op(sample) (e.g. priority updates)
    "optimizer",  # op(losses_td, clip_grad_norm, clip_norm, index) -> losses_td or None
    "post_optim",  # op() (e.g. target-network updates)
    "post_optim_log",  # op(sample) -> dict to log or None
    "post_steps",  # op() (e.g. collector weight updates)
    "post_steps_log",  # op(batch) -> dict to log or None
)
_STATE_KEYS = ("collected_frames", "_last_log", "_last_save", "_optim_count")
_RESERVED = ("collector", "loss_module", "state", "rng")
_DUMPED = "__dumped_to__"  # a module saved into a folder: the checkpoint holds {_DUMPED: folder name}


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` that never leaves a half-written file at ``path`` (see :func:`atomic_write`).

    Examples:
        >>> import os, tempfile, torch
        >>> from rl_objectives.trainers.trainer import atomic_torch_save
        >>> path = os.path.join(tempfile.mkdtemp(), "state.pt")
        >>> atomic_torch_save({"step": 3, "w": torch.ones(2)}, path)
        >>> torch.load(path, weights_only=True)["step"]
        3
    """
    atomic_write(path, lambda f: torch.save(obj, f))


class Trainer:
    """A generic training loop driven by hooks (TorchRL's ``Trainer``).

    :meth:`train` iterates the collector; for every batch it runs the stages of :data:`HOOK_STAGES`:

    1. ``"batch_process"`` ops (``op(batch)``; a returned TensorDict replaces the batch), after the
       batch's frames (``batch.numel() * frame_skip``, counted on the collected batch) were added to
       ``collected_frames`` and set as ``batch_frames`` (what frame-counting hooks read: an op may
       shorten the batch it passes on, as n-step transitions holding steps back do);
    2. ``"pre_steps_log"`` ops (``op(batch)``, returned dicts are logged);
    3. once the warm-up is over (``collected_frames > init_random_frames``, see below):
       ``"pre_optim_steps"`` ops, then ``optim_steps_per_batch`` times: ``"process_optim_batch"`` ops
       turn the batch into a sample (e.g. a replay-buffer draw), ``loss_module(sample)``,
       ``"post_loss"`` ops (``op(sample)``), ``"optimizer"`` ops (backward, clipping, step; see
       :class:`OptimizerHook`), ``"post_optim"`` ops and ``"post_optim_log"`` ops; the loss entries
       averaged over the steps are logged with ``"optim_steps"``;
    4. ``"post_steps"`` ops (e.g. weight updates), ``"post_steps_log"`` ops;
    5. a checkpoint when ``save_trainer_interval`` frames passed since the last one.

    It stops once ``collected_frames >= total_frames`` (saving a final checkpoint) or when the
    collector is exhausted, and calls ``collector.shutdown()`` (when it exists) however it stops.

    Args (keyword-only):
        collector: any iterable of TensorDicts (batch ``[*B, T]``, time last); ``init_random_frames``,
            ``set_seed``, ``state_dict``/``load_state_dict`` and ``shutdown`` are used when present.
        total_frames: frames to collect.
        frame_skip: env frames per collected step.
        optim_steps_per_batch: optimisation steps per collected batch.
        init_random_frames: the warm-up, in frames as ``collected_frames`` counts them: no
            optimisation step (and no ``"pre_optim_steps"``/``"process_optim_batch"`` op) runs until
            more frames than this were collected. ``None`` (default): the collector's own warm-up,
            ``collector.init_random_frames * frame_skip`` (the collector counts its steps), 0 when the
            collector has none. Pass it when the collector's warm-up is not visible as that
            attribute (a multi-process collector passes it on to its workers, a plain iterable has
            none), or to train only after a warm-up of policy actions.
        loss_module: ``td -> TensorDict`` of losses; the ``"loss*"`` entries are summed.
        optimizer: registered as an :class:`OptimizerHook` named ``"optimizer"``; with ``None``,
            register one (or another ``"optimizer"`` op) before training.
        logger: anything with ``log_scalar(name, value, step=...)``; ``None``: nothing is logged.
        clip_grad_norm: clip the total gradient norm (``True``) or each gradient value (``False``).
        clip_norm: the clipping threshold; ``None``: no clipping (the norm is still measured).
        measure_grad_norm: the optimizer hook's option: ``False`` leaves the gradient norm out (not
            measured, not logged) when ``clip_norm`` is ``None``.
        progress_bar: show a tqdm progress bar (warns and does without when tqdm is missing).
        seed: when given, seeds the collector (``set_seed``), then torch, NumPy and Python's
            ``random`` with the seed the collector returns (as SB3's ``set_random_seed``).
        save_trainer_interval: frames between two checkpoints.
        log_interval: frames between two logger calls for the same name (the first value is logged).
        save_trainer_file: where checkpoints go (``None``: no checkpoints).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import Trainer
        >>> class Regression(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.lin = nn.Linear(2, 1)
        ...     def forward(self, td):
        ...         pred = self.lin(td["x"]).squeeze(-1)
        ...         return TensorDict(loss_mse=(pred - td["y"]).pow(2).mean())
        >>> x = torch.randn(4, 8, 2)
        >>> batches = [TensorDict(x=x, y=x.sum(-1), batch_size=[4, 8])] * 10
        >>> loss = Regression()
        >>> trainer = Trainer(collector=batches, total_frames=320, optim_steps_per_batch=5, loss_module=loss,
        ...                   optimizer=torch.optim.Adam(loss.parameters(), lr=0.05))
        >>> trainer.train()
        >>> trainer.collected_frames, trainer._optim_count
        (320, 50)
    """

    hook_stages = HOOK_STAGES

    def __init__(
        self,
        *,
        collector: Iterable[TensorDictBase],
        total_frames: int,
        frame_skip: int = 1,
        optim_steps_per_batch: int,
        init_random_frames: int | None = None,
        loss_module: Callable[[TensorDictBase], TensorDictBase],
        optimizer: Any = None,
        logger: Any = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        measure_grad_norm: bool = True,
        progress_bar: bool = False,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | os.PathLike | None = None,
    ) -> None:
        if not hasattr(collector, "__iter__"):
            raise TypeError(f"Trainer: collector must be an iterable of TensorDicts, got {type(collector).__name__}.")
        if not callable(loss_module):
            raise TypeError(
                f"Trainer: loss_module must be callable (td -> TensorDict of losses), got {type(loss_module).__name__}."
            )
        if logger is not None and not callable(getattr(logger, "log_scalar", None)):
            raise TypeError(
                f"Trainer: logger must have a log_scalar(name, value, step) method or be None, got {type(logger).__name__}."
            )
        check_positive("Trainer", "clip_norm", clip_norm, allow_none=True)
        seed = check_seed("Trainer", seed, allow_none=True)
        if save_trainer_file is not None and not isinstance(save_trainer_file, (str, os.PathLike)):
            raise TypeError(
                f"Trainer: save_trainer_file must be a path or None, got {type(save_trainer_file).__name__}."
            )
        self.total_frames = check_positive_int("Trainer", "total_frames", total_frames)
        self.frame_skip = check_positive_int("Trainer", "frame_skip", frame_skip)
        self.optim_steps_per_batch = check_non_negative_int("Trainer", "optim_steps_per_batch", optim_steps_per_batch)
        self.init_random_frames = check_non_negative_int(
            "Trainer", "init_random_frames", init_random_frames, allow_none=True
        )
        self.save_trainer_interval = check_positive_int("Trainer", "save_trainer_interval", save_trainer_interval)
        self.log_interval = check_positive_int("Trainer", "log_interval", log_interval)
        # checks the optimizer first
        optimizer_hook = None if optimizer is None else OptimizerHook(optimizer, measure_grad_norm=measure_grad_norm)

        self.collector = collector
        self.loss_module = loss_module
        self.optimizer = optimizer
        self.logger = logger
        self.clip_grad_norm = bool(clip_grad_norm)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.save_trainer_file = None if save_trainer_file is None else Path(save_trainer_file)
        self.progress_bar = bool(progress_bar)
        self._tqdm = None
        if self.progress_bar:
            try:
                from tqdm import tqdm
            except ImportError:
                warnings.warn(
                    "Trainer: progress_bar=True needs the 'tqdm' package, which is not installed; no progress bar.",
                    stacklevel=2,
                )
                self.progress_bar = False
            else:
                self._tqdm = tqdm
        self._pbar = None
        self._pbar_str: dict[str, float] = {}

        self.collected_frames = 0
        self.batch_frames = 0  # frames of the latest collected batch (before its "batch_process" ops)
        self._optim_count = 0
        self._last_log: dict[str, int] = {}
        self._last_save = 0
        self.last_logged: dict[str, float] = {}  # latest value per name (bounded, unlike a full history)
        self._ops: dict[str, list[tuple[Callable, dict]]] = {stage: [] for stage in HOOK_STAGES}
        self._modules: dict[str, Any] = {}

        self.seed = seed
        if seed is not None:
            set_seed = getattr(collector, "set_seed", None)
            if callable(set_seed):
                returned = set_seed(seed)
                if isinstance(returned, int) and not isinstance(returned, bool):
                    seed = returned
            seed_everything(seed)
        if optimizer_hook is not None:
            optimizer_hook.register(self)

    @property
    def warmup_frames(self) -> int:
        """Frames collected before the first optimisation step (see ``init_random_frames``)."""
        if self.init_random_frames is not None:
            return self.init_random_frames
        collector_frames = getattr(self.collector, "init_random_frames", 0) or 0
        if isinstance(collector_frames, bool) or not isinstance(collector_frames, int) or collector_frames < 0:
            raise ValueError(
                f"Trainer: collector.init_random_frames must be a non-negative int, got {collector_frames!r}; "
                f"pass Trainer(init_random_frames=) instead."
            )
        return collector_frames * self.frame_skip

    # ------------------------------------------------------------------ registration
    def register_op(self, dest: str, op: Callable, **kwargs: Any) -> None:
        """Runs ``op`` (with ``kwargs``) at stage ``dest``; ops of a stage run in registration order.

        Raises:
            ValueError: ``dest`` is not one of :data:`HOOK_STAGES`.
            TypeError: ``op`` is not callable.
        """
        if dest not in self._ops:
            raise ValueError(f"Trainer.register_op: unknown stage dest={dest!r}; choose one of {list(HOOK_STAGES)}.")
        if not callable(op):
            raise TypeError(f"Trainer.register_op: op for {dest!r} must be callable, got {type(op).__name__}.")
        self._ops[dest].append((op, kwargs))

    def register_module(self, module_name: str, module: Any) -> None:
        """Adds ``module``'s ``state_dict`` to the trainer's under ``module_name``.

        Raises:
            ValueError: the name is taken (or reserved: ``collector``, ``loss_module``, ``state``).
            TypeError: ``module`` has no ``state_dict``/``load_state_dict``.
        """
        if not isinstance(module_name, str) or not module_name:
            raise ValueError(f"Trainer.register_module: module_name must be a non-empty string, got {module_name!r}.")
        if module_name in _RESERVED or module_name in self._modules:
            raise ValueError(
                f"Trainer.register_module: {module_name!r} is already registered or reserved; taken: {list(_RESERVED) + list(self._modules)}."
            )
        missing = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(module, m, None))]
        if missing:
            raise TypeError(f"Trainer.register_module: {module_name!r} ({type(module).__name__}) has no {missing}.")
        self._modules[module_name] = module

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Plain state dicts: ``loss_module``, ``collector`` (when it has one), ``state`` (counters)
        and one entry per registered module (the optimizer is the ``"optimizer"`` module)."""
        out: dict[str, Any] = {}
        if callable(getattr(self.loss_module, "state_dict", None)):
            out["loss_module"] = self.loss_module.state_dict()
        collector_state_dict = getattr(self.collector, "state_dict", None)
        if callable(collector_state_dict):
            out["collector"] = collector_state_dict()
        out["state"] = {
            "collected_frames": self.collected_frames,
            "_last_log": dict(self._last_log),
            "_last_save": self._last_save,
            "_optim_count": self._optim_count,
        }
        for name, module in self._modules.items():
            out[name] = module.state_dict()
        out["rng"] = rng_state()
        return out

    def _check_state_dict(self, state_dict: Any) -> Mapping[str, Any]:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Trainer.load_state_dict: expected a mapping, got {type(state_dict).__name__}.")
        expected = {"state", *self._modules}
        if callable(getattr(self.loss_module, "load_state_dict", None)):
            expected.add("loss_module")
        if callable(getattr(self.collector, "load_state_dict", None)) and callable(
            getattr(self.collector, "state_dict", None)
        ):
            expected.add("collector")
        missing, unexpected = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected - {"rng"})
        if missing or unexpected:
            raise KeyError(
                f"Trainer.load_state_dict: the state does not match this trainer: missing {missing}, unexpected {unexpected} "
                f"(registered modules: {list(self._modules)})."
            )
        state = state_dict["state"]
        if not isinstance(state, Mapping) or any(k not in state for k in _STATE_KEYS):
            raise KeyError(f"Trainer.load_state_dict: 'state' must hold {list(_STATE_KEYS)}, got {state!r}.")
        for key in ("collected_frames", "_last_save", "_optim_count"):
            check_non_negative_int("Trainer.load_state_dict", f"state[{key!r}]", state[key])
        if "rng" in state_dict:
            check_rng_state(state_dict["rng"], owner="Trainer.load_state_dict", name="state['rng']")
        if not isinstance(state["_last_log"], Mapping):
            raise TypeError(
                f"Trainer.load_state_dict: state['_last_log'] must be a mapping, got {type(state['_last_log']).__name__}."
            )
        loss_sd = state_dict.get("loss_module")
        if loss_sd is not None and callable(getattr(self.loss_module, "state_dict", None)):
            own = set(self.loss_module.state_dict())
            if own != set(loss_sd):
                raise KeyError(
                    f"Trainer.load_state_dict: loss_module keys differ: missing {sorted(own - set(loss_sd))}, "
                    f"unexpected {sorted(set(loss_sd) - own)}."
                )
        return state

    def _apply_state_dict(self, state_dict: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        if "loss_module" in state_dict:
            self.loss_module.load_state_dict(state_dict["loss_module"])
        if "collector" in state_dict:
            self.collector.load_state_dict(state_dict["collector"])  # pyright: ignore[reportAttributeAccessIssue]  # (checked by _check_state_dict)
        for name, module in self._modules.items():
            module.load_state_dict(state_dict[name])
        if "rng" in state_dict:
            set_rng_state(state_dict["rng"])
        self.collected_frames = state["collected_frames"]
        self._last_log = dict(state["_last_log"])
        self._last_save = state["_last_save"]
        self._optim_count = state["_optim_count"]

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        The keys are checked first; if a component then fails to load (a shape mismatch, say), every
        component is put back as it was, so a failed load changes nothing.
        """
        state = self._check_state_dict(state_dict)
        backup = copy.deepcopy(self.state_dict())
        try:
            self._apply_state_dict(state_dict, state)
        except BaseException:
            self._apply_state_dict(backup, backup["state"])
            raise

    def _dumped_modules(self) -> dict[str, Any]:
        """Registered modules saved whole into a folder (they have ``dumps(path)`` and ``loads(path)``)."""
        return {
            n: m
            for n, m in self._modules.items()
            if callable(getattr(m, "dumps", None)) and callable(getattr(m, "loads", None))
        }

    def save_trainer(self, force_save: bool = False) -> bool:
        """Writes a checkpoint to ``save_trainer_file`` when ``save_trainer_interval`` frames passed
        since the last one (or with ``force_save``); returns whether it wrote one.

        Modules with ``dumps``/``loads`` (a replay buffer: its items too) are written first, each into
        a new folder ``<file name>.<module name>.<id>`` beside the file; then the file, atomically,
        naming those folders; then the folders of earlier checkpoints are removed. A kill at any
        moment leaves the previous checkpoint or the new one loadable, never a mix."""
        if self.save_trainer_file is None:
            return False
        if not force_save and self.collected_frames - self._last_save < self.save_trainer_interval:
            return False
        file = self.save_trainer_file
        previous = self._last_save
        self._last_save = self.collected_frames  # part of the saved state
        written: list[Path] = []
        try:
            state = self.state_dict()
            for name, module in self._dumped_modules().items():
                folder = file.parent / f"{file.name}.{name}.{uuid.uuid4().hex[:12]}"
                written.append(folder)
                module.dumps(folder)
                state[name] = {_DUMPED: folder.name}
            atomic_torch_save(state, file)
        except BaseException:
            self._last_save = previous
            for folder in written:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        keep = {folder.name for folder in written}
        for name in self._dumped_modules():
            for stale in file.parent.glob(f"{file.name}.{name}.*"):
                if stale.name not in keep:
                    shutil.rmtree(stale, ignore_errors=True)
        return True

    def _load_dumped(self, state_dict: dict[str, Any], file: Path) -> dict[str, Any]:
        """Loads the folders a checkpoint names into their modules; returns the rest of the state."""
        rest = dict(state_dict)
        for name, module in self._dumped_modules().items():
            entry = state_dict.get(name)
            if isinstance(entry, Mapping) and set(entry) == {_DUMPED}:
                folder = file.parent / str(entry[_DUMPED])
                if not folder.is_dir():
                    raise FileNotFoundError(
                        f"Trainer.load_from_file: {os.fspath(file)!r} names {folder.name!r} for {name!r}, which is missing."
                    )
                rest[name] = module.state_dict()  # checked below like any module state; loads() brings the rest
        self._check_state_dict(rest)
        for name, module in self._dumped_modules().items():
            entry = state_dict.get(name)
            if isinstance(entry, Mapping) and set(entry) == {_DUMPED}:
                module.loads(file.parent / str(entry[_DUMPED]))
                rest[name] = module.state_dict()  # what loads() restored: load_state_dict keeps it
        return rest

    def load_from_file(
        self, file: str | os.PathLike, *, map_location: Any = None, weights_only: bool = True
    ) -> Trainer:
        """Loads a checkpoint written by :meth:`save_trainer` (``torch.load(weights_only=True)``: no unpickling).

        Raises:
            RuntimeError: naming ``file`` when it is truncated or corrupt (torch's own error, which
                does not name the file, is kept as ``__cause__``); nothing is loaded then.
        """
        try:
            state_dict = torch.load(file, map_location=map_location, weights_only=weights_only)
        except (EOFError, RuntimeError, OSError) as err:
            # an empty file gives EOFError, a cut zip archive torch's "PytorchStreamReader failed reading zip archive"
            # or, cut elsewhere, OSError EINVAL from the zip reader; a missing or unreadable file is no corruption
            if isinstance(err, RuntimeError) and "zip archive" not in str(err):
                raise
            if isinstance(err, OSError) and (
                err.errno != errno.EINVAL or isinstance(err, (FileNotFoundError, PermissionError))
            ):
                raise
            where = (
                f"{os.fspath(file)!r} ({os.path.getsize(file)} bytes)"
                if isinstance(file, (str, os.PathLike))
                else repr(file)
            )
            said = str(err).split(". ")[0] if str(err) else type(err).__name__
            raise RuntimeError(
                f"{type(self).__name__}.load_from_file: {where} is truncated or corrupt, not a complete checkpoint; "
                f"torch.load said: {said}."
            ) from err
        if isinstance(state_dict, Mapping) and isinstance(file, (str, os.PathLike)) and self._dumped_modules():
            state_dict = self._load_dumped(dict(state_dict), Path(file))
        self.load_state_dict(state_dict)
        return self

    # ------------------------------------------------------------------ stages
    def _run_ops(self, stage: str, *args: Any) -> None:
        for op, kwargs in self._ops[stage]:
            op(*args, **kwargs)

    def _run_td_ops(self, stage: str, batch: TensorDictBase) -> TensorDictBase:
        for op, kwargs in self._ops[stage]:
            out = op(batch, **kwargs)
            if isinstance(out, TensorDictBase):
                batch = out
        return batch

    def _run_log_ops(self, stage: str, batch: TensorDictBase) -> None:
        for op, kwargs in self._ops[stage]:
            result = op(batch, **kwargs)
            if result is None:
                continue
            if not isinstance(result, Mapping):
                raise TypeError(
                    f"Trainer: a {stage!r} op must return a dict of values to log or None, got {type(result).__name__} from {op!r}."
                )
            self._log(**result)

    def _optimizer_step(self, losses_td: TensorDictBase) -> TensorDictBase:
        for index, (op, kwargs) in enumerate(self._ops["optimizer"]):
            out = op(losses_td, self.clip_grad_norm, self.clip_norm, index, **kwargs)
            if isinstance(out, TensorDictBase):
                losses_td = out
        return losses_td.detach()

    def optim_steps(self, batch: TensorDictBase) -> None:
        """Runs ``optim_steps_per_batch`` optimisation steps on ``batch`` (stage 3 of :meth:`train`)."""
        self._run_ops("pre_optim_steps")
        values: dict[str, list[torch.Tensor]] = {}  # each logged loss entry, per step, averaged once at the end
        for step in range(self.optim_steps_per_batch):
            self._optim_count += 1
            sample = self._run_td_ops("process_optim_batch", batch)
            losses_td = self.loss_module(sample)
            if not isinstance(losses_td, TensorDictBase):
                raise TypeError(
                    f"Trainer: loss_module must return a TensorDict of losses, got {type(losses_td).__name__}."
                )
            self._run_ops("post_loss", sample)
            losses = self._optimizer_step(losses_td)
            self._run_ops("post_optim")
            self._run_log_ops("post_optim_log", sample)
            for key, value in losses.items():
                if isinstance(value, torch.Tensor) and value.numel() == 1:  # diagnostics with a shape are not logged
                    values.setdefault(key, []).append(
                        value
                    )  # a loss some steps skip (TD3's delayed actor) averages its own steps
        if self.optim_steps_per_batch > 0:
            average: dict[str, Any] = {
                key: torch.cat([v.reshape(1) for v in vs]).float().mean() for key, vs in values.items()
            }
            self._log(optim_steps=self._optim_count, **average)

    def _log(self, log_pbar: bool = False, **values: Any) -> None:
        frames = self.collected_frames
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"Trainer: can only log scalars; {name!r} has shape {tuple(value.shape)}.")
                value = value.item()
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Trainer: can only log numbers; {name!r} is a {type(value).__name__}.")
            self.last_logged[name] = value
            last = self._last_log.get(name)
            if self.logger is not None and (last is None or frames - last >= self.log_interval):
                self._last_log[name] = frames
                self.logger.log_scalar(name, value, step=frames)
            if log_pbar and self._pbar is not None:
                self._pbar_str[name] = value

    # ------------------------------------------------------------------ loop
    def train(self) -> None:
        """Runs the loop until ``total_frames`` (continuing from ``collected_frames`` after a load)."""
        if self.optim_steps_per_batch > 0 and not self._ops["optimizer"]:
            raise RuntimeError(
                "Trainer.train: no optimizer; pass optimizer= or register an OptimizerHook before training."
            )
        init_random_frames = self.warmup_frames
        if self.progress_bar:
            assert self._tqdm is not None  # progress_bar stays True only with tqdm imported
            self._pbar = self._tqdm(total=self.total_frames, initial=min(self.collected_frames, self.total_frames))
        try:
            if self.collected_frames < self.total_frames:
                for batch in self.collector:
                    if not isinstance(batch, TensorDictBase):
                        raise TypeError(
                            f"Trainer.train: the collector yielded a {type(batch).__name__}, expected a TensorDict."
                        )
                    current_frames = batch.numel() * self.frame_skip
                    self.collected_frames += current_frames
                    self.batch_frames = current_frames
                    batch = self._run_td_ops("batch_process", batch)
                    self._run_log_ops("pre_steps_log", batch)
                    if self.collected_frames > init_random_frames:
                        self.optim_steps(batch)
                    self._run_ops("post_steps")
                    self._run_log_ops("post_steps_log", batch)
                    if self._pbar is not None:
                        self._pbar.update(current_frames)
                        if self._pbar_str:
                            self._pbar.set_description(", ".join(f"{k}: {v:.4g}" for k, v in self._pbar_str.items()))
                    if self.collected_frames >= self.total_frames:
                        break
                    self.save_trainer()
            self.save_trainer(force_save=True)
        finally:
            if self._pbar is not None:
                self._pbar.close()
                self._pbar = None
            self.shutdown()

    def shutdown(self) -> None:
        """Shuts the collector down (when it has ``shutdown``)."""
        shutdown = getattr(self.collector, "shutdown", None)
        if callable(shutdown):
            shutdown()

    def __repr__(self) -> str:
        ops = {stage: len(ops) for stage, ops in self._ops.items() if ops}
        return (
            f"Trainer(collected_frames={self.collected_frames}/{self.total_frames}, optim_steps={self._optim_count}, "
            f"ops={ops}, modules={list(self._modules)})"
        )
