"""RayWeightSyncScheme: weights through the Ray object store (used by :class:`~rl_collect.RayCollector`)."""

from __future__ import annotations

from typing import Any, Sequence

from tdict import TensorDictBase

from .base import WEIGHTS_MESSAGE, WeightReceiver, WeightSyncScheme

__all__ = ["RayWeightReceiver", "RayWeightSyncScheme"]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("RayWeightSyncScheme needs Ray: `pip install rl-collect[ray]`.") from exc
    return ray


class RayWeightReceiver(WeightReceiver):
    """The actor side of :class:`RayWeightSyncScheme`: keeps the newest ``(ObjectRef, version)`` it was
    told about and fetches the weights from the object store at ``receive()`` only when the version
    changed (versions skipped in between are never fetched)."""

    def __init__(self) -> None:
        self._ref: Any = None
        self._version = 0
        self._new = False

    def handle(self, message: tuple) -> bool:
        if message[0] != WEIGHTS_MESSAGE:
            return False
        _, refs, version = message  # the ref sits in a list, so Ray does not resolve it on the call
        self._ref = refs[0] if refs else None
        self._new = int(version) != self._version or self._new
        self._version = int(version)
        return True

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """The newest weights, fetched from the object store, when a new version was announced since the last call (else ``None``)."""
        if not self._new:
            return None, self._version
        self._new = False
        weights = _import_ray().get(self._ref) if self._ref is not None else None
        return weights, self._version


class RayWeightSyncScheme(WeightSyncScheme):
    """Weights through the Ray object store: ``send`` puts them once per version and tells every actor
    the new ``(ObjectRef, version)``; an actor fetches them at its next ``receive()``.

    The "pipes" are the actor handles; each actor exposes a method (``method``, default
    ``"handle_weights"``) that passes its argument to its receiver's ``handle``. Ray runs the calls of
    one caller in order, so an actor sees the weights before any call submitted after ``send``.

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> scheme = RayWeightSyncScheme()
        >>> receiver = scheme.receiver(0)  # travels to the actor when it is created
        >>> receiver.receive()
        (None, 0)
        >>> scheme.init_sender(None, [])  # actor handles go here (none: this example needs no Ray)
        >>> receiver.handle(("weights", [], 3))  # what an actor gets from send(None, 3)
        True
        >>> receiver.receive(), receiver.receive()
        ((None, 3), (None, 3))
    """

    def __init__(self, method: str = "handle_weights") -> None:
        self.method = method
        self._actors: list = []
        self._ref: Any = None
        self._version = 0

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        self._actors = list(pipes)

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._actors = list(pipes)

    def message(self) -> tuple:
        """The latest ``("weights", [ref], version)`` message (to replay to a restarted actor)."""
        return (WEIGHTS_MESSAGE, [self._ref] if self._ref is not None else [], self._version)

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        if worker_ids is not None:
            raise ValueError(
                "RayWeightSyncScheme.send: every worker gets the same weights; worker_ids is not supported."
            )
        self._ref = _import_ray().put(weights.detach().clone()) if weights is not None else self._ref
        self._version = int(version)
        for index in range(len(self._actors)):
            self.resend(index)

    def resend(self, worker_id: int) -> Any:
        """Sends the latest message to one actor again (e.g. after Ray restarted it); returns the call's ref."""
        return getattr(self._actors[worker_id], self.method).remote(self.message())

    def receiver(self, worker_id: int) -> RayWeightReceiver:
        """A fresh :class:`RayWeightReceiver` for actor ``worker_id``."""
        return RayWeightReceiver()
