"""Decision Transformer: a causal transformer over (return-to-go, state, action) tokens, and its actors.

The Decision Transformer (Chen et al., 2021) casts control as sequence modelling: a trajectory is the
token sequence ``(R_1, s_1, a_1, R_2, s_2, a_2, ...)`` where ``R_t`` is the return-to-go, and the
action ``a_t`` is read off the transformer's output at the state token ``s_t``. The causal mask lets
that output see ``R_1..R_t``, ``s_1..s_t`` and ``a_1..a_{t-1}``, never ``a_t`` or anything later.

TorchRL builds the transformer from Hugging Face's ``GPT2Model``; this package depends on torch
only, so :class:`DecisionTransformer` holds a small GPT-2-style stack written here: learned position
embeddings over the ``3 T`` token positions, pre-LayerNorm blocks (causal self-attention through
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, then a two-layer MLP), a final
LayerNorm, and GPT-2's initialisation. Its configuration (:class:`DTConfig`) has the fields of
TorchRL's ``DecisionTransformer.DTConfig``.

Shapes: ``observation [*B, T, state_dim]``, ``action [*B, T, action_dim]`` and
``return_to_go [*B, T]``: the return-to-go is a per-step scalar and, by this package's rule, has
no trailing singleton dim (TorchRL takes ``[*B, T, 1]``). ``*B`` may be empty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from tdict import unravel_key
from tdict.nn import TensorDictModuleBase, TensorDictModuleWrapper
from tdict.validation import check_one_of, check_positive_int
from torch import nn

__all__ = [
    "DTActor",
    "DTConfig",
    "DecisionTransformer",
    "DecisionTransformerInferenceWrapper",
    "OnlineDTActor",
]

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,  # exact (erf) GELU, as Hugging Face's "gelu"
    "gelu_new": lambda: nn.GELU(approximate="tanh"),  # GPT-2's original tanh approximation
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
}
_INIT_STD = 0.02  # GPT-2's initializer_range
_LN_EPS = 1e-5  # GPT-2's layer_norm_epsilon


@dataclass
class DTConfig:
    """Architecture of the transformer of a :class:`DecisionTransformer` (TorchRL's ``DTConfig``).

    Attributes:
        n_embd: width of the token embeddings and hidden states.
        n_layer: number of transformer blocks.
        n_head: attention heads per block (must divide ``n_embd``).
        n_inner: hidden width of each block's MLP (``None``: ``4 * n_embd``).
        activation: the MLP's activation: ``"relu"``, ``"gelu"``, ``"gelu_new"`` (tanh approximation),
            ``"silu"`` / ``"swish"`` or ``"tanh"``.
        n_positions: the most tokens one sequence may hold; ``T`` steps take ``3 T`` tokens.
        resid_pdrop: dropout on the embeddings and on each residual branch.
        attn_pdrop: dropout on the attention weights.

    Examples:
        >>> from rl_objectives.modules.decision_transformer import DTConfig
        >>> DTConfig(n_embd=32, n_layer=1, n_head=2).n_positions
        1024
    """

    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_inner: int | None = 1024
    activation: str = "relu"
    n_positions: int = 1024
    resid_pdrop: float = 0.1
    attn_pdrop: float = 0.1


def _resolve_config(owner: str, config: DTConfig | Mapping[str, Any] | None, default: DTConfig) -> DTConfig:
    """``config`` as a checked :class:`DTConfig`; a dict may leave fields out (they come from ``default``)."""
    if config is None:
        config = default
    elif isinstance(config, Mapping):
        fields = [f.name for f in dataclasses.fields(DTConfig)]
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise ValueError(f"{owner}: unknown transformer config key(s) {unknown}; accepted: {fields}.")
        config = dataclasses.replace(default, **config)
    elif not isinstance(config, DTConfig):
        raise TypeError(
            f"{owner}: the transformer config must be a DTConfig, a dict or None, got {type(config).__name__}."
        )
    for name in ("n_embd", "n_layer", "n_head", "n_positions"):
        check_positive_int(owner, f"config.{name}", getattr(config, name))
    if config.n_inner is not None:
        check_positive_int(owner, "config.n_inner", config.n_inner)
    if config.n_embd % config.n_head:
        raise ValueError(f"{owner}: config.n_head ({config.n_head}) must divide config.n_embd ({config.n_embd}).")
    check_one_of(owner, "config.activation", config.activation, sorted(_ACTIVATIONS))
    for name in ("resid_pdrop", "attn_pdrop"):
        p = getattr(config, name)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"{owner}: config.{name} must be a probability in [0, 1), got {p!r}.")
    return config


def _device_scope(device: Any) -> Any:
    return torch.device(device) if device is not None else contextlib.nullcontext()


class _CausalSelfAttention(nn.Module):
    """Multi-head self-attention where token ``i`` attends to tokens ``0..i`` only."""

    def __init__(self, n_embd: int, n_head: int, attn_pdrop: float, resid_pdrop: float) -> None:
        super().__init__()
        self.n_embd, self.n_head, self.attn_pdrop = n_embd, n_head, attn_pdrop
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # query, key and value in one matmul
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, width = x.shape
        heads = self.n_head

        def split(t: torch.Tensor) -> torch.Tensor:  # [N, L, E] -> [N, heads, L, E / heads]
            return t.reshape(n, length, heads, width // heads).transpose(1, 2)

        q, k, v = self.c_attn(x).split(width, dim=-1)
        y = F.scaled_dot_product_attention(
            split(q), split(k), split(v), dropout_p=self.attn_pdrop if self.training else 0.0, is_causal=True
        )
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(n, length, width)))


class _MLP(nn.Module):
    def __init__(self, n_embd: int, n_inner: int, activation: str, resid_pdrop: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_inner)
        self.act = _ACTIVATIONS[activation]()
        self.c_proj = nn.Linear(n_inner, n_embd)
        self.dropout = nn.Dropout(resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class _Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln_1(x))``, then ``h + mlp(ln_2(h))``."""

    def __init__(self, config: DTConfig) -> None:
        super().__init__()
        inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=_LN_EPS)
        self.attn = _CausalSelfAttention(config.n_embd, config.n_head, config.attn_pdrop, config.resid_pdrop)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=_LN_EPS)
        self.mlp = _MLP(config.n_embd, inner, config.activation, config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _GPT(nn.Module):
    """GPT-2's body fed with embeddings: position embeddings, dropout, blocks, final LayerNorm."""

    def __init__(self, config: DTConfig) -> None:
        super().__init__()
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.resid_pdrop)
        self.h = nn.ModuleList(_Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=_LN_EPS)
        self.reset_parameters(config.n_layer)

    def reset_parameters(self, n_layer: int | None = None) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, residual projections scaled by
        ``1 / sqrt(2 n_layer)`` so the residual stream's variance does not grow with depth."""
        n_layer = len(self.h) if n_layer is None else n_layer
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = _INIT_STD / math.sqrt(2 * n_layer) if name.endswith("c_proj") else _INIT_STD
                nn.init.normal_(module.weight, 0.0, std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, _INIT_STD)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(inputs_embeds.shape[-2], device=inputs_embeds.device)
        x = self.drop(inputs_embeds + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class DecisionTransformer(nn.Module):
    """The Decision Transformer's sequence model: the hidden state at every state token.

    The three inputs are embedded by one linear layer each, interleaved as ``(R_1, s_1, a_1, R_2,
    ...)``, layer-normalised and run through a causal GPT-2-style transformer (see the module
    docstring). The output at ``s_t`` depends on ``R_1..R_t``, ``s_1..s_t`` and ``a_1..a_{t-1}`` only.

    Args:
        state_dim: size of the observation's last dim.
        action_dim: size of the action's last dim.
        config: a :class:`DTConfig` or a dict of some of its fields (default:
            :meth:`default_config`).
        device: where to create the parameters.

    Inputs (``forward(observation, action, return_to_go)``):
        observation ``[*B, T, state_dim]``, action ``[*B, T, action_dim]``, return_to_go ``[*B, T]``
        (no trailing 1: a per-step scalar). ``3 T`` may not exceed ``config.n_positions``.

    Returns:
        The hidden states at the state tokens, ``[*B, T, n_embd]``.

    Raises:
        ValueError: for a bad config, or inputs whose shapes disagree (the message names the input,
            what was expected and what arrived), or a sequence longer than ``n_positions / 3``.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules.decision_transformer import DecisionTransformer
        >>> model = DecisionTransformer(4, 2, config={"n_embd": 32, "n_layer": 1, "n_head": 2, "n_inner": 64})
        >>> out = model(torch.randn(5, 10, 4), torch.randn(5, 10, 2), torch.randn(5, 10))
        >>> out.shape
        torch.Size([5, 10, 32])
    """

    DTConfig = DTConfig

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: DTConfig | Mapping[str, Any] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        owner = type(self).__name__
        check_positive_int(owner, "state_dim", state_dim)
        check_positive_int(owner, "action_dim", action_dim)
        config = _resolve_config(owner, config, self.default_config())
        super().__init__()
        self.state_dim, self.action_dim = state_dim, action_dim
        self.config = config
        self.hidden_size = config.n_embd
        with _device_scope(device):
            self.transformer = _GPT(config)
            self.embed_return = nn.Linear(1, config.n_embd)
            self.embed_state = nn.Linear(state_dim, config.n_embd)
            self.embed_action = nn.Linear(action_dim, config.n_embd)
            self.embed_ln = nn.LayerNorm(config.n_embd, eps=_LN_EPS)

    @classmethod
    def default_config(cls) -> DTConfig:
        """The default architecture (TorchRL's): 256 wide, 4 layers, 4 heads, MLP 1024, ReLU."""
        return DTConfig()

    @property
    def max_steps(self) -> int:
        """The longest sequence (in steps) the position embeddings cover: ``n_positions // 3``."""
        return self.config.n_positions // 3

    def _check_inputs(self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor) -> None:
        owner = type(self).__name__
        if observation.ndim < 2 or observation.shape[-1] != self.state_dim:
            raise ValueError(
                f"{owner}: observation must be [*B, T, {self.state_dim}], got shape {tuple(observation.shape)}."
            )
        steps = observation.shape[:-1]
        if action.shape != steps + (self.action_dim,):
            raise ValueError(
                f"{owner}: action must be [*B, T, {self.action_dim}] = {tuple(steps + (self.action_dim,))} "
                f"(observation has shape {tuple(observation.shape)}), got shape {tuple(action.shape)}."
            )
        if return_to_go.shape != steps:
            hint = (
                " (drop the trailing singleton dim: the return-to-go is a per-step scalar)"
                if return_to_go.shape == steps + (1,)
                else ""
            )
            raise ValueError(
                f"{owner}: return_to_go must be [*B, T] = {tuple(steps)} (observation has shape "
                f"{tuple(observation.shape)}), got shape {tuple(return_to_go.shape)}{hint}."
            )
        length = steps[-1]
        if length < 1:
            raise ValueError(f"{owner}: the sequences are empty (T = 0); give at least one step.")
        if 3 * length > self.config.n_positions:
            raise ValueError(
                f"{owner}: a sequence of T = {length} steps makes {3 * length} tokens, more than "
                f"config.n_positions = {self.config.n_positions} (at most {self.max_steps} steps)."
            )

    def forward(self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor) -> torch.Tensor:
        self._check_inputs(observation, action, return_to_go)
        batch, length = observation.shape[:-2], observation.shape[-2]
        n = batch.numel()
        returns = self.embed_return(return_to_go.reshape(n, length, 1))
        states = self.embed_state(observation.reshape(n, length, self.state_dim))
        actions = self.embed_action(action.reshape(n, length, self.action_dim))
        # [N, T, 3, E] -> [N, 3T, E] reads R_1, s_1, a_1, R_2, ...: a causal order where s_t
        # precedes a_t, so the state token predicts the action without seeing it
        tokens = torch.stack((returns, states, actions), dim=2).reshape(n, 3 * length, self.hidden_size)
        hidden = self.transformer(self.embed_ln(tokens))
        state_tokens = hidden.reshape(n, length, 3, self.hidden_size)[:, :, 1]
        return state_tokens.reshape(*batch, length, self.hidden_size)


def _orthogonal_head(layer: nn.Linear) -> None:
    """TorchRL's head initialisation: orthogonal weight, zero bias."""
    nn.init.orthogonal_(layer.weight)
    nn.init.zeros_(layer.bias)


def _actor_config() -> DTConfig:
    return DTConfig(
        n_embd=512,
        n_layer=4,
        n_head=4,
        n_inner=2048,
        activation="relu",
        n_positions=1024,
        resid_pdrop=0.1,
        attn_pdrop=0.1,
    )


class DTActor(nn.Module):
    """Deterministic Decision Transformer actor: a linear head on the state tokens.

    As TorchRL's ``DTActor`` it returns the head's raw output ``[*B, T, action_dim]``; the usual
    policy squashes it into the action bounds with a ``TanhDelta`` distribution in a
    :class:`~rl_objectives.modules.ProbabilisticActor` (see the example). ``action_tanh=True``
    applies ``tanh`` in the module instead (the original paper's actor, Hugging Face's
    ``action_tanh``), for a policy without a distribution; do not combine it with ``TanhDelta``.

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: a :class:`DTConfig` or dict (default: :meth:`default_config`).
        device: where to create the parameters.

    Keyword Args:
        action_tanh: squash the output with ``tanh`` (default ``False``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import ProbabilisticActor, TanhDelta
        >>> from rl_objectives.modules.decision_transformer import DTActor
        >>> net = DTActor(4, 2, transformer_config={"n_embd": 32, "n_layer": 1, "n_head": 2, "n_inner": 64})
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["param"]),
        ...     in_keys=["param"], out_keys=["action"], distribution_class=TanhDelta)
        >>> td = TensorDict(observation=torch.randn(3, 10, 4), action=torch.zeros(3, 10, 2),
        ...                 return_to_go=torch.ones(3, 10), batch_size=[3, 10])
        >>> out = actor(td)
        >>> out["action"].shape, bool(out["action"].abs().max() < 1)
        (torch.Size([3, 10, 2]), True)
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | Mapping[str, Any] | None = None,
        device: torch.device | str | None = None,
        *,
        action_tanh: bool = False,
    ) -> None:
        config = _resolve_config(type(self).__name__, transformer_config, self.default_config())
        super().__init__()
        self.transformer = DecisionTransformer(state_dim, action_dim, config=config, device=device)
        with _device_scope(device):
            self.action_layer = nn.Linear(config.n_embd, action_dim)
        _orthogonal_head(self.action_layer)
        self.action_tanh = bool(action_tanh)

    @classmethod
    def default_config(cls) -> DTConfig:
        """TorchRL's actor default: 512 wide, 4 layers, 4 heads, MLP 2048, ReLU, 1024 positions."""
        return _actor_config()

    def forward(self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor) -> torch.Tensor:
        out = self.action_layer(self.transformer(observation, action, return_to_go))
        return torch.tanh(out) if self.action_tanh else out


class OnlineDTActor(nn.Module):
    """Stochastic Decision Transformer actor (Online DT, Zheng et al., 2022): ``(loc, scale)`` heads.

    Returns ``loc`` and ``scale``, both ``[*B, T, action_dim]``, for a
    :class:`~rl_objectives.modules.TanhNormal`. The log-std head goes through ``tanh`` and is mapped
    affinely onto ``[log_std_min, log_std_max] = [-5, 2]`` (as TorchRL), so the scale stays in
    ``[e^-5, e^2]``.

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: a :class:`DTConfig` or dict (default: :meth:`default_config`).
        device: where to create the parameters.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import ProbabilisticActor, TanhNormal
        >>> from rl_objectives.modules.decision_transformer import OnlineDTActor
        >>> net = OnlineDTActor(4, 2, transformer_config={"n_embd": 32, "n_layer": 1, "n_head": 2, "n_inner": 64})
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["loc", "scale"]),
        ...     in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal)
        >>> td = TensorDict(observation=torch.randn(3, 10, 4), action=torch.zeros(3, 10, 2),
        ...                 return_to_go=torch.ones(3, 10), batch_size=[3, 10])
        >>> actor.get_dist(td).log_prob(torch.zeros(3, 10, 2)).shape
        torch.Size([3, 10])
    """

    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | Mapping[str, Any] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        config = _resolve_config(type(self).__name__, transformer_config, self.default_config())
        super().__init__()
        self.transformer = DecisionTransformer(state_dim, action_dim, config=config, device=device)
        with _device_scope(device):
            self.action_layer_mean = nn.Linear(config.n_embd, action_dim)
            self.action_layer_logstd = nn.Linear(config.n_embd, action_dim)
        _orthogonal_head(self.action_layer_mean)
        _orthogonal_head(self.action_layer_logstd)

    @classmethod
    def default_config(cls) -> DTConfig:
        """TorchRL's actor default: 512 wide, 4 layers, 4 heads, MLP 2048, ReLU, 1024 positions."""
        return _actor_config()

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.transformer(observation, action, return_to_go)
        loc = self.action_layer_mean(hidden)
        unit = torch.tanh(self.action_layer_logstd(hidden))  # in [-1, 1]
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (unit + 1.0)
        return loc, log_std.exp()


class DecisionTransformerInferenceWrapper(TensorDictModuleWrapper):
    """Runs a Decision Transformer policy on a history and returns the action for its last step.

    The input holds the last ``T`` steps of history: observation ``[*B, T, obs_dim]``, action
    ``[*B, T, act_dim]`` and return_to_go ``[*B, T]``, where the action entry at position ``i`` is
    the action taken *before* observation ``i`` (what an env writes with the step it leads to).
    The wrapper keeps only the last ``inference_context`` steps (earlier ones are zeroed), shifts
    the actions one step left so that ``a_i`` sits with ``s_i`` and the unknown current action is a
    zero, runs the policy and returns a shallow copy of the input where the action is the last
    step's prediction ``[*B, act_dim]`` and the return-to-go its last entry ``[*B]``; the
    observation keeps the full (unmasked) history. When the time dim is a batch dim of the input it
    is dropped from the output's batch size. The input is not modified.

    Args:
        policy: the DT policy (reads the observation, action and return-to-go keys, writes the
            action key, e.g. a ``ProbabilisticActor`` around a :class:`DTActor`).

    Keyword Args:
        inference_context: how many of the last steps the policy sees (default 5).
        spec: the action spec (default: the policy's ``spec`` if it has one).
        device: moves ``spec`` there.

    Raises:
        ValueError: for a non-positive ``inference_context`` and, at call time, inputs whose
            shapes disagree.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import ProbabilisticActor, TanhDelta
        >>> from rl_objectives.modules.decision_transformer import DTActor, DecisionTransformerInferenceWrapper
        >>> net = DTActor(4, 2, transformer_config={"n_embd": 32, "n_layer": 1, "n_head": 2, "n_inner": 64})
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["param"]),
        ...     in_keys=["param"], out_keys=["action"], distribution_class=TanhDelta)
        >>> policy = DecisionTransformerInferenceWrapper(actor, inference_context=3)
        >>> td = TensorDict(observation=torch.randn(1, 20, 4), action=torch.randn(1, 20, 2),
        ...                 return_to_go=torch.randn(1, 20), batch_size=[1])
        >>> out = policy(td)
        >>> out["action"].shape, out["return_to_go"].shape, out["observation"].shape
        (torch.Size([1, 2]), torch.Size([1]), torch.Size([1, 20, 4]))
    """

    def __init__(
        self, policy: TensorDictModuleBase, *, inference_context: int = 5, spec: Any = None, device: Any = None
    ) -> None:
        check_positive_int(type(self).__name__, "inference_context", inference_context)
        super().__init__(policy)
        self.observation_key: Any = "observation"
        self.action_key: Any = "action"
        self.out_action_key: Any = "action"
        self.return_to_go_key: Any = "return_to_go"
        self.inference_context = inference_context
        if spec is None:
            spec = getattr(policy, "spec", None)
        if spec is not None and device is not None:
            spec = spec.to(device)
        self._spec = spec

    @property
    def spec(self) -> Any:
        """The action spec (given, or the policy's), or ``None``."""
        return self._spec

    @property
    def in_keys(self) -> list:
        return [self.observation_key, self.action_key, self.return_to_go_key]

    @property
    def out_keys(self) -> list:
        return sorted(
            set(self.td_module.out_keys) | {self.observation_key, self.action_key, self.return_to_go_key}, key=str
        )

    def set_tensor_keys(self, **kwargs: Any) -> DecisionTransformerInferenceWrapper:
        """Rename the keys: ``observation``, ``action`` (the history read), ``return_to_go`` and
        ``out_action`` (the policy's output action key, one of its ``out_keys``).

        Raises:
            TypeError: for an unknown name. ValueError: when ``out_action`` is not a policy output.
        """
        names = {
            "observation": "observation_key",
            "action": "action_key",
            "return_to_go": "return_to_go_key",
            "out_action": "out_action_key",
        }
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.set_tensor_keys: unknown name(s) {unknown}; accepted: {sorted(names)}."
            )
        new = {names[k]: unravel_key(v) for k, v in kwargs.items()}
        out_action = new.get("out_action_key", self.out_action_key)
        if out_action not in [unravel_key(k) for k in self.td_module.out_keys]:
            raise ValueError(
                f"{type(self).__name__}.set_tensor_keys: out_action {out_action!r} is not an output of the policy ({self.td_module.out_keys})."
            )
        for attr, key in new.items():
            setattr(self, attr, key)
        return self

    def step(self, frames: int = 1) -> None:
        """No-op (exploration-module interface)."""

    def mask_context(self, tensordict: Any) -> Any:
        """Write the masked, action-shifted history into ``tensordict`` (see the class docstring)."""
        owner = type(self).__name__
        obs = tensordict.get(self.observation_key)
        action = tensordict.get(self.action_key)
        rtg = tensordict.get(self.return_to_go_key)
        steps = obs.shape[:-1]
        if obs.ndim < 2 or action.shape[:-1] != steps or rtg.shape != steps:
            raise ValueError(
                f"{owner}: expected observation [*B, T, obs_dim], action [*B, T, act_dim] and return_to_go [*B, T]; "
                f"got {tuple(obs.shape)}, {tuple(action.shape)} and {tuple(rtg.shape)}."
            )
        length = steps[-1]
        position = torch.arange(length, device=obs.device)
        keep = position >= length - self.inference_context
        # a_i (stored with s_{i+1}) moves next to s_i; the current action is unknown: zero
        shifted = torch.cat([action[..., 1:, :], torch.zeros_like(action[..., :1, :])], dim=-2)
        keep_action = keep & (position < length - 1)
        tensordict.set(
            self.observation_key,
            torch.where(keep.unsqueeze(-1), obs, torch.zeros((), dtype=obs.dtype, device=obs.device)),
        )
        tensordict.set(
            self.action_key,
            torch.where(keep_action.unsqueeze(-1), shifted, torch.zeros((), dtype=action.dtype, device=action.device)),
        )
        tensordict.set(
            self.return_to_go_key, torch.where(keep, rtg, torch.zeros((), dtype=rtg.dtype, device=rtg.device))
        )
        return tensordict

    def forward(self, tensordict: Any) -> Any:
        work = tensordict.copy()
        obs = work.get(self.observation_key)
        rtg = work.get(self.return_to_go_key)
        work = self.td_module(self.mask_context(work))
        action = work.get(self.out_action_key)
        if work.ndim == action.ndim - 1:  # time is a batch dim of the input: drop it
            work.batch_size = work.batch_size[:-1]
        work.set(self.out_action_key, action[..., -1, :])
        work.set(self.return_to_go_key, rtg[..., -1])
        work.set(self.observation_key, obs)
        return work
