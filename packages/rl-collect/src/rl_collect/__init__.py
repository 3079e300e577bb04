"""Data collectors on rl-tdict: sync, async and multi-process collectors with weight sync.

Not implemented yet. This package will hold: Collector, AsyncCollector, MultiSyncCollector,
MultiAsyncCollector, weight sync, RayCollector, DistributedCollector.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
