"""RayCollector: Collector workers as Ray actors (``pip install rl-collect[ray]``).

Each actor runs a :class:`~rl_collect.Collector`; the learner keeps one request in flight per actor
and yields batches as they come. A killed actor is restarted by Ray (``max_restarts``); its lost
request is sent again (with the latest weights first), so the frame total is still exact. Weights
travel through a :class:`~rl_collect.weight_sync.RayWeightSyncScheme` (one object-store copy per version).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator, Sequence

import tdict
import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import chain_seeds, check_seed
from tdict.validation import check_positive_int

from .base import _calls, call_path, resolve_attr
from .collector import Collector
from .weight_sync import RayWeightReceiver, RayWeightSyncScheme

__all__ = ["RayCollector"]

_TRAJ = ("collector", "traj_ids")
_INCARNATION = ("collector", "incarnation")
_ID_STRIDE = 1 << 16  # traj ids: local_id * _ID_STRIDE + actor incarnation (up to 65536 incarnations)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "RayCollector needs Ray: install it with `pip install rl-collect[ray]` (or `pip install 'ray>=2.10'`)."
        ) from exc
    return ray


class _CollectorActor:
    """The actor body: a Collector that answers ``collect(frames)`` calls."""

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any,
        frames_per_batch: int,
        collector_kwargs: dict,
        receiver: RayWeightReceiver | None = None,
    ) -> None:
        torch.set_num_threads(1)
        self.incarnation = uuid.uuid4().hex  # changes when Ray restarts the actor
        self.policy = policy
        self.receiver = receiver if receiver is not None else RayWeightReceiver()
        self.collector = Collector(
            create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1, **collector_kwargs
        )
        self.iterator: Iterator | None = None

    def collect(self, frames: int) -> tuple[str, TensorDictBase]:
        self._apply_weights()
        c = self.collector
        c.total_frames = c.frames + frames  # the generator re-reads total_frames at each step
        if self.iterator is None:
            self.iterator = iter(c)
        return self.incarnation, next(self.iterator)

    def ping(self) -> str:
        """This actor's incarnation id (a new one after each restart by Ray)."""
        return self.incarnation

    def handle_weights(self, message: tuple) -> None:
        """Takes a :class:`RayWeightSyncScheme` message; the weights are fetched at the next collect."""
        self.receiver.handle(message)

    def _apply_weights(self) -> None:
        weights, version = self.receiver.receive()
        if version == self.collector.policy_version and weights is None:
            return
        if weights is not None and isinstance(self.policy, torch.nn.Module):
            target = TensorDict.from_module(self.policy)
            with torch.no_grad():
                for key, value in target.items(True, True):
                    value.copy_(weights.get(key))
        self.collector.update_policy_weights_()
        self.collector.policy_version = version

    def set_seed(self, seed: int) -> int:
        return self.collector.set_seed(seed)

    def get_attr(self, path: str) -> Any:
        """The attribute at dotted path ``path`` of this actor's collector."""
        return resolve_attr(self.collector, path)

    def call(self, path: str, args: tuple, kwargs: dict) -> Any:
        """Calls the method at dotted path ``path`` of this actor's collector."""
        return call_path(self.collector, path, args, kwargs)

    def shutdown(self) -> None:
        self.collector.shutdown()


