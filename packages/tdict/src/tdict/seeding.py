"""Seeding, the one convention every package follows.

**The convention.** An object seeded with ``seed`` that uses ``k`` independent random streams (an
env's generator, the workers of a batched env, a collector's random actions) seeds stream ``i``
with ``seed + i``, and its ``set_seed(seed)`` returns ``seed + k``: the seed of the next object.
Seeding objects in turn, each with the seed the previous one returned (:func:`chain_seeds`),
gives every stream a distinct seed; when each object uses one stream this is the same as seeding
object ``i`` with ``seed + i``, as Gymnasium's vector envs and Stable-Baselines3 seed their
sub-envs. (TorchRL's ``set_seed`` returns a hashed seed instead.) ``set_seed(None)`` seeds the
streams randomly and returns ``None``.

**No global reseeding.** Library components (envs, transforms, collectors) draw from their own
``torch.Generator`` (:func:`make_generator`, :func:`use_generator`) and never reseed the global
generators. :func:`seed_everything` does, once, at a program's entry point (a trainer's), and
:func:`rng_state` / :func:`set_rng_state` save and restore the global generators in checkpoints.

Examples:
    >>> from tdict.seeding import next_seed, stream_seeds
    >>> stream_seeds(10, 3)  # an object with 3 streams, seeded with 10
    [10, 11, 12]
    >>> next_seed(10, streams=3)  # what its set_seed returns: the next object's seed
    13
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, cast, overload

import torch

from .validation import _shown, check_int

__all__ = [
    "chain_seeds",
    "check_rng_state",
    "check_seed",
    "make_generator",
    "next_seed",
    "rng_state",
    "seed_everything",
    "set_rng_state",
    "stream_seeds",
    "use_generator",
]

_TORCH_SEEDS = 2**64  # torch.Generator.manual_seed takes [-2**63, 2**64); seeds are taken modulo this


@overload
def check_seed(owner: str, seed: Any, *, name: str = "seed", allow_none: Literal[False] = False) -> int: ...


@overload
def check_seed(owner: str, seed: Any, *, name: str = "seed", allow_none: bool) -> int | None: ...


def check_seed(owner: str, seed: Any, *, name: str = "seed", allow_none: bool = False) -> int | None:
    """``seed`` as a Python ``int`` (not a bool; any integer, negative too), or ``None`` when allowed.

    Raises:
        ArgumentTypeError: ``seed`` is not an integer (a ``TypeError`` and a ``ValueError``).

    Examples:
        >>> check_seed("PendulumEnv.set_seed", 3)
        3
        >>> check_seed("PendulumEnv.set_seed", 1.5, allow_none=True)
        Traceback (most recent call last):
        ...
        tdict.validation.ArgumentTypeError: PendulumEnv.set_seed: seed must be an int or None, got 1.5.
    """
    return check_int(owner, name, seed, allow_none=allow_none)


def next_seed(seed: int, streams: int = 1) -> int:
    """The seed that follows an object with ``streams`` random streams seeded with ``seed``: ``seed + streams``.

    Examples:
        >>> next_seed(3)
        4
        >>> next_seed(3, streams=0)  # an object that draws nothing hands its seed on
        3
        >>> next_seed(True)
        Traceback (most recent call last):
        ...
        tdict.validation.ArgumentTypeError: next_seed: seed must be an int, got True.
    """
    return check_seed("next_seed", seed) + check_int("next_seed", "streams", streams, minimum=0)


def stream_seeds(seed: int, n: int) -> list[int]:
    """The seeds of the ``n`` streams of an object seeded with ``seed``: ``[seed, ..., seed + n - 1]``.

    Examples:
        >>> stream_seeds(7, 2)
        [7, 8]
    """
    seed = check_seed("stream_seeds", seed)
    return [seed + i for i in range(check_int("stream_seeds", "n", n, minimum=0))]


@overload
def chain_seeds(seed: int, set_seeds: Iterable[Callable[[Any], Any]]) -> int: ...
@overload
def chain_seeds(seed: None, set_seeds: Iterable[Callable[[Any], Any]]) -> None: ...
@overload
def chain_seeds(seed: int | None, set_seeds: Iterable[Callable[[Any], Any]]) -> int | None: ...
def chain_seeds(seed: int | None, set_seeds: Iterable[Callable[[Any], Any]]) -> int | None:
    """Seeds objects in turn: each ``set_seed`` gets the seed the previous one returned; returns the last.

    This is how a container seeds its parts (a batched env its workers, a collector its env and
    its own generator): every stream of every part gets a distinct seed. ``seed=None`` passes
    ``None`` to each (random seeds) and returns ``None``.

    Examples:
        >>> class Part:  # two streams
        ...     def set_seed(self, seed):
        ...         self.seeds = stream_seeds(seed, 2)
        ...         return next_seed(seed, 2)
        >>> parts = [Part(), Part()]
        >>> chain_seeds(0, [p.set_seed for p in parts])
        4
        >>> [p.seeds for p in parts]
        [[0, 1], [2, 3]]
    """
    seed = check_seed("chain_seeds", seed, allow_none=True)
    for set_seed in set_seeds:
        returned = set_seed(seed)
        if seed is None:
            continue
        name = f"the seed returned by {getattr(set_seed, '__qualname__', set_seed)!s} for seed {seed}"
        seed = check_seed("chain_seeds", returned, name=name)
    return seed


def make_generator(seed: int | None, device: Any = None, *, owner: str = "make_generator") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (default CPU) seeded with ``seed`` (any int, taken modulo ``2**64``).

    ``seed=None`` draws the seed from torch's global generator (without reseeding it): distinct
    generators, and a program that called :func:`seed_everything` is reproducible end to end.
    ``owner`` names the caller in the error raised for a seed that is not an int.

    Examples:
        >>> import torch
        >>> a, b = make_generator(0), make_generator(0)
        >>> bool(torch.rand(3, generator=a).equal(torch.rand(3, generator=b)))
        True
    """
    seed = check_seed(owner, seed, allow_none=True)
    if seed is None:
        seed = int(torch.empty((), dtype=torch.int64).random_())
    generator = torch.Generator(device=torch.device("cpu") if device is None else device)
    return generator.manual_seed(seed % _TORCH_SEEDS)


