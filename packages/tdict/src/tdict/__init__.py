"""tdict: TensorDict, the data container of the toolkit.

A TensorDict is a dictionary of tensors sharing leading batch dims; it indexes, reshapes,
stacks, moves and saves like a single tensor.

Example:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict({"obs": torch.randn(8, 4), "reward": torch.zeros(8)}, batch_size=[8])
    >>> torch.stack([td, td], 1).batch_size
    torch.Size([8, 2])
"""
from ._keys import is_leaf_nontensor
from ._torch_function import cat, pad, pad_sequence, stack
from ._utils import NestedKey, unravel_key
from .base import TensorDictBase, is_tensor_collection
from .memmap import MemoryMappedTensor
from .tensordict import TensorDict

__version__ = "0.1.0"

__all__ = [
    "MemoryMappedTensor",
    "NestedKey",
    "TensorDict",
    "TensorDictBase",
    "cat",
    "is_leaf_nontensor",
    "is_tensor_collection",
    "pad",
    "pad_sequence",
    "stack",
    "unravel_key",
]
