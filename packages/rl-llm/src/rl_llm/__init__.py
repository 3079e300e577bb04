"""LLM post-training on rl-tdict: causal-LM policies, chat data, rewards, GRPO/SFT/DPO.

Not implemented yet. This package will hold: causal-LM policy wrapper, chat/prompt data,
rewards, GRPO/SFT/DPO losses, their trainers.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
