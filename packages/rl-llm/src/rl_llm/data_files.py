"""Training rows from wherever they live: a Hugging Face ``datasets`` object, a JSONL or Parquet file,
or a list of dicts; and which of TRL's dataset formats they are in.

Formats (TRL's names), decided from a row's columns:

=====================  =========================================  =====================
format                 columns                                    trainers
=====================  =========================================  =====================
``language_modeling``  ``text`` (or ``messages``)                 SFT
``prompt_completion``  ``prompt``, ``completion``                 SFT
``prompt_only``        ``prompt``                                 GRPO
``preference``         ``prompt``, ``chosen``, ``rejected``       DPO
=====================  =========================================  =====================

Each text column is either a string (*standard*) or a list of ``{"role", "content"}`` messages
(*conversational*); :func:`is_conversational` tells which. Other columns are kept: GRPO passes them
to the reward functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["dataset_format", "is_conversational", "load_rows"]


def load_rows(source: Any, *, split: str = "train") -> Sequence[Mapping[str, Any]]:
    """The rows of ``source`` as an indexable sequence of dicts.

    Args:
        source: a path to a ``.jsonl``/``.json`` file (one JSON object per line, or a JSON list) or a
            ``.parquet`` file (needs pyarrow, ``pip install rl-llm[data]``); a ``datasets.Dataset`` (any
            object with ``column_names``, ``__len__`` and ``__getitem__``); a ``datasets.DatasetDict``
            (its ``split``); or a list of dicts.
        split: the split to take from a ``DatasetDict``.

    Raises:
        FileNotFoundError, ValueError: a missing file, an unknown suffix, a line that is not a JSON
        object (naming the file and line), or an empty source.

    Examples:
        >>> from rl_llm.data_files import load_rows
        >>> rows = load_rows([{"prompt": "2+2=", "completion": "4"}])
        >>> rows[0]["completion"], len(rows)
        ('4', 1)
    """
    if isinstance(source, (str, Path)):
        rows = _read_file(Path(source))
    elif isinstance(source, Mapping):  # a DatasetDict: split name -> Dataset
        if not source or not all(hasattr(v, "column_names") for v in source.values()):
            raise TypeError(
                "load_rows: got a mapping that is not a DatasetDict; pass a list of row dicts, a file path or a datasets object."
            )
        if split not in source:
            raise KeyError(f"load_rows: the DatasetDict has no split {split!r}; splits: {sorted(source.keys())}.")
        rows = source[split]
    elif hasattr(source, "column_names") and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        rows = source
    elif isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        bad = next((i for i, r in enumerate(source) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise TypeError(f"load_rows: row {bad} is a {type(source[bad]).__name__}, expected a dict of columns.")
        rows = source
    else:
        raise TypeError(
            f"load_rows: cannot read rows from a {type(source).__name__}; pass a file path, a datasets object or a list of dicts."
        )
    if len(rows) == 0:
        raise ValueError("load_rows: the dataset is empty.")
    return rows


def _read_file(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"load_rows: no file {path}.")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError("load_rows: reading Parquet needs pyarrow (pip install 'rl-llm[data]').") from None
        return pq.read_table(path).to_pylist()
    if suffix not in (".jsonl", ".json"):
        raise ValueError(f"load_rows: {path} has suffix {suffix!r}; expected .jsonl, .json or .parquet.")
    text = path.read_text(encoding="utf-8")
    if suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ValueError(f"load_rows: {path} must hold a list of objects.")
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"load_rows: {path}, line {number}: not valid JSON ({err.msg}).") from None
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ValueError(f"load_rows: {path}: row {bad} is a {type(rows[bad]).__name__}, expected a JSON object.")
    return rows


def is_conversational(value: Any) -> bool:
    """Whether a column value is a list of ``{"role": ..., "content": ...}`` messages."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) > 0
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)
    )


def dataset_format(row: Mapping[str, Any]) -> str:
    """The TRL format of ``row`` (see the module docstring); ``ValueError`` lists its columns when
    none applies.

    Examples:
        >>> from rl_llm.data_files import dataset_format
        >>> dataset_format({"prompt": "a", "chosen": "b", "rejected": "c"}), dataset_format({"text": "x"})
        ('preference', 'language_modeling')
    """
    keys = set(row)
    if {"prompt", "chosen", "rejected"} <= keys or {"chosen", "rejected"} <= keys:
        return "preference"
    if {"prompt", "completion"} <= keys:
        return "prompt_completion"
    if "text" in keys or "messages" in keys:
        return "language_modeling"
    if "prompt" in keys:
        return "prompt_only"
    raise ValueError(
        f"dataset row has columns {sorted(keys)}; expected 'text' or 'messages' (language modeling), 'prompt' and "
        "'completion', 'prompt' alone, or 'prompt', 'chosen' and 'rejected'."
    )
