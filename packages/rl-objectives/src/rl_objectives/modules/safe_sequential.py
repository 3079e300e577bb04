"""SafeSequential: a TensorDictSequential whose ``spec`` gathers the specs of its modules (TorchRL's name)."""

from __future__ import annotations

from typing import Any

from tdict.nn import TensorDictSequential
from tdict.specs import Composite

__all__ = ["SafeSequential"]


class SafeSequential(TensorDictSequential):
    """TensorDict modules run in order (:class:`~tdict.nn.TensorDictSequential`), with ``spec``: the
    :class:`~tdict.specs.Composite` of every module's output spec (``None`` for the out-keys of a
    module without one), as TorchRL's ``SafeSequential``.

    Args:
        *modules: the TensorDict modules, in order (anything else raises ``TypeError``).
        partial_tolerant, selected_out_keys, inplace: as in :class:`~tdict.nn.TensorDictSequential`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from tdict.specs import Unbounded
        >>> from rl_objectives.modules import SafeModule, SafeSequential
        >>> first = SafeModule(torch.nn.Linear(3, 4), in_keys=["x"], out_keys=["h"], spec=Unbounded(4))
        >>> second = TensorDictModule(torch.nn.Linear(4, 2), in_keys=["h"], out_keys=["y"])
        >>> seq = SafeSequential(first, second)
        >>> seq(TensorDict(x=torch.zeros(5, 3), batch_size=[5]))["y"].shape
        torch.Size([5, 2])
        >>> sorted(seq.spec.keys()), seq.spec["y"] is None
        (['h', 'y'], True)
    """

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        selected_out_keys: Any = None,
        inplace: bool | str | None = None,
    ) -> None:
        for i, module in enumerate(modules):
            if not hasattr(module, "out_keys"):
                raise TypeError(
                    f"SafeSequential: module {i} must be a TensorDict module (with in_keys and out_keys), "
                    f"got {type(module).__name__}."
                )
        super().__init__(
            *modules, partial_tolerant=partial_tolerant, selected_out_keys=selected_out_keys, inplace=inplace
        )
        spec = Composite()
        for module in modules:
            own = getattr(module, "spec", None)
            spec.update(own if isinstance(own, Composite) else Composite({key: None for key in module.out_keys}))
        self._spec = spec

    @property
    def spec(self) -> Composite:
        """The specs of the modules' outputs, gathered (``None`` where a module has none)."""
        return self._spec
