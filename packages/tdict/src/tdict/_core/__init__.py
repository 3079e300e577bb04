"""The core container's operations: :class:`~tdict.TensorDictBase` is assembled from one mixin per topic.

Internal: import from :mod:`tdict`. The table in :class:`~tdict.TensorDictBase`'s docstring says
which module holds which method.
"""
