"""Target-network updaters: move a loss's ``target_<name>_params`` towards ``<name>_params``.

``SoftUpdate`` is Polyak averaging after every optimizer step (DDPG, SAC, TD3);
``HardUpdate`` copies every ``value_network_update_interval`` steps (DQN). ``step()`` counts one
step, as in TorchRL; ``step(n)`` counts ``n`` at once (collected frames, with
:class:`~rl_objectives.trainers.TargetNetUpdaterHook`'s ``unit="frames"``).
"""

from __future__ import annotations

import warnings

import torch
from tdict import TensorDict
from tdict.errors import ArgumentTypeError, InvalidArgumentError
from tdict.validation import check_non_negative_int, check_positive_int

from .common import LossModule

__all__ = ["HardUpdate", "SoftUpdate", "TargetNetUpdater"]


class TargetNetUpdater:
    """Pairs every trained parameter of a loss with its target copy.

    Args:
        loss_module: a :class:`LossModule` with at least one network registered with
            ``create_target_params=True``.
    """

    def __init__(self, loss_module: LossModule) -> None:
        if not isinstance(loss_module, LossModule):
            raise ArgumentTypeError(  # a TypeError, also the ValueError TorchRL raises
                f"{type(self).__name__}: The loss_module must be a LossModule instance, got {type(loss_module).__name__}."
            )
        names = loss_module.target_networks
        if not names:
            raise InvalidArgumentError(  # a ValueError, also the RuntimeError TorchRL raises
                f"{type(self).__name__}: Did not find any target parameters or buffers in the loss module "
                f"{type(loss_module).__name__} (register a network with create_target_params=True)."
            )
        self.loss_module = loss_module
        loss_module._target_updater_attached = True
        # "<name>_params" / "target_<name>_params" -> the network's leaves (TorchRL's layout)
        self._sources = TensorDict({f"{name}_params": loss_module.params_of(name) for name in names})
        self._targets = TensorDict({f"target_{name}_params": loss_module.params_of(name, True) for name in names})
        self._source_leaves: list[torch.Tensor] = []  # paired by key, flat: what step() walks
        self._target_leaves: list[torch.Tensor] = []
        for key, source in self._sources.items(include_nested=True, leaves_only=True):
            self._source_leaves.append(source)
            self._target_leaves.append(self._targets.get(("target_" + key[0], *key[1:])))
        self.initialized = False
        self.init_()

    @torch.no_grad()
    def init_(self) -> None:
        """Copy the trained parameters into the targets (warns when called again: the targets restart)."""
        if self.initialized:
            warnings.warn(
                f"{type(self).__name__}: the updater was already initialized; init_() copies the trained parameters "
                "into the targets again.",
                UserWarning,
                stacklevel=2,
            )
        self._copy()
        self.initialized = True

    @torch.no_grad()
    def _copy(self) -> None:
        for src, dst in zip(self._source_leaves, self._target_leaves):
            dst.copy_(src)

    def step(self, n: int = 1) -> None:  # pragma: no cover - abstract
        """Moves the target parameters ``n`` updates towards the trained ones (abstract)."""
        raise NotImplementedError


