"""OfflineDataset: a read-only replay buffer over a dataset converted once into memory-mapped files.

A loader reads its source format (Minari, D4RL, ...) a single time and writes the transitions in
the TorchRL layout (``observation``, ``action``, ``("next", "observation")``, ``("next", "reward")``,
``("next", "done" | "terminated" | "truncated")``, ``"episode"``) as a tdict memmap directory under
``<root>/<dataset_id>/``. Every later construction maps those files directly: no reconversion, no
copy into RAM. Nothing is ever downloaded: loaders read local files only.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from tdict import MemmapLoadError, TensorDict, TensorDictBase
from tdict.folders import atomic_dir
from tdict.validation import check_positive_int

from ..buffers.tensordict_buffer import TensorDictReplayBuffer
from ..samplers.base import Sampler
from ..storages.memmap import LazyMemmapStorage
from ..writers import ImmutableDatasetWriter, Writer

__all__ = ["OfflineDataset", "default_root", "require_h5py", "split_trajectories", "transitions"]

META_NAME = "rl_replay_dataset.json"
FORMAT = "rl_replay.offline_dataset"
VERSION = 1


def default_root(kind: str) -> Path:
    """Where converted datasets go by default: ``$RL_REPLAY_DATASETS/<kind>`` or ``~/.cache/rl_replay/<kind>``."""
    base = os.environ.get("RL_REPLAY_DATASETS")
    return Path(base) / kind if base else Path.home() / ".cache" / "rl_replay" / kind


def require_h5py() -> Any:
    """Imports h5py, or raises an ImportError that says how to install it."""
    try:
        import h5py
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading HDF5 datasets (Minari, D4RL) needs h5py, which is not installed: pip install rl-replay[h5py]"
        ) from err
    return h5py


def split_trajectories(data: TensorDictBase, episode_key: Any = "episode") -> TensorDictBase:
    """Pads consecutive runs of equal ``episode_key`` values into a ``[num_episodes, max_len]`` TensorDict.

    Padding is zeros; the boolean ``"mask"`` entry marks the real steps (as TorchRL's
    ``split_trajectories``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(episode=torch.tensor([0, 0, 0, 1]), obs=torch.arange(4.0), batch_size=[4])
        >>> out = split_trajectories(td)
        >>> out["obs"].tolist(), out["mask"].tolist()
        ([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]], [[True, True, True], [True, False, False]])
    """
    episode = data.get(episode_key)
    n = episode.shape[0]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = episode[1:] != episode[:-1]
    run = torch.cumsum(starts.long(), 0) - 1
    start_index = torch.nonzero(starts).squeeze(-1)
    lengths = torch.diff(torch.cat([start_index, torch.tensor([n])]))
    num, max_len = int(start_index.numel()), int(lengths.max())
    pos = torch.arange(n) - start_index[run]

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros((num, max_len, *x.shape[1:]))
        out[run, pos] = x
        return out

    out = cast(TensorDictBase, data.apply(pad, batch_size=[num, max_len]))  # pad returns a tensor for every leaf
    mask = torch.zeros(num, max_len, dtype=torch.bool)
    mask[run, pos] = True
    out.set("mask", mask)
    return out


def transitions(
    observation: Any,
    action: Any,
    next_observation: Any,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    episode: torch.Tensor,
    info: Any = None,
    next_info: Any = None,
) -> TensorDictBase:
    """Builds the TorchRL step layout (per-step scalars without a trailing dim; ``done = terminated | truncated``)."""
    n = episode.shape[0]
    nxt = {
        "observation": next_observation,
        "reward": reward,
        "done": terminated | truncated,
        "terminated": terminated,
        "truncated": truncated,
    }
    if next_info is not None:
        nxt["info"] = next_info
    root = {"observation": observation, "action": action, "episode": episode, "next": TensorDict(nxt, batch_size=[n])}
    if info is not None:
        root["info"] = info
    return TensorDict(root, batch_size=[n])


def read_h5(node: Any, name: str, skipped: list | None = None) -> Any:
    """Reads an h5py dataset into a tensor, or a group into a dict of them (recursively).

    Numeric and boolean leaves only: others (strings, encoded images, references) raise a
    ValueError naming ``name``, or, when ``skipped`` is a list, are left out and their names appended.
    """
    if hasattr(node, "keys"):  # a group
        out = {}
        for key in node:
            value = read_h5(node[key], f"{name}/{key}", skipped)
            if value is not None:
                out[key] = value
        return out
    dtype = node.dtype
    if dtype.kind not in "biuf" or dtype.shape or dtype.names is not None:
        if skipped is not None:
            skipped.append(name)
            return None
        raise ValueError(f"{name!r}: only numeric and boolean arrays can be stored, got HDF5 dtype {dtype}.")
    if node.ndim == 0:
        if skipped is not None:
            skipped.append(name)
            return None
        raise ValueError(f"{name!r}: expected an array with one row per step, got a scalar.")
    return torch.from_numpy(node[()])


def _check_dataset_id(dataset_id: Any) -> str:
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise ValueError(f"dataset_id must be a non-empty str, got {dataset_id!r}.")
    parts = Path(dataset_id).parts
    if Path(dataset_id).is_absolute() or any(p in ("..", ".") for p in parts):
        raise ValueError(f"dataset_id must be a relative name without '.'/'..' parts, got {dataset_id!r}.")
    return dataset_id


class OfflineDataset(TensorDictReplayBuffer):
    """A read-only :class:`TensorDictReplayBuffer` over a dataset stored as memory-mapped files.

    Subclasses implement :meth:`_make_tensordict` (read the source, return one TensorDict of batch
    ``[num_steps]`` in the TorchRL layout) and may set :meth:`_source_metadata`. The first
    construction converts the source into ``<root>/<dataset_id>/`` (written into a temporary
    directory, then renamed: a crash never leaves a half-converted dataset); later ones map the
    files directly. ``converted`` tells whether this construction converted.

    Args:
        dataset_id: the dataset's name (the folder under ``root``; may hold ``/`` namespaces).
        batch_size: the default ``sample()`` size.
        root: where converted datasets live (default :func:`default_root` of the loader's kind).
        download: nothing is ever downloaded (no network access). ``False``/``True``: convert from
            the local source if no converted copy exists, else load it; ``"force"``: rebuild the
            converted copy from the source.
        sampler: default :class:`RandomSampler` (pass a ``SliceSampler(traj_key="episode", ...)``
            for sub-trajectories).
        writer: default :class:`ImmutableDatasetWriter` (writes are refused).
        collate_fn, pin_memory, prefetch, transform, generator: as :class:`ReplayBuffer`.
        split_trajs: store one zero-padded episode per item (``[num_episodes, max_len]``, with a
            ``"mask"`` entry), converted once into ``<root>/<dataset_id>_split``.

    Examples:
        >>> import shutil, tempfile, torch
        >>> from tdict import TensorDict
        >>> class Counting(OfflineDataset):
        ...     default_kind = "counting"
        ...     def _make_tensordict(self):
        ...         return TensorDict(observation=torch.arange(10.0), episode=torch.arange(10) // 5, batch_size=[10])
        >>> root = tempfile.mkdtemp(prefix="offline_doctest_")
        >>> ds = Counting("count-v0", batch_size=4, root=root)
        >>> ds.converted, len(ds), ds.sample()["observation"].shape
        (True, 10, torch.Size([4]))
        >>> Counting("count-v0", batch_size=4, root=root).converted  # mapped from disk, not reconverted
        False
        >>> shutil.rmtree(root)
    """

    default_kind = "offline"
    source_format = "tensordict"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | os.PathLike | None = None,
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
        self.dataset_id = _check_dataset_id(dataset_id)
        if download not in (False, True, "force"):
            raise ValueError(f"download must be False, True or 'force', got {download!r}.")
        check_positive_int(type(self).__name__, "batch_size", batch_size, allow_none=True)
        self._root = Path(root) if root is not None else default_root(self.default_kind)
        self.download = download
        self.split_trajs = bool(split_trajs)
        self.converted = False
        if download == "force" or not self._is_downloaded():
            self._convert()
            self.converted = True
        data, self.metadata = self._load(self.data_path_root)
        if self.split_trajs:
            if self.converted or not (self.data_path / META_NAME).exists():
                split = split_trajectories(data)
                meta = dict(self.metadata, split_trajs=True, num_items=int(split.batch_size[0]))
                # a split copy made by a concurrent process from the same data is kept (not after a reconversion)
                atomic_dir(
                    self.data_path,
                    lambda tmp: self._write(Path(tmp), split, meta),
                    marker=META_NAME,
                    overwrite=self.converted,
                )
            data, self.metadata = self._load(self.data_path)
        # the storage maps the converted files (validated above) on first use; pickling it into
        # another process sends the directory name, not the data. Its item count starts full.
        storage = LazyMemmapStorage(int(data.batch_size[0]), scratch_dir=self.data_path, existsok=True)
        storage._len_t.fill_(data.batch_size[0])
        super().__init__(
            storage=storage,
            sampler=sampler,
            writer=writer if writer is not None else ImmutableDatasetWriter(),
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
        )

    # ------------------------------------------------------------------ paths (TorchRL names)
    @property
    def root(self) -> Path:
        """The folder that holds converted datasets (``<root>/<dataset_id>/``)."""
        return self._root

    @property
    def data_path_root(self) -> Path:
        """The converted dataset (flat steps)."""
        return self._root / self.dataset_id

    @property
    def data_path(self) -> Path:
        """The directory this buffer maps (the split copy when ``split_trajs``)."""
        return self._root / (self.dataset_id + "_split") if self.split_trajs else self.data_path_root

    def _is_downloaded(self) -> bool:
        """Whether a converted copy exists (its metadata file is written last, before the rename)."""
        return (self.data_path_root / META_NAME).exists()

    def delete(self) -> None:
        """Deletes the converted copies (flat and split) from disk; the source files stay."""
        for path in {self.data_path_root, self._root / (self.dataset_id + "_split")}:
            shutil.rmtree(path, ignore_errors=True)

    @property
    def num_episodes(self) -> int:
        """The number of episodes in the dataset (0 when the source has no episode ids)."""
        return int(self.metadata.get("num_episodes", 0))

    # ------------------------------------------------------------------ subclass hooks
    def _make_tensordict(self) -> TensorDictBase:
        """Reads the source and returns every step as one TensorDict of batch ``[num_steps]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _make_tensordict().")

    def _source_metadata(self) -> dict:
        """JSON-able facts about the source, stored next to the converted data."""
        return {}

    # ------------------------------------------------------------------ conversion and loading
    def _convert(self) -> None:
        data = self._make_tensordict()  # reads and validates the source before anything is written
        if not isinstance(data, TensorDictBase) or data.batch_dims != 1 or data.batch_size[0] == 0:
            got = list(data.batch_size) if isinstance(data, TensorDictBase) else type(data).__name__
            raise ValueError(
                f"{type(self).__name__}._make_tensordict must return a non-empty TensorDict of batch [num_steps], got {got}."
            )
        meta = {
            "dataset_id": self.dataset_id,
            "loader": type(self).__name__,
            "source_format": self.source_format,
            "num_steps": int(data.batch_size[0]),
            "num_items": int(data.batch_size[0]),
            "split_trajs": False,
        }
        if "episode" in data:
            episode = data.get("episode")
            meta["num_episodes"] = int(torch.unique_consecutive(episode).numel())
        meta["source"] = self._source_metadata()
        # a copy that a concurrent conversion committed first is kept, unless rebuilding was asked for
        atomic_dir(
            self.data_path_root,
            lambda tmp: self._write(Path(tmp), data, meta),
            marker=META_NAME,
            overwrite=self.download == "force",
        )
        # a previous split copy was made from the old data
        shutil.rmtree(self._root / (self.dataset_id + "_split"), ignore_errors=True)

    @staticmethod
    def _write(path: Path, data: TensorDictBase, meta: dict) -> None:
        data.memmap(path)
        meta = dict(meta, format=FORMAT, version=VERSION)
        with open(path / META_NAME, "w", encoding="utf-8") as f:
            json.dump(meta, f, allow_nan=False)

    def _load(self, path: Path) -> tuple[TensorDictBase, dict]:
        hint = "delete it or pass download='force' to rebuild it from the source"
        try:
            with open(path / META_NAME, encoding="utf-8") as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{type(self).__name__}: no converted dataset at {str(path)!r} ({META_NAME} is missing)."
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RuntimeError(
                f"{type(self).__name__}: the converted dataset at {str(path)!r} is corrupt ({META_NAME}: {err}); {hint}."
            ) from err
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise RuntimeError(
                f"{type(self).__name__}: {str(path / META_NAME)!r} is not an rl_replay dataset of version {VERSION} "
                f"(format {meta.get('format') if isinstance(meta, dict) else None!r}); {hint}."
            )
        try:
            data = TensorDict.load_memmap(path)
        except (MemmapLoadError, OSError) as err:
            raise RuntimeError(
                f"{type(self).__name__}: the converted dataset at {str(path)!r} is corrupt ({err}); {hint}."
            ) from err
        if data.batch_dims < 1 or data.batch_size[0] != meta.get("num_items"):
            raise RuntimeError(
                f"{type(self).__name__}: the converted dataset at {str(path)!r} holds {list(data.batch_size)} items, "
                f"its metadata says {meta.get('num_items')}; {hint}."
            )
        return data, meta

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset_id={self.dataset_id!r}, items={len(self)}, path={str(self.data_path)!r}, "
            f"sampler={type(self.sampler).__name__}, batch_size={self.batch_size})"
        )
