"""Samplers: which items a batch holds (uniform, without replacement, prioritized, trajectory slices)."""

from .base import Sampler
from .uniform import RandomSampler, SamplerWithoutReplacement

__all__ = ["RandomSampler", "Sampler", "SamplerWithoutReplacement"]
