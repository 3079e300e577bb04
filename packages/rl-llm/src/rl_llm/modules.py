"""TransformersWrapper: a Hugging Face causal LM as a TensorDict policy (sample responses, score them).

Two modes, as TorchRL's ``torchrl.modules.llm.TransformersWrapper``:

- ``generate=True`` (collection): read prompts, sample responses with ``model.generate``, write the
  response tokens, their mask and the per-token log-probs of the sampled tokens. Those log-probs are
  recomputed in one extra forward pass over prompt + response (exact; ``generate``'s scores are the
  *warped* logits and are not used), under ``torch.no_grad``: they are the behaviour log-probs a
  loss's importance ratio divides by.
- ``generate=False`` (training): read prompts and given responses, write the per-token log-probs of
  the responses, with gradients. This is what the losses call.

Padding: prompts are LEFT-padded (``("masks", "prompt_attention_mask")`` marks real tokens), responses
RIGHT-padded; see :mod:`rl_llm.data` for the full key layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tdict import LazyStackedTensorDict, TensorDict, unravel_key
from tdict.nn import TensorDictModuleBase
from torch import nn

from . import data as _data
from .losses._logprobs import response_log_probs

__all__ = ["TransformersWrapper"]

_DEFAULT_KEYS = {
    "prompt_tokens": _data.PROMPT_TOKENS,
    "prompt_mask": _data.PROMPT_MASK,
    "prompt_text": _data.PROMPT_TEXT,
    "response_tokens": _data.RESPONSE_TOKENS,
    "response_mask": _data.RESPONSE_MASK,
    "response_text": _data.RESPONSE_TEXT,
    "log_probs": _data.RESPONSE_LOG_PROBS,
    "entropy": ("entropy", "response"),
}

# sample from the model's own distribution: then the recomputed log-probs are those of the
# sampling policy (top_k=50, the library default, would sample from a truncated distribution)
_SAMPLING_DEFAULTS = {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0, "max_new_tokens": 32}


class TransformersWrapper(TensorDictModuleBase):
    """A causal LM as a TensorDict module that samples responses or scores given ones.

    Args:
        model: a Hugging Face ``*ForCausalLM`` (anything with ``generate`` and returning ``.logits``).

    Keyword Args:
        tokenizer: its tokenizer; needed for ``input_mode="text"``, for writing the response text,
            and to know the pad/EOS ids (else ``model.generation_config`` / ``model.config``).
        generate: sample responses (True) or score the responses present in the input (False).
        return_log_probs: write ``("log_probs", "response")``. Must be True when ``generate=False``.
        generate_kwargs: passed to ``model.generate``. Defaults: ``do_sample=True, top_k=0, top_p=1.0,
            temperature=1.0, max_new_tokens=32`` (sampling from the model's full distribution). The
            recorded log-probs are those of the tempered distribution (logits divided by
            ``temperature``), the same in both modes; ``top_k``/``top_p`` truncation is not
            renormalised in them.
        pad_output: True: write dense padded tensors into the input TensorDict. False: return a
            lazy stack of rows holding only their real tokens (prompt and response unpadded). A lazy
            stack of such rows is also accepted as input and padded first.
        input_mode: ``"tokens"`` (read ``("tokens", "prompt")`` and its mask) or ``"text"`` (read
            ``("text", "prompt")`` (and, when scoring, ``("text", "response")``), tokenize them and
            write the tokens too).
        return_entropy: also write ``("entropy", "response")`` (the next-token entropy at each
            response position; with gradients when ``generate=False``).
        keys: rename keys, e.g. ``keys={"log_probs": ("ref_log_probs", "response")}`` for a
            reference model. Names: ``prompt_tokens, prompt_mask, prompt_text, response_tokens,
            response_mask, response_text, log_probs, entropy``.

    The response mask is true up to and including the first EOS token (the EOS is an action and gets
    a log-prob); tokens after it are set to the pad id. Log-probs and entropies are 0 where the mask
    is false. Batch dims beyond one are flattened for the model and restored.

    The wrapper never changes the model's train/eval mode. Dropout makes log-probs random, so the
    ratio of a loss's log-probs to the sampled ones is 1 only with dropout off: RL fine-tuning
    usually runs the model in ``eval()`` mode (or with dropout probabilities set to 0) throughout.

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from tdict import TensorDict
        >>> from rl_llm import TransformersWrapper
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11, bos_token_id=1,
        ...                                    eos_token_id=1, pad_token_id=0)).eval()
        >>> policy = TransformersWrapper(model, generate_kwargs={"max_new_tokens": 4})
        >>> prompts = TensorDict({("tokens", "prompt"): torch.tensor([[0, 5, 6], [7, 8, 9]]),
        ...                       ("masks", "prompt_attention_mask"): torch.tensor([[0, 1, 1], [1, 1, 1]])},
        ...                      batch_size=[2])
        >>> out = policy(prompts)
        >>> out["tokens", "response"].shape[0], out["log_probs", "response"].shape == out["tokens", "response"].shape
        (2, True)
        >>> scorer = TransformersWrapper(model, generate=False)
        >>> lp = scorer(out.copy())["log_probs", "response"]
        >>> torch.allclose(lp, out["log_probs", "response"], atol=1e-5)
        True
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        tokenizer: Any = None,
        generate: bool = True,
        return_log_probs: bool = True,
        generate_kwargs: Mapping[str, Any] | None = None,
        pad_output: bool = True,
        input_mode: str = "tokens",
        return_entropy: bool = False,
        keys: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"TransformersWrapper: model must be an nn.Module (a causal LM), got {type(model).__name__}."
            )
        if input_mode not in ("tokens", "text"):
            raise ValueError(f"TransformersWrapper: input_mode must be 'tokens' or 'text', got {input_mode!r}.")
        if input_mode == "text" and tokenizer is None:
            raise ValueError("TransformersWrapper: input_mode='text' needs a tokenizer.")
        if not generate and not return_log_probs and not return_entropy:
            raise ValueError(
                "TransformersWrapper: generate=False scores responses; it needs return_log_probs or return_entropy."
            )
        if generate and not hasattr(model, "generate"):
            raise TypeError(f"TransformersWrapper: generate=True but {type(model).__name__} has no generate().")
        unknown = sorted(set(keys or {}) - set(_DEFAULT_KEYS))
        if unknown:
            raise ValueError(f"TransformersWrapper: unknown key name(s) {unknown}; accepted: {sorted(_DEFAULT_KEYS)}.")
        self.model = model
        self.tokenizer = tokenizer
        self.generate = bool(generate)
        self.return_log_probs = bool(return_log_probs)
        self.return_entropy = bool(return_entropy)
        self.pad_output = bool(pad_output)
        self.input_mode = input_mode
        user_kwargs = dict(generate_kwargs or {})
        defaults = dict(_SAMPLING_DEFAULTS)
        if not user_kwargs.get("do_sample", True):  # greedy/beam: sampling knobs would only warn
            for name in ("top_k", "top_p", "temperature"):
                defaults.pop(name)
        self.generate_kwargs = {**defaults, **user_kwargs}
        self.keys = {name: unravel_key(key) for name, key in {**_DEFAULT_KEYS, **dict(keys or {})}.items()}
        self.pad_token_id, self.eos_token_id = self._special_ids()
        k = self.keys
        prompt_in = [k["prompt_text"]] if input_mode == "text" else [k["prompt_tokens"], k["prompt_mask"]]
        if generate:
            self.in_keys = prompt_in
            outs = [k["response_tokens"], k["response_mask"]]
        else:
            response_in = [k["response_text"]] if input_mode == "text" else [k["response_tokens"], k["response_mask"]]
            self.in_keys = prompt_in + response_in
            outs = []
        if input_mode == "text":
            outs = [k["prompt_tokens"], k["prompt_mask"]] + outs
            if not generate:
                outs += [k["response_tokens"], k["response_mask"]]
        if generate and tokenizer is not None:
            outs.append(k["response_text"])
        if return_log_probs:
            outs.append(k["log_probs"])
        if return_entropy:
            outs.append(k["entropy"])
        self.out_keys = outs

    def _special_ids(self) -> tuple[int, int | None]:
        sources = [self.tokenizer, getattr(self.model, "generation_config", None), getattr(self.model, "config", None)]
        pad = eos = None
        for src in sources:
            if src is None:
                continue
            if pad is None:
                pad = getattr(src, "pad_token_id", None)
            if eos is None:
                eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        if pad is None:
            pad = eos
        if pad is None and self.generate:
            raise ValueError(
                "TransformersWrapper: no pad_token_id (nor eos_token_id) on the tokenizer or model config."
            )
        return int(pad if pad is not None else 0), (int(eos) if eos is not None else None)

    # ------------------------------------------------------------------ inputs
    def _read_prompt(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.keys
        if self.input_mode == "text":
            enc = _data.tokenize_prompts(_texts(td, k["prompt_text"]), self.tokenizer)
            tokens, mask = enc.get(_data.PROMPT_TOKENS), enc.get(_data.PROMPT_MASK)
            td.set(k["prompt_tokens"], tokens.reshape(*td.batch_size, -1))
            td.set(k["prompt_mask"], mask.reshape(*td.batch_size, -1))
            return tokens, mask
        tokens = _require(td, k["prompt_tokens"])
        mask = td.get(k["prompt_mask"], None)
        if mask is None:
            raise KeyError(
                f"TransformersWrapper: the input lacks the prompt mask {k['prompt_mask']!r} (true on real tokens of the "
                f"left-padded prompt); keys present: {sorted(map(str, td.keys(True, True)))}."
            )
        return _flat(tokens, td, k["prompt_tokens"]), _flat(mask, td, k["prompt_mask"]).bool()

    def _read_response(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.keys
        if self.input_mode == "text":
            ids = _data._encode(self.tokenizer, _texts(td, k["response_text"]))
            tokens, mask = _data.right_pad(ids, self.pad_token_id)
            td.set(k["response_tokens"], tokens.reshape(*td.batch_size, -1))
            td.set(k["response_mask"], mask.reshape(*td.batch_size, -1))
            return tokens, mask
        tokens = _flat(_require(td, k["response_tokens"]), td, k["response_tokens"])
        mask = _flat(_require(td, k["response_mask"]), td, k["response_mask"]).bool()
        if mask.shape != tokens.shape:
            raise ValueError(
                f"TransformersWrapper: response mask shape {tuple(mask.shape)} != response tokens shape {tuple(tokens.shape)}."
            )
        return tokens, mask

    # ------------------------------------------------------------------ forward
    def forward(self, tensordict: Any) -> Any:
        if isinstance(tensordict, LazyStackedTensorDict):
            tensordict = _data.pad_rows(tensordict.unbind(0), self.pad_token_id)
        if not isinstance(tensordict, TensorDict):
            raise TypeError(f"TransformersWrapper: expected a TensorDict, got {type(tensordict).__name__}.")
        if self.input_mode == "text" and tensordict.batch_dims != 1:
            raise ValueError(
                f"TransformersWrapper: input_mode='text' needs a batch of one dim, got {tuple(tensordict.batch_size)}."
            )
        prompt, prompt_mask = self._read_prompt(tensordict)
        if prompt.shape[1] == 0 or not bool(prompt_mask[:, -1].all()):
            raise ValueError(
                f"TransformersWrapper: {self.keys['prompt_tokens']!r} must be LEFT-padded with at least one real token per row "
                "(the prompt mask's last column must be all true)."
            )
        if self.generate:
            response, response_mask = self._sample(prompt, prompt_mask)
            grad = torch.no_grad()
        else:
            response, response_mask = self._read_response(tensordict)
            grad = torch.enable_grad() if torch.is_grad_enabled() else torch.no_grad()
        log_probs = entropy = None
        if self.return_log_probs or self.return_entropy:
            with grad:
                log_probs, entropy = response_log_probs(
                    self.model,
                    prompt,
                    prompt_mask,
                    response,
                    response_mask,
                    return_entropy=self.return_entropy,
                    temperature=self._temperature(),
                )
        batch = tensordict.batch_size
        k = self.keys
        if self.generate:
            tensordict.set(k["response_tokens"], response.reshape(*batch, -1))
            tensordict.set(k["response_mask"], response_mask.reshape(*batch, -1))
            if self.tokenizer is not None:
                texts = self.tokenizer.batch_decode(
                    [row[m].tolist() for row, m in zip(response, response_mask)], skip_special_tokens=True
                )
                _data.set_texts(
                    tensordict, k["response_text"], texts if tensordict.batch_dims == 1 else _nest(texts, batch)
                )
        if self.return_log_probs:
            assert log_probs is not None  # computed above
            tensordict.set(k["log_probs"], log_probs.reshape(*batch, -1))
        if self.return_entropy:
            assert entropy is not None  # response_log_probs returns it with return_entropy=True
            tensordict.set(k["entropy"], entropy.reshape(*batch, -1))
        if not self.pad_output:
            if tensordict.batch_dims != 1:
                raise ValueError(f"TransformersWrapper: pad_output=False needs a batch of one dim, got {tuple(batch)}.")
            return _data.unpad_rows(tensordict)
        return tensordict

    def _temperature(self) -> float:
        """The sampling temperature (1 without sampling): recorded log-probs are those of the
        tempered distribution the responses were drawn from."""
        kwargs = self.generate_kwargs
        return float(kwargs.get("temperature", 1.0)) if kwargs.get("do_sample", True) else 1.0

    @torch.no_grad()
    def _sample(self, prompt: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kwargs = dict(self.generate_kwargs)
        kwargs.setdefault("pad_token_id", self.pad_token_id)
        if self.eos_token_id is not None:
            kwargs.setdefault("eos_token_id", self.eos_token_id)
        # transformers' GenerationMixin.generate (checked in __init__); nn.Module's typing does not know it
        out = self.model.generate(input_ids=prompt, attention_mask=prompt_mask.long(), **kwargs)  # pyright: ignore[reportCallIssue]
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        response = sequences[:, prompt.shape[1] :]
        eos = kwargs.get("eos_token_id")
        if eos is None:
            mask = torch.ones_like(response, dtype=torch.bool)
        else:
            eos_ids = torch.as_tensor(eos if isinstance(eos, (list, tuple)) else [eos], device=response.device)
            is_eos = torch.isin(response, eos_ids).long()
            # valid = no EOS strictly before this position (the first EOS itself is kept)
            mask = (is_eos.cumsum(-1) - is_eos) == 0
        response = torch.where(mask, response, torch.full_like(response, self.pad_token_id))
        return response, mask


def _require(td: TensorDict, key: Any) -> torch.Tensor:
    value = td.get(key, None)
    if value is None:
        raise KeyError(
            f"TransformersWrapper: the input lacks {key!r}; keys present: {sorted(map(str, td.keys(True, True)))}."
        )
    return value


def _flat(value: torch.Tensor, td: TensorDict, key: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.ndim != td.batch_dims + 1:
        raise ValueError(
            f"TransformersWrapper: {key!r} must be shaped [*batch, length] with batch {tuple(td.batch_size)}, "
            f"got {tuple(getattr(value, 'shape', ()))}."
        )
    return value.reshape(-1, value.shape[-1])


def _texts(td: TensorDict, key: Any) -> list[str]:
    items = _data.get_texts(td, key)
    if items is None:
        raise KeyError(f"TransformersWrapper: input_mode='text' reads {key!r}, which is missing.")
    if len(items) != td.batch_size[0] or not all(isinstance(t, str) for t in items):
        raise ValueError(f"TransformersWrapper: {key!r} must hold {td.batch_size[0]} strings, got {items!r:.80}.")
    return items


def _nest(items: list, shape: torch.Size) -> list:
    for size in reversed(shape[1:]):
        items = [items[i : i + size] for i in range(0, len(items), size)]
    return items
