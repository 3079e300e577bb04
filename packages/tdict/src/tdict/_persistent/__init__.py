"""Private building blocks of :class:`tdict.PersistentTensorDict` (``tdict/persistent.py``).

- ``h5``: the h5py import, dataset views (:class:`~tdict._persistent.h5.Selection`) and codecs;
- ``layout``: the file's structure: keys, batch sizes, pickling, repr;
- ``writes``: the write path (planned and checked before the first write).
"""