class RayCollector:
    """Collector workers as Ray actors; batches are yielded as they arrive (TorchRL's ``RayCollector``).

    Each of ``num_collectors`` actors runs a :class:`~rl_collect.Collector` and keeps one request of
    ``frames_per_batch`` frames in flight (``sync=True``: each actor collects
    ``frames_per_batch / num_collectors`` frames and the parts are concatenated). Batches carry
    ``("collector", "batch_id")`` (unique, increasing), ``("collector", "worker_id")`` and
    ``("collector", "incarnation")`` (0 for an actor's first life, +1 each time Ray restarts it).
    Frame totals are exact. Trajectory ids are unique across actors and restarts.

    Ray is started locally (``ray.init(_node_ip_address="127.0.0.1", include_dashboard=False)``) unless
    ``address`` is given or Ray is already initialised; a Ray started here is shut down by
    :meth:`shutdown`.

    Args:
        create_env_fn: an env factory, or a list of them (one actor each).
        policy: as for :class:`~rl_collect.Collector` (serialized to the actors).
        frames_per_batch: frames per yielded batch.
        total_frames: total frames (``-1``: never stop).
        num_collectors: the number of actors (ignored when ``create_env_fn`` is a list).
        ray_init_config: extra ``ray.init`` keyword arguments.
        address: an existing Ray cluster (``"127.0.0.1:port"``, ``"ray://host:port"`` or ``"auto"``);
            ``shutdown()`` then only disconnects from it (a Ray the collector started is stopped).
        max_restarts: how many times Ray restarts a dead actor (``-1``: forever).
        num_cpus: CPUs reserved per actor.
        remote_configs: more ``ray.remote`` options of the actors (``{"num_cpus": 1, "num_gpus": 0}``; its
            entries win over ``num_cpus`` and ``max_restarts``).
        sync: see above.
        **collector_kwargs: passed to each actor's :class:`~rl_collect.Collector`.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = RayCollector(PendulumEnv, None, frames_per_batch=20, total_frames=40)  # doctest: +SKIP
        >>> sum(b.numel() for b in collector)  # doctest: +SKIP
        40
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable] | Callable,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_collectors: int = 2,
        ray_init_config: dict | None = None,
        address: str | None = None,
        max_restarts: int = 3,
        num_cpus: float = 1,
        sync: bool = False,
        remote_configs: dict | None = None,
        **collector_kwargs: Any,
    ) -> None:
        check_positive_int("RayCollector", "frames_per_batch", frames_per_batch)
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"RayCollector: total_frames must be a positive int or -1, got {total_frames!r}.")
        env_fns = list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else [create_env_fn] * num_collectors
        if not env_fns:
            raise ValueError("RayCollector: needs at least one collector.")
        if sync and frames_per_batch % len(env_fns):
            raise ValueError(
                f"RayCollector(sync=True): frames_per_batch={frames_per_batch} must be a multiple of "
                f"num_collectors={len(env_fns)}."
            )
        ray = _import_ray()
        self._ray = ray
        self._owns_ray = False
        if not ray.is_initialized():
            config = dict(ray_init_config or {})
            if address is not None:
                config.setdefault("address", address)
            else:
                config.setdefault("_node_ip_address", "127.0.0.1")
                config.setdefault("include_dashboard", False)
            config.setdefault("log_to_driver", False)
            ray.init(**config)
            self._owns_ray = True
        self.num_collectors = len(env_fns)
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.sync = sync
        self.policy = policy
        self.policy_version = 0
        self._worker_frames = frames_per_batch // self.num_collectors if sync else frames_per_batch
        self._frames = 0
        self._dispatched = 0
        self._next_batch_id = 0
        self._incarnations: dict[str, int] = {}  # incarnation id -> global slot (traj id suffix)
        self._slot_base = 0  # slots used by the run this collector resumes (load_state_dict)
        self._worker_incarnations: list[dict[str, int]] = [{} for _ in env_fns]  # id -> per-worker count
        self._restarts = 0
        self._scheme = RayWeightSyncScheme(method="handle_weights")
        options = {"num_cpus": num_cpus, "max_restarts": max_restarts, **(remote_configs or {})}
        remote_cls = ray.remote(**options)(_CollectorActor)
        self._actors = [
            remote_cls.remote(
                fn, policy, self._worker_frames, {"worker_idx": i, **collector_kwargs}, self._scheme.receiver(i)
            )
            for i, fn in enumerate(env_fns)
        ]
        self._scheme.init_sender(None, self._actors)
        self._pending: dict[Any, tuple[int, int]] = {}  # ObjectRef -> (actor index, frames)
        self._shut = False

    @property
    def frames(self) -> int:
        """Frames yielded so far."""
        return self._frames

    @property
    def num_restarts(self) -> int:
        """How many lost requests were sent again after an actor died."""
        return self._restarts

    def _request(self, index: int, frames: int) -> None:
        ref = self._actors[index].collect.remote(frames)
        self._pending[ref] = (index, frames)

    def _next_frames(self) -> int:
        if self.total_frames < 0:
            return self._worker_frames
        return max(0, min(self._worker_frames, self.total_frames - self._dispatched))

    def _result(self, ref: Any) -> tuple[int, TensorDictBase] | None:
        """The batch of a finished request, or None when its actor died (the request is sent again)."""
        ray = self._ray
        index, frames = self._pending.pop(ref)
        try:
            incarnation, batch = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            self._restarts += 1
            if self.policy_version:  # a restarted actor starts from the initial weights
                self._scheme.resend(index)
            self._request(index, frames)
            return None
        slot = self._incarnations.setdefault(incarnation, self._slot_base + len(self._incarnations))
        lives = self._worker_incarnations[index]
        life = lives.setdefault(incarnation, len(lives))
        ids = batch.get(_TRAJ, None)
        if ids is not None:
            batch.set(_TRAJ, torch.where(ids >= 0, ids * _ID_STRIDE + slot, ids))
        batch.set(("collector", "worker_id"), torch.full(batch.batch_size, index, dtype=torch.int64))
        batch.set(_INCARNATION, torch.full(batch.batch_size, life, dtype=torch.int64))
        return index, batch

    def __iter__(self) -> Iterator[TensorDictBase]:
        if self._shut:
            raise RuntimeError("RayCollector: iterating after shutdown().")
        ray = self._ray
        if self.sync:
            while self.total_frames < 0 or self._frames < self.total_frames:
                remaining = self.total_frames - self._dispatched if self.total_frames > 0 else None
                for i in range(self.num_collectors):
                    frames = self._worker_frames
                    if remaining is not None:
                        frames = min(frames, remaining // self.num_collectors + (i < remaining % self.num_collectors))
                    if frames > 0:
                        self._request(i, frames)
                        self._dispatched += frames
                parts: dict[int, TensorDictBase] = {}
                while self._pending:
                    ready, _ = ray.wait(list(self._pending), num_returns=1)
                    out = self._result(ready[0])
                    if out is not None:
                        parts[out[0]] = out[1]
                batch = self._finish([parts[i] for i in sorted(parts)])
                yield batch
            return
        for i in range(self.num_collectors):
            frames = self._next_frames()
            if frames:
                self._request(i, frames)
                self._dispatched += frames
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            out = self._result(ready[0])
            if out is None:
                continue
            index, batch = out
            frames = self._next_frames()
            if frames:
                self._request(index, frames)
                self._dispatched += frames
            yield self._finish([batch])

    def _finish(self, parts: list) -> TensorDictBase:
        if len(parts) == 1:
            batch = parts[0]
        elif len({p.batch_size[1:] for p in parts}) == 1:
            batch = tdict.cat(parts, 0)
        else:
            batch = tdict.cat([p.reshape(-1) for p in parts], 0)
        batch.set(("collector", "batch_id"), torch.full(batch.batch_size, self._next_batch_id, dtype=torch.int64))
        self._next_batch_id += 1
        self._frames += batch.numel()
        return batch

    def update_policy_weights_(self, weights: TensorDictBase | None = None) -> None:
        """Sends new weights to every actor (``None``: the current weights of the policy given).

        Actors run calls in order, so every request made from now on uses them (requests already in
        flight keep their ``("collector", "policy_version")``).
        """
        if weights is None:
            if not isinstance(self.policy, torch.nn.Module):
                raise TypeError("RayCollector.update_policy_weights_: the policy has no parameters.")
            weights = TensorDict.from_module(self.policy)
        self.policy_version += 1
        self._scheme.send(weights, self.policy_version)  # one object-store copy; actors fetch it when needed

    def state_dict(self) -> dict:
        """What a fresh collector with the same config needs to resume this run (see :meth:`load_state_dict`).

        Holds the frames yielded so far, the policy version, the next batch id, how many trajectory-id
        slots (actor lives) were used and, for an ``nn.Module`` policy, its weights
        (``"policy_state_dict"``, a state dict of detached tensor copies). Requests in flight are not
        part of it: a resumed collector collects their frames again.
        """
        state: dict = {
            "frames": self._frames,
            "policy_version": self.policy_version,
            "batch_id": self._next_batch_id,
            "incarnation_slots": self._slot_base + len(self._incarnations),
        }
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resumes from :meth:`state_dict`: the frame count (the run still stops at ``total_frames``), the
        batch ids and the policy version continue; the weights are loaded into the policy given and sent to
        the actors, so the next batch uses them and carries the restored version. Call it before iterating.
        """
        if self._shut:
            raise RuntimeError("RayCollector.load_state_dict: the collector was shut down.")
        self._frames = self._dispatched = int(state["frames"])
        self._next_batch_id = int(state.get("batch_id", 0))
        self._slot_base = int(state.get("incarnation_slots", 0)) - len(self._incarnations)
        self._slot_base = max(self._slot_base, 0)
        version = int(state.get("policy_version", 0))
        weights = None
        if "policy_state_dict" in state:
            if not isinstance(self.policy, torch.nn.Module):
                raise TypeError(
                    "RayCollector.load_state_dict: the state has policy weights but the policy given has no parameters."
                )
            self.policy.load_state_dict(state["policy_state_dict"])
            weights = TensorDict.from_module(self.policy)
        self.policy_version = version
        self._scheme.send(weights, version)  # the actors apply it (and the version) before their next batch

    def get_distant_attr(self, attr: str) -> list[Any]:
        """The attribute at dotted path ``attr`` of each actor's collector (``"worker_idx"``: ``[0, 1, ...]``)."""
        ray = self._ray
        return ray.get([actor.get_attr.remote(attr) for actor in self._actors])

    def map_fn(
        self, fn: str, list_of_args: Sequence[Sequence[Any]] | None = None, list_of_kwargs: Sequence[dict] | None = None
    ) -> list[Any]:
        """Calls the method at dotted path ``fn`` of each actor's collector, actor ``i`` with
        ``list_of_args[i]`` / ``list_of_kwargs[i]`` (no arguments when both are None); returns the results.

        Raises:
            ValueError: not one entry per actor.
        """
        given = list_of_args is not None or list_of_kwargs is not None
        calls = _calls("RayCollector", list_of_args, list_of_kwargs, self.num_collectors if given else None)
        if not given:
            calls = calls * self.num_collectors
        ray = self._ray
        return ray.get([actor.call.remote(fn, args, kwargs) for actor, (args, kwargs) in zip(self._actors, calls)])

    def stats(self, workers: str = "aggregate", timeout: float | None = None) -> dict[str, Any]:
        """Progress counters as plain numbers: ``frames`` and ``batches`` yielded, ``total_frames`` and
        ``completed`` (with a frame budget), ``requested_frames_per_batch``, ``workers``, ``workers_alive``
        (actors answering within ``timeout`` seconds) and ``worker_frames`` (frames the actors collected,
        requests in flight included once done). ``workers="per_worker"`` or ``"both"`` adds each actor's
        own counters as ``"worker_<i>/<name>"`` (``"per_worker"``: only those).

        Raises:
            ValueError: ``workers`` is none of ``"aggregate"``, ``"per_worker"``, ``"both"``.
        """
        if workers not in ("aggregate", "per_worker", "both"):
            raise ValueError(f"stats: workers must be one of 'aggregate', 'per_worker' or 'both', got {workers!r}.")
        ray = self._ray
        refs = [actor.call.remote("stats", (), {}) for actor in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        per_actor = [ray.get(ref) if ref in ready else None for ref in refs]
        stats: dict[str, Any] = {}
        if workers != "per_worker":
            stats = {"frames": int(self._frames), "batches": int(self._next_batch_id)}
            if self.total_frames >= 0:
                stats["total_frames"] = int(self.total_frames)
                stats["completed"] = bool(self._frames >= self.total_frames)
            stats["requested_frames_per_batch"] = int(self.frames_per_batch)
            stats["workers"] = self.num_collectors
            stats["workers_alive"] = sum(s is not None for s in per_actor)
            stats["worker_frames"] = sum(int(s["frames"]) for s in per_actor if s is not None)
        if workers != "aggregate":
            for i, actor_stats in enumerate(per_actor):
                stats.update({f"worker_{i}/{k}": v for k, v in (actor_stats or {}).items()})
        return stats

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the actors' collectors in turn, each with the seed the previous one returned.

        Every random stream of every actor (its env's, its collector's) gets a distinct seed
        (:mod:`tdict.seeding`). Returns the seed after the last actor's (``seed`` with ``static_seed``).
        """
        seed = check_seed("RayCollector.set_seed", seed)
        ray = self._ray
        following = chain_seeds(seed, [lambda s, a=actor: ray.get(a.set_seed.remote(s)) for actor in self._actors])
        assert following is not None  # an int seed chains to an int
        return seed if static_seed else following

    def shutdown(self) -> None:
        """Kills the actors (and the local Ray this collector started)."""
        if self._shut:
            return
        self._shut = True
        ray = self._ray
        self._pending.clear()
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._actors = []
        if self._owns_ray:
            ray.shutdown()

    def __repr__(self) -> str:
        return (
            f"RayCollector(num_collectors={self.num_collectors}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )
