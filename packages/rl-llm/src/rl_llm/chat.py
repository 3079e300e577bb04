"""Chat templates: conversations (lists of ``{"role", "content"}`` messages) rendered to text, and
split into the turns a model is trained on.

``chat_template`` everywhere takes: ``None`` (the tokenizer's own template when it has one, else
ChatML), ``"chatml"`` (the built-in ChatML layout, ``<|im_start|>role\\ncontent<|im_end|>\\n``), or
a Jinja template string (rendered by the tokenizer's ``apply_chat_template``).

:func:`render_segments` cuts a rendered conversation into consecutive pieces, each marked as an
assistant reply or not, by rendering growing prefixes of the conversation: the text an assistant
turn adds after the generation prompt is that turn's reply (its end-of-turn marker included, so a
model learns to stop). Tokenizing the pieces one by one gives the ids and the assistant-only loss
mask of multi-turn SFT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CHATML", "render_chat", "render_segments"]

CHATML = "chatml"


def _chatml(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n" if add_generation_prompt else text


def _check_messages(messages: Any) -> None:
    if isinstance(messages, str) or not isinstance(messages, Sequence):
        raise TypeError(f"chat: expected a list of messages, got {type(messages).__name__}.")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise ValueError(f"chat: message {i} must be a dict with 'role' and 'content', got {message!r:.80}.")
        if not isinstance(message["content"], str):
            raise ValueError(
                f"chat: message {i} has non-text content ({type(message['content']).__name__}); only text is supported."
            )


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tokenizer: Any = None,
    *,
    chat_template: str | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """``messages`` as one string in the chosen template (see the module docstring).

    Examples:
        >>> from rl_llm.chat import render_chat
        >>> render_chat([{"role": "user", "content": "hi"}], chat_template="chatml", add_generation_prompt=True)
        '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    _check_messages(messages)
    own = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if chat_template == CHATML or (chat_template is None and not own):
        return _chatml(messages, add_generation_prompt)
    if tokenizer is None:
        raise ValueError(
            "render_chat: a Jinja chat_template is rendered by a tokenizer; pass one (or chat_template='chatml')."
        )
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, chat_template=chat_template
    )


def render_segments(
    messages: Sequence[Mapping[str, Any]], tokenizer: Any = None, *, chat_template: str | None = None
) -> list[tuple[str, bool]]:
    """The rendered conversation as consecutive ``(text, is_assistant_reply)`` pieces; their
    concatenation is ``render_chat(messages)``.

    Raises:
        ValueError: when rendering a longer prefix of the conversation changes the text of a shorter
        one (a template that rewrites earlier turns cannot be split into turns).

    Examples:
        >>> from rl_llm.chat import render_segments
        >>> chat = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
        >>> render_segments(chat, chat_template="chatml")
        [('<|im_start|>user\\n2+2?<|im_end|>\\n<|im_start|>assistant\\n', False), ('4<|im_end|>\\n', True)]
    """
    _check_messages(messages)
    pieces: list[tuple[str, bool]] = []
    done = ""
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            header = (
                render_chat(messages[:i], tokenizer, chat_template=chat_template, add_generation_prompt=True)
                if i
                else render_chat([], tokenizer, chat_template=chat_template, add_generation_prompt=True)
            )
            _extend(pieces, done, header, False, i)
            done = header
        full = render_chat(messages[: i + 1], tokenizer, chat_template=chat_template)
        _extend(pieces, done, full, message["role"] == "assistant", i)
        done = full
    merged: list[tuple[str, bool]] = []
    for text, flag in pieces:
        if not text:
            continue
        if merged and merged[-1][1] == flag:  # consecutive pieces of the same kind form one
            merged[-1] = (merged[-1][0] + text, flag)
        else:
            merged.append((text, flag))
    return merged


def _extend(pieces: list, done: str, text: str, flag: bool, index: int) -> None:
    if not text.startswith(done):
        raise ValueError(
            f"render_segments: the chat template rewrites earlier turns when message {index} is added, so the "
            "conversation cannot be split into turns; use chat_template='chatml' or a template that only appends."
        )
    pieces.append((text[len(done) :], flag))
