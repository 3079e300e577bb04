"""tdict: TensorDict, the data container of the toolkit.

A TensorDict is a dictionary of tensors sharing leading batch dims; it indexes, reshapes,
stacks, moves and saves like a single tensor.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict({"obs": torch.randn(8, 4), "reward": torch.zeros(8)}, batch_size=[8])
    >>> torch.stack([td, td], 1).batch_size
    torch.Size([8, 2])
"""

from typing import TYPE_CHECKING

from ._core.keys import is_leaf_nontensor
from ._core.pad_sequence import pad_sequence
from ._core.torch_function import cat, pad, stack
from ._core.utils import NestedKey, unravel_key
from .base import TensorDictBase, is_tensor_collection
from .lazy import LazyStackedTensorDict, lazy_stack
from .memmap import MemoryMappedTensor
from .metadata import MetaData
from .non_tensor import NonTensorData, is_non_tensor
from .non_tensor_stack import LinkedList, NonTensorStack
from .consolidate import from_consolidated
from .expand import expand_as_right, expand_right
from .persistence import MemmapLoadError, load, load_memmap, memmap, save
from .scalars import scalar_like
from .tensorclass import TensorClass, is_tensorclass, tensorclass
from .tensordict import TensorDict
from .attrs import TensorAttrs
from .typed import TypedTensorDict
from .unbatched import UnbatchedTensor
from ._core import pytree as _pytree  # noqa: F401  (registers the collections as pytree nodes)
from ._core.pytree import PYTREE_REGISTERED_LAZY_TDS, PYTREE_REGISTERED_TDS
from ._core.combining import dense_stack_tds, maybe_dense_stack, merge_tensordicts
from ._core.constructors import (
    from_any,
    from_dataclass,
    from_dict,
    from_namedtuple,
    from_pytree,
    from_struct_array,
    from_tuple,
    fromkeys,
    make_tensordict,
)
from ._core.indexing import convert_ellipsis_to_idx
from ._core.keys import default_is_leaf
from ._core.utils import unravel_key_list, unravel_keys
from .testing import assert_allclose_td, assert_close

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .persistent import PersistentTensorDict


def __getattr__(name: str):
    # PersistentTensorDict is loaded on first use: its module needs numpy and, to be built, h5py
    if name == "PersistentTensorDict":
        from .persistent import PersistentTensorDict

        return PersistentTensorDict
    raise AttributeError(f"module 'tdict' has no attribute {name!r}")


__all__ = [
    "PYTREE_REGISTERED_LAZY_TDS",
    "PYTREE_REGISTERED_TDS",
    "LazyStackedTensorDict",
    "MemmapLoadError",
    "MemoryMappedTensor",
    "MetaData",
    "NestedKey",
    "NonTensorData",
    "LinkedList",
    "NonTensorStack",
    "PersistentTensorDict",
    "TensorClass",
    "TensorAttrs",
    "TensorDict",
    "TensorDictBase",
    "TypedTensorDict",
    "UnbatchedTensor",
    "cat",
    "expand_as_right",
    "expand_right",
    "from_consolidated",
    "is_leaf_nontensor",
    "is_non_tensor",
    "is_tensor_collection",
    "is_tensorclass",
    "lazy_stack",
    "load",
    "load_memmap",
    "memmap",
    "pad",
    "pad_sequence",
    "save",
    "scalar_like",
    "stack",
    "tensorclass",
    "unravel_key",
    # constructors, combining and testing helpers
    "assert_allclose_td",
    "assert_close",
    "convert_ellipsis_to_idx",
    "default_is_leaf",
    "dense_stack_tds",
    "from_any",
    "from_dataclass",
    "from_dict",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "fromkeys",
    "make_tensordict",
    "maybe_dense_stack",
    "merge_tensordicts",
    "unravel_key_list",
    "unravel_keys",
]