class SoftUpdate(TargetNetUpdater):
    """``target = eps * target + (1 - eps) * source`` after every call of :meth:`step`.

    ``step(n)`` applies ``n`` such updates towards the current parameters at once, in closed form:
    ``target = eps**n * target + (1 - eps**n) * source`` (``n=0`` changes nothing).

    Args:
        loss_module: the loss whose targets are updated.
        eps: weight kept by the target (``1 - tau``); give ``eps`` or ``tau``, not both.
        tau: weight given to the trained parameters.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives import LossModule, SoftUpdate
        >>> class L(LossModule):
        ...     def __init__(self, net):
        ...         super().__init__()
        ...         self.convert_to_functional(net, "net", create_target_params=True)
        >>> loss = L(TensorDictModule(nn.Linear(2, 1), in_keys=["x"], out_keys=["y"]))
        >>> updater = SoftUpdate(loss, tau=0.1)
        >>> with torch.no_grad():
        ...     _ = loss.net.module.weight.add_(1.0)
        >>> updater.step()
        >>> delta = loss.params_of("net")["module", "weight"] - loss.params_of("net", target=True)["module", "weight"]
        >>> torch.allclose(delta, torch.full((1, 2), 0.9))
        True
    """

    def __init__(self, loss_module: LossModule, *, eps: float | None = None, tau: float | None = None) -> None:
        if (eps is None) == (tau is None):
            raise ValueError(
                f"SoftUpdate: One and only one argument of eps and tau must be given (tau = 1 - eps), got eps={eps!r}, "
                f"tau={tau!r}."
            )
        if eps is None:
            assert tau is not None  # exactly one of them (checked above)
            eps = 1.0 - tau
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"SoftUpdate: eps must be in [0, 1] (tau = 1 - eps), got eps={eps!r}.")
        self.eps = float(eps)
        super().__init__(loss_module)

    @torch.no_grad()
    def step(self, n: int = 1) -> None:
        """``n`` Polyak updates (default one) towards the current parameters.

        Raises:
            ValueError: ``n`` is not a non-negative int.
        """
        if check_non_negative_int("SoftUpdate.step", "n (the number of steps to count)", n) == 0:
            return
        floats = [(s, t) for s, t in zip(self._source_leaves, self._target_leaves) if t.is_floating_point()]
        if floats:
            torch._foreach_lerp_([t for _, t in floats], [s for s, _ in floats], 1.0 - self.eps**n)  # pyright: ignore[reportPrivateImportUsage]
        for src, dst in zip(self._source_leaves, self._target_leaves):
            if not dst.is_floating_point():
                dst.copy_(src)  # counters and other integer buffers follow exactly


class HardUpdate(TargetNetUpdater):
    """Copy the trained parameters into the targets every ``value_network_update_interval`` steps.

    ``counter`` counts the steps: ``step()`` adds one (TorchRL's rule: an optimizer step), ``step(n)``
    adds ``n`` (e.g. the frames of a collected batch). A call copies once when the counter crossed a
    multiple of the interval, however many it crossed (the copies would be the same).

    Args:
        loss_module: the loss whose targets are updated.
        value_network_update_interval: number of counted steps between copies.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives import HardUpdate, LossModule
        >>> class L(LossModule):
        ...     def __init__(self, net):
        ...         super().__init__()
        ...         self.convert_to_functional(net, "net", create_target_params=True)
        >>> loss = L(TensorDictModule(nn.Linear(2, 1), in_keys=["x"], out_keys=["y"]))
        >>> updater = HardUpdate(loss, value_network_update_interval=2)
        >>> with torch.no_grad():
        ...     _ = loss.net.module.bias.fill_(3.0)
        >>> updater.step()
        >>> float(loss.params_of("net", target=True)["module", "bias"]) == 3.0
        False
        >>> updater.step()
        >>> float(loss.params_of("net", target=True)["module", "bias"])
        3.0
        >>> with torch.no_grad():
        ...     _ = loss.net.module.bias.fill_(5.0)
        >>> updater.step(3)  # counter 2 -> 5: crosses 4, one copy
        >>> updater.counter, float(loss.params_of("net", target=True)["module", "bias"])
        (5, 5.0)
    """

    def __init__(self, loss_module: LossModule, *, value_network_update_interval: int = 1000) -> None:
        check_positive_int("HardUpdate", "value_network_update_interval", value_network_update_interval)
        self.value_network_update_interval = value_network_update_interval
        self.counter = 0
        super().__init__(loss_module)

    def step(self, n: int = 1) -> None:
        """Counts ``n`` steps (default one); copies if the counter crossed a multiple of the interval.

        Raises:
            ValueError: ``n`` is not a non-negative int.
        """
        check_non_negative_int("HardUpdate.step", "n (the number of steps to count)", n)
        before = self.counter
        self.counter = before + n
        interval = self.value_network_update_interval
        if self.counter // interval > before // interval:
            self._copy()
