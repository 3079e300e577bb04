"""DreamerV3's acting-time latent update (TorchRL's ``RSSMStateEstimatorV3``).

At every environment step the policy needs the current posterior state: the prior's recurrence
advances the belief from the previous state, belief and action, then the posterior draws the state
from that belief and the current observation's embedding. The prior's own state draw is not needed
and not made. Where the reset flag is set (an episode's first step) the previous state, belief and
action are zero first, as in :class:`~rl_objectives.modules.RSSMRolloutV3`.
"""

from __future__ import annotations

from typing import Any

import torch
from tdict import NestedKey, TensorDictBase, unravel_key
from tdict.nn import TensorDictModuleBase

from .rssm_v3 import RSSMPosteriorV3, RSSMPriorV3

__all__ = ["RSSMStateEstimatorV3"]

_DEFAULT_IN_KEYS: list[NestedKey] = ["state", "belief", "previous_action", "encoded_latents", "is_init"]
_DEFAULT_OUT_KEYS: list[NestedKey] = ["state", "belief"]


class RSSMStateEstimatorV3(TensorDictModuleBase):
    """Writes the posterior state and the updated belief of the current step, for the policy.

    Reads, in order, the previous state ``[*B, C*K]``, the previous belief ``[*B, H]``, the
    previous action ``[*B, A]``, the current observation's embedding ``[*B, E]`` and the reset flag
    (``[*B]`` or ``[*B, 1]``); writes the posterior state and the belief (float32).

    Args:
        prior: the world model's :class:`RSSMPriorV3` (shared, not copied).
        posterior: the world model's :class:`RSSMPosteriorV3`.

    Keyword Args:
        in_keys: five keys (default ``["state", "belief", "previous_action", "encoded_latents", "is_init"]``).
        out_keys: two keys (default ``["state", "belief"]``, overwriting the inputs).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules import RSSMPosteriorV3, RSSMPriorV3, RSSMStateEstimatorV3
        >>> prior = RSSMPriorV3(action_shape=(2,), action_dim=2, hidden_dim=8, rnn_hidden_dim=8,
        ...                     num_categoricals=2, num_classes=4)
        >>> posterior = RSSMPosteriorV3(hidden_dim=8, rnn_hidden_dim=8, obs_embed_dim=6,
        ...                             num_categoricals=2, num_classes=4)
        >>> estimator = RSSMStateEstimatorV3(prior, posterior)
        >>> data = TensorDict({"state": torch.randn(2, 8), "belief": torch.randn(2, 8),
        ...                    "previous_action": torch.randn(2, 2), "encoded_latents": torch.randn(2, 6),
        ...                    "is_init": torch.tensor([True, False])}, [2])
        >>> with torch.no_grad():
        ...     result = estimator(data)
        >>> result["state"].shape, result["state"].reshape(2, 2, 4).sum(-1).tolist()
        (torch.Size([2, 8]), [[1.0, 1.0], [1.0, 1.0]])
    """

    def __init__(
        self,
        prior: RSSMPriorV3,
        posterior: RSSMPosteriorV3,
        *,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
    ) -> None:
        if not isinstance(prior, RSSMPriorV3):
            raise TypeError(f"RSSMStateEstimatorV3: prior must be an RSSMPriorV3, got {type(prior).__name__}.")
        if not isinstance(posterior, RSSMPosteriorV3):
            raise TypeError(
                f"RSSMStateEstimatorV3: posterior must be an RSSMPosteriorV3, got {type(posterior).__name__}."
            )
        in_keys = list(_DEFAULT_IN_KEYS if in_keys is None else in_keys)
        out_keys = list(_DEFAULT_OUT_KEYS if out_keys is None else out_keys)
        if len(in_keys) != 5:
            raise ValueError(
                "RSSMStateEstimatorV3: in_keys must hold 5 keys (state, belief, previous action, embedding, reset), "
                f"got {len(in_keys)}: {in_keys}."
            )
        if len(out_keys) != 2:
            raise ValueError(
                f"RSSMStateEstimatorV3: out_keys must hold 2 keys (state, belief), got {len(out_keys)}: {out_keys}."
            )
        super().__init__()
        self.prior, self.posterior = prior, posterior
        self.in_keys = [unravel_key(k) for k in in_keys]
        self.out_keys = [unravel_key(k) for k in out_keys]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the current posterior state and belief into ``tensordict`` (and returns it)."""
        state, belief, action, embedding, reset = (tensordict.get(key) for key in self.in_keys)
        batch = tuple(tensordict.batch_size)
        if reset.numel() != max(1, int(torch.Size(batch).numel())) or reset.shape[: len(batch)] != batch:
            raise ValueError(
                f"RSSMStateEstimatorV3: the reset flag {self.in_keys[4]!r} must have shape {batch} or {(*batch, 1)}, "
                f"got {tuple(reset.shape)}."
            )
        reset = reset.reshape(*batch, 1).bool()
        zero: Any = 0
        state = torch.where(reset, zero, state)
        belief = torch.where(reset, zero, belief)
        action = torch.where(reset, zero, action)
        belief = self.prior.belief_step(state, belief, action)
        _, state = self.posterior(belief, embedding)
        tensordict.set(self.out_keys[0], state.float())
        tensordict.set(self.out_keys[1], belief.float())
        return tensordict
