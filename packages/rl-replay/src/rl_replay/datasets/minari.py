"""MinariExperienceReplay: a local Minari dataset (HDF5 format) as a read-only replay buffer.

Minari keeps a dataset in ``<minari_root>/<dataset_id>/data/``: ``metadata.json`` and
``main_data.hdf5`` holding one group ``episode_<i>`` per episode with ``observations`` (one row more
than the steps: the reset observation comes first; dict observations are sub-groups),
``actions``, ``rewards``, ``terminations``, ``truncations`` and ``infos``. Nothing is downloaded:
the files must be on disk (``minari download`` them elsewhere, or point ``minari_root`` at a copy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tdict
import torch
from tdict import TensorDict, TensorDictBase

from ..samplers.base import Sampler
from ..writers import Writer
from .offline import OfflineDataset, read_h5, require_h5py, transitions

__all__ = ["MinariExperienceReplay", "default_minari_root"]

_REQUIRED = ("observations", "actions", "rewards", "terminations", "truncations")


def default_minari_root() -> Path:
    """Minari's own datasets directory: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _leaves(tree: Any, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_leaves(value, f"{prefix}/{key}" if prefix else key))
        return out
    return {prefix: tree}


def _as_td(tree: Any, n: int) -> Any:
    """A tensor stays a tensor; a dict becomes a TensorDict of batch ``[n]``."""
    if isinstance(tree, dict):
        return TensorDict({k: _as_td(v, n) for k, v in tree.items()}, batch_size=[n])
    return tree


def _nest(flat: dict, n: int) -> TensorDict:
    root: dict = {}
    for name, value in flat.items():
        node = root
        *parents, last = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return _as_td(root, n)


