"""tdict.nn: modules that read and write TensorDict entries by key (tensordict.nn under our import).

Examples:
    >>> import torch
    >>> from torch import nn
    >>> from tdict import TensorDict
    >>> from tdict.nn import TensorDictModule, TensorDictSequential
    >>> actor = TensorDictSequential(
    ...     TensorDictModule(nn.Linear(4, 8), in_keys=["obs"], out_keys=["hidden"]),
    ...     TensorDictModule(nn.Linear(8, 2), in_keys=["hidden"], out_keys=["action"]),
    ... )
    >>> actor(TensorDict(obs=torch.randn(3, 4), batch_size=[3]))["action"].shape
    torch.Size([3, 2])
"""

from .common import (
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictModuleWrapper,
    WrapModule,
    as_tensordict_module,
    dispatch,
)
from .interaction import InteractionType, ScopedSwitch, interaction_type, set_interaction_type
from .sequence import TensorDictSequential

__all__ = [
    "InteractionType",
    "ScopedSwitch",
    "TensorDictModule",
    "TensorDictModuleBase",
    "TensorDictModuleWrapper",
    "TensorDictSequential",
    "WrapModule",
    "as_tensordict_module",
    "dispatch",
    "interaction_type",
    "set_interaction_type",
]
from .distributions import (
    AddStateIndependentNormalScale,
    CompositeDistribution,
    Delta,
    NormalParamExtractor,
    OneHotCategorical,
    TruncatedNormal,
    holder_batch_dims,
    sum_to_batch,
)
from .probabilistic import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential

__all__ += [
    "AddStateIndependentNormalScale",
    "CompositeDistribution",
    "Delta",
    "NormalParamExtractor",
    "OneHotCategorical",
    "ProbabilisticTensorDictModule",
    "ProbabilisticTensorDictSequential",
    "TruncatedNormal",
    "holder_batch_dims",
    "sum_to_batch",
]
from .params import Buffer, TensorDictParams  # noqa: E402
from .ensemble import EnsembleModule  # noqa: E402
from .cudagraphs import CudaGraphModule  # noqa: E402

__all__ += ["Buffer", "CudaGraphModule", "EnsembleModule", "TensorDictParams"]
from .tensor_keys import TensorKeys, TensorKeysMixin  # noqa: E402

__all__ += ["TensorKeys", "TensorKeysMixin"]
from .tensorclass_module import TensorClassModuleBase, TensorClassModuleWrapper  # noqa: E402

__all__ += ["TensorClassModuleBase", "TensorClassModuleWrapper"]
