"""Storages: where items live (lists, preallocated tensors, memory-mapped files, compressed lists)."""

from .base import Storage
from .list import ListStorage
from .tensor import LazyTensorStorage, TensorStorage

__all__ = ["LazyTensorStorage", "ListStorage", "Storage", "TensorStorage"]
