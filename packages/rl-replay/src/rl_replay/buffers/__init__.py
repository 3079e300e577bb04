"""Replay buffers: a storage, a writer and a sampler behind add/extend/sample."""

from .replay_buffer import ReplayBuffer
from .tensordict_buffer import TensorDictReplayBuffer

__all__ = ["ReplayBuffer", "TensorDictReplayBuffer"]