class MinariExperienceReplay(OfflineDataset):
    """A local Minari dataset as a read-only :class:`TensorDictReplayBuffer` (TorchRL's name and layout).

    Each step is one item: ``observation`` (a TensorDict for dict observations), ``action``,
    ``("next", "observation")``, ``("next", "reward")``, ``("next", "terminated"|"truncated"|"done")``,
    ``"episode"`` (the Minari episode id), and ``info``/``("next", "info")`` from the episodes'
    ``infos`` (infos with one row per step are the infos *after* each step; the root copy of their
    first row is zeros). Non-numeric infos (strings) are left out and listed in
    ``metadata["source"]["skipped_keys"]``; non-numeric observations or actions (text, JPEG-encoded
    images) raise.

    The first construction converts the HDF5 file once into ``<root>/<dataset_id>/``; later ones
    map those files (see :class:`OfflineDataset`).

    Args:
        dataset_id: the Minari id (``"door-human-v1"``, ``"D4RL/door/human-v2"``).
        batch_size: the default ``sample()`` size.
        root: where the converted copy goes (default ``~/.cache/rl_replay/minari``).
        minari_root: where the Minari dataset lies (default ``$MINARI_DATASETS_PATH`` or
            ``~/.minari/datasets``): the file read is
            ``<minari_root>/<dataset_id>/data/main_data.hdf5``.
        download, sampler, writer, collate_fn, pin_memory, prefetch, transform, split_trajs, generator:
            as :class:`OfflineDataset` (nothing is ever downloaded).

    Examples:
        >>> import shutil, tempfile, h5py, numpy as np
        >>> src = tempfile.mkdtemp(prefix="minari_doctest_")
        >>> os.makedirs(f"{src}/toy-v0/data")
        >>> with h5py.File(f"{src}/toy-v0/data/main_data.hdf5", "w") as f:
        ...     ep = f.create_group("episode_0")
        ...     _ = ep.create_dataset("observations", data=np.arange(4.0)[:, None])
        ...     _ = ep.create_dataset("actions", data=np.zeros((3, 1)))
        ...     _ = ep.create_dataset("rewards", data=np.ones(3))
        ...     _ = ep.create_dataset("terminations", data=np.array([False, False, True]))
        ...     _ = ep.create_dataset("truncations", data=np.zeros(3, bool))
        >>> ds = MinariExperienceReplay("toy-v0", batch_size=2, root=f"{src}/converted", minari_root=src)
        >>> ds[:]["next", "observation"].squeeze(-1).tolist(), ds[:]["next", "done"].tolist()
        ([1.0, 2.0, 3.0], [False, False, True])
        >>> shutil.rmtree(src)
    """

    default_kind = "minari"
    source_format = "minari-hdf5"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | os.PathLike | None = None,
        minari_root: str | os.PathLike | None = None,
        download: bool | str = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        split_trajs: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        self.minari_root = Path(minari_root) if minari_root is not None else default_minari_root()
        self._source_meta: dict = {}
        super().__init__(
            dataset_id,
            batch_size,
            root=root,
            download=download,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=split_trajs,
            generator=generator,
        )

    @property
    def source_path(self) -> Path:
        """The Minari HDF5 file this dataset is converted from."""
        return self.minari_root / self.dataset_id / "data" / "main_data.hdf5"

    def _source_metadata(self) -> dict:
        return self._source_meta

    def _read_minari_metadata(self) -> dict:
        path = self.source_path.parent / "metadata.json"
        if not path.exists():
            return {}
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"MinariExperienceReplay: {str(path)!r} is not valid JSON ({err}).") from err
        fmt = meta.get("data_format", "hdf5")
        if fmt != "hdf5":
            raise ValueError(
                f"MinariExperienceReplay: {self.dataset_id!r} is stored in Minari's {fmt!r} format; only 'hdf5' is read."
            )
        return {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool)) or v is None}

    def _make_tensordict(self) -> TensorDictBase:
        h5py = require_h5py()
        path = self.source_path
        if not path.exists():
            raise FileNotFoundError(
                f"MinariExperienceReplay: no local Minari dataset {self.dataset_id!r}: {str(path)!r} does not exist "
                f"(minari_root={str(self.minari_root)!r}). rl_replay never downloads; copy the dataset there "
                f"(e.g. with `minari download {self.dataset_id}`) or pass minari_root."
            )
        meta = self._read_minari_metadata()
        skipped: list[str] = []
        try:
            f = h5py.File(path, "r")
        except OSError as err:
            raise ValueError(f"MinariExperienceReplay: {str(path)!r} is not a readable HDF5 file ({err}).") from err
        with f:
            names = [k for k in f if k.startswith("episode_")]
            try:
                names.sort(key=lambda k: int(k[len("episode_") :]))
            except ValueError as err:
                raise ValueError(
                    f"MinariExperienceReplay: {str(path)!r}: episode groups must be named episode_<int>, got {names}."
                ) from err
            if not names:
                raise ValueError(
                    f"MinariExperienceReplay: {str(path)!r} holds no episode_<i> group (keys: {sorted(f.keys())})."
                )
            episodes = [self._read_episode(f[name], name, skipped) for name in names]
        episodes = [e for e in episodes if e is not None]
        if not episodes:
            raise ValueError(f"MinariExperienceReplay: every episode of {str(path)!r} is empty.")
        # infos present (with the same shape and dtype) in every episode; others are left out
        common = None
        for e in episodes:
            sig = {k: (v.shape[1:], v.dtype) for k, v in e["info"].items()}
            common = sig if common is None else {k: s for k, s in common.items() if sig.get(k) == s}
        for e in episodes:
            for k in e["info"]:
                if k not in common and f"infos/{k}" not in skipped:
                    skipped.append(f"infos/{k}")
        parts = []
        for e in episodes:
            n = e["n"]
            info = {k: v[:-1] for k, v in e["info"].items() if k in common}
            next_info = {k: v[1:] for k, v in e["info"].items() if k in common}
            parts.append(
                transitions(
                    _as_td(e["obs"], n + 1)[:-1] if isinstance(e["obs"], dict) else e["obs"][:-1],
                    _as_td(e["act"], n),
                    _as_td(e["obs"], n + 1)[1:] if isinstance(e["obs"], dict) else e["obs"][1:],
                    e["rew"],
                    e["term"],
                    e["trunc"],
                    torch.full((n,), e["id"], dtype=torch.int64),
                    _nest(info, n) if info else None,
                    _nest(next_info, n) if next_info else None,
                )
            )
        try:
            data = tdict.cat(parts) if len(parts) > 1 else parts[0]
        except (RuntimeError, KeyError, ValueError) as err:
            raise ValueError(
                f"MinariExperienceReplay: the episodes of {str(path)!r} differ in keys, shapes or dtypes ({err})."
            ) from err
        # one entry per key, whatever episode it was skipped in
        skipped = sorted({k.split("/", 1)[1] if k.startswith("episode_") else k for k in skipped})
        self._source_meta = dict(meta, path=str(path), skipped_keys=skipped)
        return data

    @staticmethod
    def _read_episode(group: Any, name: str, skipped: list) -> dict | None:
        where = f"MinariExperienceReplay: {name}"
        if not hasattr(group, "keys"):
            raise ValueError(f"{where} is not an HDF5 group.")
        missing = [k for k in _REQUIRED if k not in group]
        if missing:
            raise ValueError(f"{where} lacks {missing} (it holds {sorted(group.keys())}).")
        rew = read_h5(group["rewards"], f"{name}/rewards")
        if rew.ndim == 2 and rew.shape[1] == 1:
            rew = rew.squeeze(1)
        if rew.ndim != 1:
            raise ValueError(f"{where}/rewards: expected one value per step (shape [T]), got {list(rew.shape)}.")
        n = rew.shape[0]
        if n == 0:
            return None

        def rows(tree: Any, key: str, expected: int) -> Any:
            for leaf_name, leaf in _leaves(tree, key).items():
                if leaf.shape[0] != expected:
                    raise ValueError(f"{where}/{leaf_name}: expected {expected} rows ({n} steps), got {leaf.shape[0]}.")
            return tree

        obs = rows(read_h5(group["observations"], f"{name}/observations"), "observations", n + 1)
        act = rows(read_h5(group["actions"], f"{name}/actions"), "actions", n)
        flags = {}
        for key in ("terminations", "truncations"):
            flag = read_h5(group[key], f"{name}/{key}")
            if flag.shape != (n,):
                raise ValueError(f"{where}/{key}: expected shape [{n}], got {list(flag.shape)}.")
            flags[key] = flag.bool()
        info = {}
        if "infos" in group:
            for key, value in _leaves(read_h5(group["infos"], f"{name}/infos", skipped) or {}).items():
                if value.shape[0] == n + 1:
                    info[key] = value
                elif value.shape[0] == n:  # infos after each step only: no reset info
                    info[key] = torch.cat([value.new_zeros((1, *value.shape[1:])), value])
                else:
                    skipped.append(f"{name}/infos/{key}")
        episode_id = int(group.attrs.get("id", int(name[len("episode_") :])))
        return {
            "n": n,
            "obs": obs,
            "act": act,
            "rew": rew,
            "term": flags["terminations"],
            "trunc": flags["truncations"],
            "info": info,
            "id": episode_id,
        }