@contextlib.contextmanager
def use_generator(generator: torch.Generator | None) -> Iterator[None]:
    """Inside the block, torch's global generator of ``generator``'s device draws from ``generator``.

    For code that takes no generator (``torch.distributions``, a policy's exploration noise): the
    global generator's state is saved and replaced by ``generator``'s; at the end ``generator`` takes
    the advanced state and the global generator gets its own back (it neither advances nor changes).
    Don't draw from ``generator`` directly inside the block (those draws would be overwritten).
    No-op for ``None`` and under ``torch.compile`` (not traceable). CPU and CUDA generators.

    Examples:
        >>> import torch
        >>> g, before = make_generator(0), torch.get_rng_state()
        >>> with use_generator(g):
        ...     x = torch.rand(2)
        >>> bool(x.equal(torch.rand(2, generator=make_generator(0)))), bool(torch.get_rng_state().equal(before))
        (True, True)
    """
    if generator is None or torch.compiler.is_compiling():
        yield
        return
    device = generator.device
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()

        def get_state() -> torch.Tensor:
            return torch.cuda.get_rng_state(index)

        def set_state(new_state: torch.Tensor) -> None:
            torch.cuda.set_rng_state(new_state, index)
    elif device.type == "cpu":
        get_state, set_state = torch.get_rng_state, torch.set_rng_state
    else:
        raise ValueError(f"use_generator: generator must be on a CPU or CUDA device, got {device}.")
    saved = get_state()
    set_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(get_state())
        set_state(saved)


# ---------------------------------------------------------------------- the global generators
def seed_everything(seed: int) -> None:
    """Seeds torch's (CPU and CUDA), NumPy's (when installed) and Python's global generators with ``seed``.

    The only place the library reseeds the global generators: call it at a program's entry point
    (a trainer does, as TRL's ``set_seed`` and SB3's ``set_random_seed``), never from a component.

    Examples:
        >>> import random, torch
        >>> seed_everything(0); a = (torch.rand(1), random.random())
        >>> seed_everything(0); a == (torch.rand(1), random.random())
        True
    """
    seed = check_seed("seed_everything", seed)
    torch.manual_seed(seed % _TORCH_SEEDS)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch in practice
        return
    np.random.seed(seed % 2**32)


def rng_state() -> dict[str, Any]:
    """The states of torch's (CPU and CUDA), NumPy's and Python's global generators, as plain data.

    A checkpoint that resumes a run exactly carries them: tensors, lists and numbers only, which
    ``torch.load(weights_only=True)`` reads back.

    Examples:
        >>> import random, torch
        >>> state = rng_state()
        >>> a, b = torch.rand(2), random.random()
        >>> set_rng_state(state)
        >>> bool((torch.rand(2) == a).all()), random.random() == b
        (True, True)
    """
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch in practice
        return state
    # the legacy global generator (an MT19937) gives the tuple form, never the dict one
    kind, keys, pos, has_gauss, cached = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    state["numpy"] = {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype("int64")),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }
    return state


def check_rng_state(state: Any, *, owner: str = "set_rng_state", name: str = "state") -> None:
    """Raises ``ValueError`` unless ``state`` looks like what :func:`rng_state` returns.

    Examples:
        >>> check_rng_state(rng_state())
        >>> check_rng_state({"torch": 0}, owner="Trainer.load_state_dict", name="state['rng']")
        Traceback (most recent call last):
        ...
        ValueError: Trainer.load_state_dict: state['rng'] must come from rng_state() (torch and python entries), got {'torch': 0}.
    """
    ok = (
        isinstance(state, Mapping)
        and isinstance(state.get("torch"), torch.Tensor)
        and isinstance(state.get("python"), (list, tuple))
    )
    if not ok:
        raise ValueError(f"{owner}: {name} must come from rng_state() (torch and python entries), got {_shown(state)}.")


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restores what :func:`rng_state` returned (the generators it names)."""
    check_rng_state(state)
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        npy = state["numpy"]
        np.random.set_state(
            (npy["kind"], npy["keys"].numpy().astype("uint32"), npy["pos"], npy["has_gauss"], npy["cached_gaussian"])
        )
