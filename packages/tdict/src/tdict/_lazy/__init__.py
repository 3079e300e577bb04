"""Internals of lazy stacks: :class:`~tdict.LazyStackedTensorDict` (in :mod:`tdict.lazy`) is assembled
from these mixins (indexing, shape ops, member-wise ops, ragged access).

Internal: import from :mod:`tdict` or :mod:`tdict.lazy`.
"""
