"""Checkpoints of an rl-llm trainer: safetensors for every tensor, JSON for the rest; nothing pickled.

A checkpoint is a folder ``<output_dir>/checkpoint-<step>/`` holding

- ``model.safetensors``: the trained weights (the adapter's only, for a PEFT model);
- ``optimizer.safetensors`` and ``optimizer.json``: the optimizer's per-parameter state tensors and
  its hyper-parameters / scalar state;
- ``rng.safetensors``: the torch generator states (CPU, CUDA devices, the trainer's data order);
- ``trainer_state.json``: step, data position, scheduler state, the config.

It is written into a temporary sibling folder, flushed to disk, then swapped into place by
:func:`tdict.folders.atomic_dir`: a kill at any moment leaves the previous checkpoint or the complete
new one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tdict.folders import atomic_dir

__all__ = ["latest_checkpoint", "read_checkpoint", "write_checkpoint"]

PREFIX = "checkpoint-"
MARKER = "trainer_state.json"  # written last: a folder holding it is a complete checkpoint


def _write_json(path: Path, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    # safetensors refuses tensors sharing memory and non-contiguous views: store plain copies
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(path))


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, rest)``: the optimizer's state split into a flat tensor dict and JSON values."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`optimizer_tensors`: a ``state_dict`` for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *rest["scalars"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": rest["param_groups"]}


def write_checkpoint(
    folder: str | Path,
    *,
    model_tensors: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    rng: dict[str, torch.Tensor],
    state: dict[str, Any],
) -> Path:
    """Write a complete checkpoint at ``folder`` (replacing one already there), atomically."""
    folder = Path(folder)

    def write(tmp: str) -> None:
        _write_tensors(Path(tmp, "model.safetensors"), model_tensors)
        opt_tensors, opt_rest = optimizer_tensors(optimizer)
        _write_tensors(Path(tmp, "optimizer.safetensors"), opt_tensors)
        _write_json(Path(tmp, "optimizer.json"), opt_rest)
        _write_tensors(Path(tmp, "rng.safetensors"), rng)
        _write_json(Path(tmp, MARKER), state)  # last: it marks the checkpoint complete

    atomic_dir(folder, write, marker=MARKER)
    return folder


def read_checkpoint(folder: str | Path) -> dict[str, Any]:
    """The parts of a checkpoint: ``model`` and ``rng`` tensor dicts, ``optimizer`` (a state dict)
    and ``state`` (the trainer's JSON). ``FileNotFoundError`` names a missing file."""
    folder = Path(folder)
    names = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "trainer_state.json")
    missing = [n for n in names if not (folder / n).exists()]
    if missing:
        raise FileNotFoundError(f"read_checkpoint: {folder} is not a complete checkpoint; missing {missing}.")
    with open(folder / "optimizer.json", encoding="utf-8") as f:
        opt_rest = json.load(f)
    with open(folder / "trainer_state.json", encoding="utf-8") as f:
        state = json.load(f)
    return {
        "model": load_file(str(folder / "model.safetensors")),
        "optimizer": optimizer_state(load_file(str(folder / "optimizer.safetensors")), opt_rest),
        "rng": load_file(str(folder / "rng.safetensors")),
        "state": state,
    }


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under ``output_dir`` (``None`` if there is none)."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    steps = []
    for child in root.iterdir():
        suffix = child.name[len(PREFIX) :]
        if (
            child.is_dir()
            and child.name.startswith(PREFIX)
            and suffix.isdigit()
            and (child / "trainer_state.json").exists()
        ):
            steps.append((int(suffix), child))
    return max(steps)[1] if steps else None
