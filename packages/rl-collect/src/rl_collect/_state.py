"""What a resumed :class:`~rl_collect.Collector` needs (``state_dict``/``load_state_dict``), and the
TensorDict as plain data it holds of the step the env is at."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from tdict import TensorDict, TensorDictBase


def to_plain(td: TensorDictBase) -> dict:
    """A TensorDict as plain data (lists, numbers, tensors): batch sizes of the root and of every
    sub-collection, names, and ``(key path, tensor)`` pairs of the tensor leaves. The leaves are
    the tensors themselves, not copies (as ``nn.Module.state_dict`` gives its parameters): their
    strides survive ``torch.save``, and a resumed env computes on the same layouts (an expanded
    parameter and its dense copy take different CPU kernels, which round differently)."""

    def path(key: Any) -> list:
        return list(key) if isinstance(key, tuple) else [key]

    # sorted by key path (a parent before its children): the same data gives the same state, whatever
    # order the entries were written in
    subs = sorted([path(k), list(v.batch_size)] for k, v in td.items(True) if isinstance(v, TensorDictBase))
    return {
        "batch_size": list(td.batch_size),
        "names": list(td.names),
        "collections": subs,
        "leaves": sorted(([path(k), v] for k, v in td.items(True, True)), key=lambda item: item[0]),
    }


def from_plain(data: dict) -> TensorDictBase:
    td = TensorDict({}, batch_size=data["batch_size"])
    for key, batch_size in data["collections"]:
        td.set(tuple(key), TensorDict({}, batch_size=batch_size))
    for key, value in data["leaves"]:
        td.set(tuple(key), value)
    if any(n is not None for n in data["names"]):
        td.names = data["names"]
    return td


class CollectorState:
    """The ``state_dict``/``load_state_dict`` of :class:`~rl_collect.Collector` (a mixin of it)."""

    env: Any
    policy: Any
    policy_version: int
    trajs_per_batch: int | None
    _frames: int
    _iter: int
    _traj_count: int
    _rng: torch.Generator | None
    _td: TensorDictBase | None
    _traj_ids: torch.Tensor | None
    _reserved_ids: torch.Tensor | None
    _traj_steps: torch.Tensor | None
    _done_ndim: int
    _add_truncated: bool
    _assembler: Any

    def _seed_generator(self, seed: int) -> int:  # pragma: no cover - defined by Collector
        raise NotImplementedError

    def _take_ids(self) -> torch.Tensor:  # pragma: no cover - defined by Collector
        raise NotImplementedError

    def state_dict(self) -> dict:
        """What a resumed collector needs: counters, the policy's weights and version, the env's
        ``state_dict`` (its generators: the resets it will draw) and, for a ``resumable`` env, the
        step it is at (the carrier TensorDict, trajectory ids and lengths), so that a collector
        built the same way and loaded with it continues the same trajectories. Plain tensors,
        lists and numbers only: ``torch.load(weights_only=True)`` reads a saved copy."""
        state: dict[str, Any] = {
            "frames": self._frames,
            "iter": self._iter,
            "traj_pool": {"traj_id": torch.tensor(self._traj_count)},  # the next trajectory id (TorchRL's layout)
            "policy_version": self.policy_version,
        }
        if isinstance(self.policy, nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        if isinstance(self.env, nn.Module):
            state["env"] = self.env.state_dict()
        if self._rng is not None:
            state["generator"] = self._rng.get_state()
        if self._td is not None and getattr(self.env, "resumable", False) and self.trajs_per_batch is None:
            assert self._traj_ids is not None  # set with _td by _start
            state["carrier"] = {
                "td": to_plain(self._td),
                "traj_ids": self._traj_ids.clone(),
                "traj_steps": None if self._traj_steps is None else self._traj_steps.clone(),
                "add_truncated": self._add_truncated,
            }
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`. Without a carrier (an env that is not ``resumable``, or a
        state saved before the first batch) the next batch starts new trajectories with a reset; their
        ids are taken now, after the saved ones (as TorchRL's collectors do), so ``state_dict()`` reports
        a next trajectory id past the saved one."""
        carrier = state.get("carrier")
        td = None
        if carrier is not None:
            if not getattr(self.env, "resumable", False):
                raise ValueError(
                    f"Collector.load_state_dict: the state holds the step the env was at, but this collector's env "
                    f"({type(self.env).__name__}) is not resumable: it cannot continue from a saved step."
                )
            td = from_plain(carrier["td"])
            if tuple(td.batch_size) != tuple(self.env.batch_size):
                raise ValueError(
                    f"Collector.load_state_dict: the saved step has batch size {tuple(td.batch_size)}, the env "
                    f"{tuple(self.env.batch_size)}."
                )
        generator = state.get("generator")
        if generator is not None:
            if not isinstance(generator, torch.Tensor) or generator.dtype is not torch.uint8:
                raise ValueError(
                    "Collector.load_state_dict: state['generator'] must be a uint8 tensor from "
                    f"Generator.get_state(), got {type(generator).__name__}."
                )
            if self._rng is None:
                self._seed_generator(0)
            assert self._rng is not None  # made by _seed_generator
            self._rng.set_state(generator.cpu())
        if "env" in state and isinstance(self.env, nn.Module):
            self.env.load_state_dict(state["env"])
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self._traj_count = int(state["traj_pool"]["traj_id"]) if "traj_pool" in state else int(state["traj_count"])
        self.policy_version = int(state.get("policy_version", 0))
        if "policy_state_dict" in state and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state["policy_state_dict"])
        self._td = td
        if self._assembler is not None:
            self._assembler.clear()
        self._reserved_ids = None
        if carrier is None:  # the ids of the trajectories the next batch starts
            self._reserved_ids = self._take_ids()
        else:  # td was read from the carrier
            self._traj_ids = carrier["traj_ids"].clone()
            steps = carrier["traj_steps"]
            self._traj_steps = None if steps is None else steps.clone()
            self._add_truncated = bool(carrier["add_truncated"])
            done = td.get("done", None) if td is not None else None
            if done is not None:
                self._done_ndim = done.ndim
            elif self._traj_steps is not None:
                self._done_ndim = self._traj_steps.ndim
