"""Wrappers of third-party simulators (each behind its extra: ``rl-envs[gymnasium]``...)."""
