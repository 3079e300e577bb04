"""The random generators of an env or a transform, saved in its ``state_dict``.

An env that draws its resets from its own ``torch.Generator`` (``PendulumEnv``, ``CartPoleEnv``, the
random transforms) must restore that stream to resume a run exactly. :class:`GeneratorState` makes
``nn.Module.state_dict`` carry the state of every ``torch.Generator`` attribute of the module (as
its ``"_extra_state"`` entry: a dict of uint8 tensors that ``torch.load(weights_only=True)`` reads).

Examples:
    >>> import torch
    >>> from rl_envs import PendulumEnv
    >>> env = PendulumEnv(seed=0)
    >>> state = env.state_dict()
    >>> first = env.reset()["th"]
    >>> env.load_state_dict(state)  # the generator goes back to where it was
    <All keys matched successfully>
    >>> bool(env.reset()["th"] == first)
    True
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["GeneratorState"]


class GeneratorState:
    """Mixin for ``nn.Module`` subclasses: their generators' states travel in ``state_dict``."""

    def _generators(self) -> dict[str, torch.Generator]:
        return {name: gen for name, gen in vars(self).items() if isinstance(gen, torch.Generator)}

    def get_extra_state(self) -> dict[str, torch.Tensor]:
        """The state of each ``torch.Generator`` attribute, by attribute name (``nn.Module`` saves it)."""
        return {name: gen.get_state() for name, gen in self._generators().items()}

    def set_extra_state(self, state: Any) -> None:
        """Restores the generators from :meth:`get_extra_state`'s dict (called by ``load_state_dict``).

        Raises:
            ValueError: the names differ from the generator attributes, or a state is not a uint8
                tensor shaped like that generator's ``get_state()``.
        """
        owner = type(self).__name__
        generators = self._generators()
        if not isinstance(state, dict) or set(state) != set(generators):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{owner}.load_state_dict: the generator states must be named {sorted(generators)}, got {got}."
            )
        bad = [
            n
            for n, s in state.items()
            if not (
                isinstance(s, torch.Tensor) and s.dtype is torch.uint8 and s.shape == generators[n].get_state().shape
            )
        ]
        if bad:
            raise ValueError(
                f"{owner}.load_state_dict: generator states {bad} must be uint8 tensors shaped like Generator.get_state() "
                "of a generator on the same kind of device."
            )
        for name, gen in generators.items():  # every state was checked: now set them
            gen.set_state(state[name].cpu())
