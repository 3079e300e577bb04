"""tdict.specs: descriptions of the entries an environment reads and writes (TorchRL-compatible names).

Specs generate values (``rand``, ``zero``), validate them (``is_in``, ``assert_is_in``), project
values into their domain and convert between numpy and torch.

Examples:
    >>> import torch
    >>> from tdict.specs import Bounded, Composite, OneHot
    >>> spec = Composite(action=OneHot(3), obs=Bounded(0.0, 1.0, shape=(2,)))
    >>> td = spec.rand((5,))
    >>> td.batch_size, spec.is_in(td)
    (torch.Size([5]), True)
"""

from .base import TensorSpec
from .bounded import Bounded, BoundedContinuous, BoundedDiscrete, ContinuousBox
from .choice import Choice
from .composite import Composite
from .consolidate import consolidate_spec
from .discrete import Binary, Categorical, MultiCategorical, MultiOneHot, OneHot
from .non_tensor import NonTensor
from .stacked import Stacked, StackedComposite, stack_specs
from .unbounded import Unbounded, UnboundedContinuous, UnboundedDiscrete

__all__ = [
    "Binary",
    "Bounded",
    "BoundedContinuous",
    "BoundedDiscrete",
    "Categorical",
    "Choice",
    "Composite",
    "ContinuousBox",
    "MultiCategorical",
    "MultiOneHot",
    "NonTensor",
    "OneHot",
    "Stacked",
    "StackedComposite",
    "TensorSpec",
    "Unbounded",
    "UnboundedContinuous",
    "UnboundedDiscrete",
    "consolidate_spec",
    "stack_specs",
]
