"""Optional Triton/CUDA kernels, each with a pure-torch reference, for the rl-* packages.

Not implemented yet. This package will hold: Triton/CUDA ops with pure-torch references: reset-
aware scans (GAE, TD(lambda), V-trace), LSTM/GRU with resets, sum-tree sample/update, chunked
log-softmax gather.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
