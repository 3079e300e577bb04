"""Internals of saving and loading: the memmap format (write plan, metadata, loading), state dicts,
and the storage methods of :class:`~tdict.TensorDictBase` that delegate to the public I/O modules
(:mod:`tdict.memmap`, :mod:`tdict.persistence`, :mod:`tdict.consolidate`, :mod:`tdict.files`).

Internal: import from those modules.
"""
