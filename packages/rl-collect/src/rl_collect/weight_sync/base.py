"""The two sides of a weight sync scheme (learner: :class:`WeightSyncScheme`, worker:
:class:`WeightReceiver`), the scheme that syncs nothing, and the choice of a scheme by backend name."""

from __future__ import annotations

from typing import Any, Sequence

from tdict import TensorDict, TensorDictBase

__all__ = ["NoWeightSyncScheme", "WeightReceiver", "WeightSyncScheme"]

WEIGHTS_MESSAGE = "weights"


def cpu_copy(weights: TensorDictBase) -> TensorDictBase:
    """A detached copy of ``weights`` on the CPU (one copy per leaf, from any device)."""
    return weights.detach().apply(lambda t: t.to("cpu", copy=True))


class WeightReceiver:
    """The worker side of a scheme: ``receive()`` returns ``(weights or None, version)``."""

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """``(weights, version)``: new weights since the last call, or ``None`` when there are none (abstract)."""
        raise NotImplementedError

    def handle(self, message: tuple) -> bool:
        """Takes a command-pipe message meant for the scheme (returns whether it was one)."""
        return False


#: backend name -> (module, class) of the scheme :meth:`WeightSyncScheme.from_backend` builds
BACKENDS = {
    "none": ("base", "NoWeightSyncScheme"),
    "direct": ("base", "NoWeightSyncScheme"),
    "shared": ("shared", "SharedMemWeightSyncScheme"),
    "thread": ("shared", "SharedMemWeightSyncScheme"),
    "process": ("pipe", "MultiProcessWeightSyncScheme"),
    "multiprocessing": ("pipe", "MultiProcessWeightSyncScheme"),
    "ray": ("ray", "RayWeightSyncScheme"),
    "distributed": ("distributed", "DistributedWeightSyncScheme"),
}


class WeightSyncScheme:
    """The learner side: ``init_sender`` once, then ``send(weights, version)`` after each update.

    Subclasses define the transport. ``receiver(worker_id)`` gives the object a worker process
    calls ``receive()`` on; it must be picklable (it travels to the worker when it starts).

    Examples:
        >>> scheme = WeightSyncScheme.from_backend("shared", per_worker_weights=True)
        >>> type(scheme).__name__, scheme.per_worker_weights
        ('SharedMemWeightSyncScheme', True)
    """

    @classmethod
    def from_backend(cls, backend: str, **kwargs: Any) -> WeightSyncScheme:
        """The scheme for a collector backend (TorchRL's names), built with ``kwargs``: ``"none"``/``"direct"``
        (no sync), ``"shared"``/``"thread"`` (shared memory), ``"process"``/``"multiprocessing"`` (pipes),
        ``"ray"``, ``"distributed"``.

        Raises:
            ValueError: an unknown backend name.
        """
        import importlib

        if backend not in BACKENDS:
            raise ValueError(
                f"WeightSyncScheme.from_backend: Unsupported weight-sync backend {backend!r}; expected one of "
                f"{sorted(BACKENDS)}."
            )
        module, name = BACKENDS[backend]
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)(**kwargs)

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        """Prepares the transport for ``len(pipes)`` workers (``weights`` is a template)."""
        raise NotImplementedError

    def init_on_sender(self, model: Any = None, **kwargs: Any) -> None:
        """TorchRL's way to prepare the learner side before a collector exists: ``model`` (a module,
        or a TensorDict of weights) gives the layout of the weights, which a collector built with a
        ``policy_factory`` and no policy cannot read itself. Other TorchRL arguments
        (``model_id``, ``devices``, ...) are accepted and unused."""
        if model is not None:
            self.init_sender(model if isinstance(model, TensorDictBase) else TensorDict.from_module(model))

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        """Gives the scheme the learner ends of the workers' command pipes (once they exist)."""

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        """Publishes ``weights`` as ``version``: every receiver (those of ``worker_ids`` when given) sees
        them at its next ``receive()``."""
        raise NotImplementedError

    def receiver(self, worker_id: int) -> WeightReceiver:
        """The picklable receiver that worker ``worker_id`` calls ``receive()`` on (abstract)."""
        raise NotImplementedError


class _NoWeightReceiver(WeightReceiver):
    def receive(self) -> tuple[TensorDictBase | None, int]:
        return None, 0


class NoWeightSyncScheme(WeightSyncScheme):
    """Sends nothing: workers keep the weights they started with (TorchRL's ``NoWeightSyncScheme``).

    Examples:
        >>> scheme = NoWeightSyncScheme()
        >>> scheme.init_sender(None)
        >>> scheme.send(None, version=3)
        >>> scheme.receiver(0).receive()
        (None, 0)
    """

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        return None

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        return None

    def receiver(self, worker_id: int) -> WeightReceiver:
        return _NoWeightReceiver()
